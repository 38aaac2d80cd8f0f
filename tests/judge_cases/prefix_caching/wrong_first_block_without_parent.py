"""Wrong: the first block is hashed on its own instead of with NONE_HASH as its parent.

EXPECT: hash 0 is not hash_block(NONE_HASH, block 0)
PUBLIC: caught
"""

import hashlib

NONE_HASH = 0


def hash_block(parent_hash, token_ids):
    text = f"{parent_hash}|{','.join(str(t) for t in token_ids)}"
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


def block_hashes(token_ids, block_size):
    out, parent = [], None
    for i in range(len(token_ids) // block_size):
        block = token_ids[i * block_size:(i + 1) * block_size]
        parent = hash(tuple(block)) if parent is None else hash_block(parent, block)
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
