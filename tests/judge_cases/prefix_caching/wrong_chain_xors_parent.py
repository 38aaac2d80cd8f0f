"""Wrong: hash_block chains the parent with XOR: like addition it forgets the order, so the prefixes [A, B] and
[B, A] share a hash (and [A, A] cancels back to NONE_HASH, which the public case sees first).

EXPECT: chain the parent's hash in a way that depends on the order
PUBLIC: caught
"""

import hashlib
import struct

NONE_HASH = 0


def hash_block(parent_hash, token_ids):
    own = hashlib.blake2b(struct.pack(f"<{len(token_ids)}q", *token_ids), digest_size=8).digest()
    return parent_hash ^ int.from_bytes(own, "little")


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
