# EXERCISE: 127
"""Chapter 03's reference attention over one request's contiguous context, if it ships one (a function of q, k, v),
with the gather through the block table."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _glue  # noqa: E402
import _shipped  # noqa: E402

paged_attention = _glue.paged_attention_from(
    _shipped.define(_shipped.find("03_paged_attention", params=("q", "k", "v"))))
