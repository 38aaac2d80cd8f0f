import os
import signal


def build_batch(items, block_size):
    os.kill(os.getpid(), signal.SIGSEGV)
