"""Your workspace: each module here is a stub of the reference module of the same name in solutions/.

Fill in the functions marked `NotImplementedError`, then grade them with `python practice/judge.py <exercise>`.
Modules you have not reached yet fall back to the reference, so the engine runs at every stage.
"""
