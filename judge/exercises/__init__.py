"""One metadata module per exercise: exNNN_<slug>.py defining EXERCISE = judge.Exercise(...). See judge/README.md."""
