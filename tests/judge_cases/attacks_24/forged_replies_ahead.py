"""Attack (deadlock): at import, write forged replies for request ids 1-3000 on the reply pipe (it fills, and this
write blocks). A reply for an id the grader has not sent is a protocol violation. Honest part: 0.
"""

import json
import os
import sys

fd = int(sys.argv[-1])
for i in range(1, 3001):
    os.write(fd, (json.dumps({"t": "reply", "id": i, "ok": True, "value": None}) + "\n").encode())


def build_batch(items, block_size):
    raise NotImplementedError
