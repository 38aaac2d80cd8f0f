# VIOLATES: Under the KV-cache manager, a shared prefix is computed once and outputs are unchanged
"""lookup finds nothing, so every prefix is computed again. The sentence states what the other rules give together, so no
solution breaks it alone: this one is checked to fail the end-to-end case its row names."""
import hashlib

NONE_HASH = 0


def hash_block(parent_hash, token_ids):
    text = str(parent_hash) + ":" + ",".join(str(int(t)) for t in token_ids)
    return int.from_bytes(hashlib.sha1(text.encode()).digest()[:8], "little")


def block_hashes(token_ids, block_size):
    out, parent = [], NONE_HASH
    for start in range(0, len(token_ids) - block_size + 1, block_size):
        parent = hash_block(parent, token_ids[start:start + block_size])
        out.append(parent)
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
        return found

    def insert(self, block_hash, block_id):
        if block_hash in self.block_of or block_id in self.hash_of:
            return
        self.block_of[block_hash] = block_id
        self.hash_of[block_id] = block_hash

    def evict(self, block_id):
        if block_id in self.hash_of:
            del self.block_of[self.hash_of.pop(block_id)]
