"""The reference model runner, driven by your own batch layout (128), cache writes (126) and attention (127)."""

from solutions.model_runner import ModelRunner as _ReferenceRunner

from .batch import build_batch
from .paged_attention import paged_attention
from .paged_kv_cache import write_kv


class ModelRunner(_ReferenceRunner):
    build_batch = staticmethod(build_batch)
    write_kv = staticmethod(write_kv)
    paged_attention = staticmethod(paged_attention)
