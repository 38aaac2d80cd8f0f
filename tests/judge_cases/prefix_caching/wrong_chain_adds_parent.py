"""Wrong: hash_block chains the parent by adding its hash to the block's own (mod 2**64): addition does not care
about order, so the prefixes [A, B] and [B, A] get one hash, and a prompt finds the K and V of another's blocks in
the other order (block_hashes([1, ..., 8], 4)[-1] == block_hashes([5, 6, 7, 8, 1, 2, 3, 4], 4)[-1]).

EXPECT: chain the parent's hash in a way that depends on the order
PUBLIC: caught
"""

NONE_HASH = 0


def hash_block(parent_hash, token_ids):
    return (parent_hash + hash(tuple(token_ids))) % 2 ** 64


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
