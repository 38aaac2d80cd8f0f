"""Attack on 132: no PrefixCache. The driver's cache_ops is replaced at import by one that reports no lookups at
all; a grader that zipped them with the reference's lookups compared nothing (the four PrefixCache cases passed)."""

import judge.drivers.prefix_cache as driver

NONE_HASH = 0


def hash_block(parent_hash, token_ids):
    raise NotImplementedError


def block_hashes(token_ids, block_size):
    raise NotImplementedError


class PrefixCache:
    pass


driver.cache_ops = lambda impl, ops: {"lookups": []}
