# EXERCISE: 128
"""Chapter 04's function of (items, block_size) beside build_batch (a per-token version, or a check), as build_batch."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _glue  # noqa: E402
import _shipped  # noqa: E402

build_batch = _glue.build_batch_from(_shipped.define(_shipped.find("04_mixed_batch", params=("items", "block_size"))))
