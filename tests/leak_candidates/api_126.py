# EXERCISE: 126
"""Whatever the edition ships under the names of exercise 126's API (compute_slot_mapping, write_kv): a function,
class or method so named, as it is."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _shipped  # noqa: E402

globals().update(_shipped.named("compute_slot_mapping", "write_kv"))
