"""The reference KV-cache manager, on your own block pool (125) and prefix cache (132)."""

from solutions.kv_cache_manager import KVCacheManager as _ReferenceManager

from .block_pool import BlockPool
from .prefix_cache import PrefixCache, block_hashes


class KVCacheManager(_ReferenceManager):
    block_pool_cls = BlockPool
    prefix_cache_cls = PrefixCache
    block_hashes = staticmethod(block_hashes)
