# VIOLATES: Equal hashes mean equal prefixes
"""Each block's parent is its index, not the previous block's hash: equal blocks at the same place after different prefixes
get equal hashes."""
import hashlib

NONE_HASH = 0


def hash_block(parent_hash, token_ids):
    text = str(parent_hash) + ":" + ",".join(str(int(t)) for t in token_ids)
    return int.from_bytes(hashlib.sha1(text.encode()).digest()[:8], "little")


def block_hashes(token_ids, block_size):
    out, parent = [], NONE_HASH
    for start in range(0, len(token_ids) - block_size + 1, block_size):
        out.append(hash_block(start // block_size, token_ids[start:start + block_size]))
    return out


class PrefixCache:
    def __init__(self):
        self.block_of = {}
        self.hash_of = {}

    def lookup(self, hashes):
        found = []
        for h in hashes:
            if h not in self.block_of:
                break
            found.append(self.block_of[h])
        return found

    def insert(self, block_hash, block_id):
        if block_hash in self.block_of or block_id in self.hash_of:
            return
        self.block_of[block_hash] = block_id
        self.hash_of[block_id] = block_hash

    def evict(self, block_id):
        if block_id in self.hash_of:
            del self.block_of[self.hash_of.pop(block_id)]
