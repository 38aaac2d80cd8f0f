"""Grade your practice exercises: `python practice/judge.py 128` (see --help, which says what this copy grades with).

In the course's repository it runs each exercise's hidden cases; in a student edition, which has no hidden cases,
the public ones (a worked example and a few cases over the whole contract); your instructor grades the hidden ones.
"""

import os
import sys

# Run as a script, sys.path[0] is practice/, where this very file would shadow the `judge` package.
_here = os.path.dirname(os.path.abspath(__file__))
_root = os.path.dirname(_here)
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _here]
sys.path.insert(0, _root)
if getattr(sys.modules.get("judge"), "__file__", None) == os.path.abspath(__file__):
    del sys.modules["judge"]

from judge.cli import run  # noqa: E402

if __name__ == "__main__":
    sys.exit(run())
