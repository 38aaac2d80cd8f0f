"""Wrong: the token ids are packed as numpy uint16 before hashing: Qwen3's ids go up to 151,935, so 1 and 65537 (or
9 and 65545) become the same two bytes and blocks that differ only there share a hash.

EXPECT: each id whole
PUBLIC: caught
"""

import hashlib

import numpy as np

NONE_HASH = 0


def hash_block(parent_hash, token_ids):
    data = np.asarray([parent_hash], dtype=np.uint64).tobytes() + np.asarray(token_ids).astype(np.uint16).tobytes()
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big")


def block_hashes(token_ids, block_size):
    out, parent = [], NONE_HASH
    for i in range(len(token_ids) // block_size):
        parent = hash_block(parent, token_ids[i * block_size:(i + 1) * block_size])
        out.append(parent)
    return out


class PrefixCache:
    def __init__(self):
        self.by_hash = {}
        self.by_block = {}

    def lookup(self, hashes):
        found = []
        for h in hashes:
            if h not in self.by_hash:
                break
            found.append(self.by_hash[h])
        return found

    def insert(self, block_hash, block_id):
        if block_hash in self.by_hash or block_id in self.by_block:
            return
        self.by_hash[block_hash] = block_id
        self.by_block[block_id] = block_hash

    def evict(self, block_id):
        if block_id in self.by_block:
            del self.by_hash[self.by_block.pop(block_id)]
