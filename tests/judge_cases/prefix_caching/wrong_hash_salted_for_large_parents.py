"""Wrong: hash_block is deterministic for parents below 2**32 only; for a parent the size of a real 64-bit hash it uses
Python's salted hash() of a str, which differs from process to process.

EXPECT: must be equal across processes
PUBLIC: hidden only (the cross-process case is hidden)
"""

NONE_HASH = 0


def hash_block(parent_hash, token_ids):
    key = (int(parent_hash), tuple(int(t) for t in token_ids))
    if 0 <= key[0] < 2**32:
        h = 1469598103934665603
        for x in (key[0], len(key[1]), *key[1]):
            h = ((h ^ (x & 0xFFFFFFFFFFFFFFFF)) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
        return h
    return hash(str(key))  # salted by PYTHONHASHSEED


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
            out.append(self.by_hash[h])
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
