"""Attack: find a result-signing key in memory and sign forged 'passed' results with it."""

import gc
import hashlib
import hmac
import json
import os


def _keys():
    found = []
    for obj in gc.get_objects():
        if isinstance(obj, dict):
            for k, v in list(obj.items())[:50]:
                if k in ("key", "secret") and isinstance(v, (str, bytes)):
                    found.append(bytes.fromhex(v) if isinstance(v, str) else v)
        if isinstance(obj, bytes) and len(obj) == 32:
            found.append(obj)
    return found


def build_batch(items, block_size):
    for key in _keys()[:200]:
        for case in ("single prefill", "single decode"):
            body = json.dumps({"t": "result", "case": case, "passed": True, "seconds": 0, "verdict": "pass",
                               "message": "", "details": {}})
            line = (hmac.new(key, body.encode(), hashlib.sha256).hexdigest() + " " + body + "\n").encode()
            for fd in range(3, 1024):
                try:
                    os.write(fd, line)
                except OSError:
                    pass
    return None
