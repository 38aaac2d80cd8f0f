"""The KV-cache manager on the reference block pool (exercise 125) and prefix cache (exercise 132)."""

from framework.kv_cache_manager import KVCacheManagerBase, blocks_needed  # noqa: F401

from .block_pool import BlockPool
from .prefix_cache import PrefixCache, block_hashes


class KVCacheManager(KVCacheManagerBase):
    block_pool_cls = BlockPool
    prefix_cache_cls = PrefixCache
    block_hashes = staticmethod(block_hashes)
