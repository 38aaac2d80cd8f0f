"""Attack (stall): at import, write lines that are not JSON on the reply pipe, without end. The import time limit
stops it (before the fix, the deadline was never checked while lines kept coming). Honest part: 0.
"""

import os
import sys

fd = int(sys.argv[-1])  # the worker's reply pipe
while True:
    os.write(fd, b"not a message\n" * 100)


def build_batch(items, block_size):
    raise NotImplementedError
