# EXERCISE: 136
"""Whatever the edition ships under the names of exercise 136's API (apply_grammar_bitmask, update_grammar): a
function, class or method so named, as it is."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _shipped  # noqa: E402

globals().update(_shipped.named("apply_grammar_bitmask", "update_grammar"))
