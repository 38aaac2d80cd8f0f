"""Wrong: hash_block hashes only the first 4 tokens of a block: with blocks of 4 everything holds, with vLLM's 16
two prompts that differ after a block's 4th token share its cached K and V.

EXPECT: hash every token, in order
PUBLIC: caught
"""

import hashlib
import struct

NONE_HASH = 0


def hash_block(parent_hash, token_ids):
    data = struct.pack(f"<q{len(token_ids[:4])}q", parent_hash, *token_ids[:4])
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little", signed=True)


def block_hashes(token_ids, block_size):
    hashes = []
    for start in range(0, len(token_ids) - block_size + 1, block_size):
        hashes.append(hash_block(hashes[-1] if hashes else NONE_HASH, token_ids[start:start + block_size]))
    return hashes


class PrefixCache:
    def __init__(self):
        self.blocks = {}

    def lookup(self, hashes):
        found = []
        for h in hashes:
            if h not in self.blocks:
                break
            found.append(self.blocks[h])
        return found

    def insert(self, block_hash, block_id):
        if block_hash not in self.blocks and block_id not in self.blocks.values():
            self.blocks[block_hash] = block_id

    def evict(self, block_id):
        for h, b in list(self.blocks.items()):
            if b == block_id:
                del self.blocks[h]
