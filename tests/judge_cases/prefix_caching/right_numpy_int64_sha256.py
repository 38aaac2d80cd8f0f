"""Correct: the parent hash and the token ids as one numpy int64 array (8 bytes an id, so every id of Qwen3's
151,936 is whole), its bytes through sha256, the first 8 bytes of the digest as a signed int (so a parent it
returned packs into an int64 again). Two dictionaries for the cache.
"""

import hashlib

import numpy as np

NONE_HASH = 0


def hash_block(parent_hash, token_ids):
    data = np.asarray([parent_hash, *token_ids], dtype=np.int64).tobytes()
    return int.from_bytes(hashlib.sha256(data).digest()[:8], "little", signed=True)


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
