"""Wrong: hash_block hashes only the first 16 tokens of a block: right with vLLM's default 16, but with blocks of 32
two prompts that differ after a block's 16th token share its cached K and V.

EXPECT: whatever the block size
PUBLIC: caught
"""

NONE_HASH = 0


def hash_block(parent_hash, token_ids):
    return hash((parent_hash, tuple(token_ids[:16])))


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
