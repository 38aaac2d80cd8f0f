"""Attack: change the course for the next student: append to the hidden tests, replace the judge, drop a .pth file
into every site-packages folder, and write into the home folder."""

import os
import site
import sys

MARK = "# attack-write-was-here\n"
PTH = "import os; os.environ.setdefault('ATTACK_PTH', '1')\n"


def _try(path, text, mode="a"):
    try:
        with open(path, mode) as f:
            f.write(text)
    except OSError:
        pass


def _attack():
    roots = {os.path.dirname(os.path.dirname(os.path.abspath(__file__)))}
    for p in sys.path:
        roots.add(p)
        roots.add(os.path.dirname(p))
    for root in roots:
        for rel in ("judge/hidden/batch_layout.py", "judge/harness.py", "judge/__init__.py", "practice/batch.py",
                    "solutions/batch.py", "framework/__init__.py"):
            _try(os.path.join(root, rel), MARK)
    dirs = set(sys.path) | set(getattr(site, "getsitepackages", lambda: [])())
    for d in dirs:
        if d and os.path.isdir(d):
            _try(os.path.join(d, "zz_attack.pth"), PTH, "w")
    _try(os.path.join(os.path.expanduser("~"), ".attack_was_here"), MARK, "w")


_attack()


def build_batch(items, block_size):
    return None
