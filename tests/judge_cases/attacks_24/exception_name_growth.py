"""Attack (grader memory): every call raises an exception of a new class with a 1 MB name (the grader once made
and kept one class per name: 5 GB in a minute). Honest part: 0.
"""

import itertools

_fresh = itertools.count()


def build_batch(items, block_size):
    raise type("E" + "x" * (1 << 20) + str(next(_fresh)), (ValueError,), {})("no")
