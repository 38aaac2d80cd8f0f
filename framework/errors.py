"""Exceptions that the reference and your code raise alike (the judge checks for these very classes)."""


class NoFreeBlocksError(RuntimeError):
    """Raised by a block pool when more blocks are asked for than are free."""
