"""Wrong: lookup returns the right block ids as floats and strings, which no block table can hold.

EXPECT: it must return a list of block ids
PUBLIC: caught
"""

import hashlib

NONE_HASH = 0


def hash_block(parent_hash, token_ids):
    d = hashlib.sha256(repr((int(parent_hash), [int(t) for t in token_ids])).encode()).digest()
    return int.from_bytes(d[:8], "big")


def block_hashes(token_ids, block_size):
    out, parent = [], NONE_HASH
    for i in range(len(token_ids) // block_size):
        parent = hash_block(parent, token_ids[i * block_size:(i + 1) * block_size])
        out.append(parent)
    return out


class PrefixCache:
    def __init__(self):
        self.by_hash, self.by_block = {}, {}

    def lookup(self, hashes):
        out = []
        for h in hashes:
            if h not in self.by_hash:
                break
            out.append(float(self.by_hash[h]) if len(out) % 2 == 0 else str(self.by_hash[h]))
        return out

    def insert(self, block_hash, block_id):
        if block_hash in self.by_hash or block_id in self.by_block:
            return
        self.by_hash[block_hash] = block_id
        self.by_block[block_id] = block_hash

    def evict(self, block_id):
        h = self.by_block.pop(block_id, None)
        if h is not None:
            self.by_hash.pop(h, None)
