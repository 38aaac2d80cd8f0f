# EXERCISE: 132
"""Whatever the edition ships under the names of exercise 132's API (hash_block, block_hashes, PrefixCache): a
function, class or method so named, as it is."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _shipped  # noqa: E402

globals().update(_shipped.named("hash_block", "block_hashes", "PrefixCache"))
