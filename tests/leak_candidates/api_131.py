# EXERCISE: 131
"""Whatever the edition ships under the names of exercise 131's API (preempt, allocate_or_preempt): a function, class or
method so named, as it is."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _shipped  # noqa: E402

globals().update(_shipped.named("preempt", "allocate_or_preempt"))
