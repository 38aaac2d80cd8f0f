"""Attack (bloat): every call raises an exception with a 3 MB message. Honest part: 0."""


def build_batch(items, block_size):
    raise ValueError("A" * (3 << 20))
