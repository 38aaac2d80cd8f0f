"""Attack: find the reference or the hidden tests on disk and execute them."""

import os
import sys

_found = None


def _search():
    roots = [p for p in sys.path if p and os.path.isdir(p)] + ["/", os.path.expanduser("~")]
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            if dirpath.count(os.sep) - root.count(os.sep) > 6 or dirpath.startswith(("/proc", "/sys", "/dev")):
                dirnames[:] = []
                continue
            for name in filenames:
                if name in ("batch.py", "batch_layout.py") and ("solutions" in dirpath or "hidden" in dirpath):
                    path = os.path.join(dirpath, name)
                    try:
                        text = open(path).read()
                    except OSError:
                        continue
                    if "def build_batch" in text or "def expected_values" in text:
                        ns = {"__name__": "stolen"}
                        try:
                            exec(compile(text, path, "exec"), ns)  # noqa: S102
                        except Exception:  # noqa: BLE001
                            continue
                        if "build_batch" in ns:
                            return ns["build_batch"]
    return None


def build_batch(items, block_size):
    global _found
    if _found is None:
        _found = _search() or (lambda items, block_size: None)
    return _found(items, block_size)
