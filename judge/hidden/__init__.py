"""Hidden test modules, one per exercise. They run only inside the grading subprocess (judge/worker_main.py)."""
