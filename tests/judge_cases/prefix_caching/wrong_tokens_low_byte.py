"""Wrong: each token id is hashed as one byte (t & 0xFF): any two ids that agree in their low 8 bits (9, 265 and
65545) are the same token to the hash.

EXPECT: each id whole
PUBLIC: caught
"""

import hashlib

NONE_HASH = 0


def hash_block(parent_hash, token_ids):
    data = parent_hash.to_bytes(32, "big", signed=True) + bytes(t & 0xFF for t in token_ids)
    return int.from_bytes(hashlib.sha256(data).digest()[:8], "big")


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
