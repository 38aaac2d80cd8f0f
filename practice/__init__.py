"""Your workspace: each module here mirrors the reference module of the same name in solutions/.

Fill in what raises `NotImplementedError`, then grade it with `python practice/judge.py <exercise>`
(`python practice/judge.py list` shows them all). Set COURSE_IMPL=practice to run the chapters on your code: each
module is yours once its exercise passed (your last judge run, on the file as it is now), the reference until
then; the first cell of every chapter prints which is which.
"""
