# EXERCISE: 126
"""write_kv: chapter 03's check of write_kv, if it writes the expected cache itself in a loop over the slots
(`cache[s // block_size, s % block_size] = ...`), run with its names bound to write_kv's arguments.
compute_slot_mapping: the per-token loop chapter 09 ships beside build_batch, on one request."""

import ast
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _shipped  # noqa: E402


def _writes_by_slot(node: ast.AST) -> bool:
    return isinstance(node, ast.For) and any(
        isinstance(t, ast.Subscript) and "// block_size" in ast.unparse(t.slice)
        for stmt in node.body if isinstance(stmt, ast.Assign) for t in stmt.targets)


_source = _shipped.chapter_source("03_paged_attention")
_loops = [n for n in ast.walk(ast.parse(_source)) if _writes_by_slot(n)]
if not _loops:
    raise _shipped.NotShipped("chapters/03_paged_attention.ipynb writes no cache rows in a loop over slots")
_loop = compile(ast.Module([_loops[0]], []), "<shipped>", "exec")
_per_token = _shipped.define(_shipped.find("09_performance", params=("items", "block_size")))


def write_kv(key_cache, value_cache, key, value, slot_mapping):
    exec(_loop, {"slots": slot_mapping.tolist(), "block_size": key_cache.shape[1], "key": key, "value": value,
                 "expected_k": key_cache, "expected_v": value_cache})


def compute_slot_mapping(block_table, start, end, block_size):
    if end > len(block_table) * block_size:
        raise ValueError("the range ends past the block table")
    if end <= start:
        return []
    fields = _per_token([([0] * (end - start), start, list(block_table), True)], block_size)
    slots = fields["slot_mapping"] if isinstance(fields, dict) else fields[2]
    return [int(s) for s in slots]
