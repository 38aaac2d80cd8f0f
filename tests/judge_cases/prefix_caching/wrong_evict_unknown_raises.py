"""Wrong: evict of a block the cache does not hold raises KeyError (it must do nothing); otherwise as
right_sha256_two_dicts.py.

EXPECT: KeyError
PUBLIC: caught
"""

import hashlib

NONE_HASH = 0


def hash_block(parent_hash, token_ids):
    text = f"{parent_hash}|{','.join(str(t) for t in token_ids)}"
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


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
        del self.by_hash[self.by_block.pop(block_id)]  # KeyError for a block the cache does not hold
