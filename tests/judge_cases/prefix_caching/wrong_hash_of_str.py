"""Wrong: the block hash is Python's hash of a string, which PYTHONHASHSEED salts per process, so two processes
(or two runs of the engine) name the same block differently.

EXPECT: block hashes must be equal across processes
PUBLIC: hidden only (only a second process, with another PYTHONHASHSEED, shows it)
"""

from itertools import takewhile

NONE_HASH = 0


def hash_block(parent_hash, token_ids):
    return hash(f"{parent_hash}:{','.join(map(str, token_ids))}")  # a str: salted per process


def block_hashes(token_ids, block_size):
    full = len(token_ids) - len(token_ids) % block_size
    hashes = []
    for start in range(0, full, block_size):
        hashes.append(hash_block(hashes[-1] if hashes else NONE_HASH, tuple(token_ids[start:start + block_size])))
    return hashes


class PrefixCache:
    def __init__(self):
        self.blocks = {}  # hash -> block id
        self.owner = {}   # block id -> hash

    def lookup(self, hashes):
        return [self.blocks[h] for h in takewhile(self.blocks.__contains__, hashes)]

    def insert(self, block_hash, block_id):
        if self.blocks.get(block_hash) is None and block_id not in self.owner:
            self.blocks[block_hash] = block_id
            self.owner[block_id] = block_hash

    def evict(self, block_id):
        self.blocks.pop(self.owner.pop(block_id, None), None)
