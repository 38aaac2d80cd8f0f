"""Driver of exercise 125 (BlockPool): a script of calls run on the learner's pool, beside it. It reads only what
the statement makes public (what each call returned or raised, `pool.num_blocks`, `list(pool.ref_cnt)`,
`pool.num_free_blocks`), so the learner may keep the free queue and the counts however they like."""

from __future__ import annotations

import operator
import re
from types import ModuleType
from typing import Any

from judge.crossing import learner_error
from judge.harness import holds_tensor, int_values

NO_FREE = "NoFreeBlocksError"
READ = "pool.num_blocks / pool.ref_cnt / pool.num_free_blocks"  # what the engine reads of a pool
LOOK_ALIKE = "NoFreeBlocksError (a class of your own, not framework.errors.NoFreeBlocksError)"


def raised_name(exc: BaseException) -> str:
    """The contract's name for an exception, by isinstance: a ValueError subclass is a ValueError; a class that is
    only named NoFreeBlocksError is not the one the engine catches."""
    from framework.errors import NoFreeBlocksError

    if isinstance(exc, NoFreeBlocksError):
        return NO_FREE
    if isinstance(exc, ValueError):
        return "ValueError"
    if any(c.__name__ == NO_FREE for c in type(exc).__mro__):
        return LOOK_ALIKE
    return type(exc).__name__


def state(pool: Any) -> dict[str, Any]:
    """{"num_blocks": n, "ref_cnt": [...], "num_free_blocks": n}, or {"problem": why it cannot be read}."""
    try:
        num_blocks, ref_cnt, nfree = pool.num_blocks, pool.ref_cnt, pool.num_free_blocks
    except Exception as exc:  # noqa: BLE001 - e.g. AttributeError, NotImplementedError in the property
        return {"problem": f"reading {READ}", "_error": learner_error(exc)}
    if isinstance(num_blocks, bool) or not hasattr(num_blocks, "__index__"):
        return {"problem": f"pool.num_blocks is {str(num_blocks)[:200]} ({type(num_blocks).__name__}); expected an "
                           "int, the number of blocks the pool was made with"}
    counts = int_values(ref_cnt)
    if counts is None:
        return {"problem": f"pool.ref_cnt is {str(ref_cnt)[:200]} ({type(ref_cnt).__name__}); expected a sequence "
                           "of ints, one per block"}
    if isinstance(nfree, bool) or not hasattr(nfree, "__index__"):
        return {"problem": f"pool.num_free_blocks is {str(nfree)[:200]} ({type(nfree).__name__}); expected an int",
                "hint": "num_free_blocks is a property returning an int: `@property` above the method"}
    return {"num_blocks": operator.index(num_blocks), "ref_cnt": counts, "num_free_blocks": operator.index(nfree)}


def run(impl: ModuleType, num_blocks: int, ops: list) -> dict[str, Any]:
    """`pool = BlockPool(num_blocks)`, then each op: ["allocate", n], ["free", ids], ["incref", id] or ["drain"]
    (allocate every free block). Returns {"created": ..., "steps": [...]}; it stops at the first call that is not
    implemented or whose state cannot be read."""
    try:
        pool = impl.BlockPool(num_blocks)
    except Exception as exc:  # noqa: BLE001
        return {"created": {"raised": raised_name(exc), "_error": learner_error(exc)}, "steps": []}
    current = state(pool)
    trace: dict[str, Any] = {"created": current, "steps": []}
    if "problem" in current:
        return trace
    for op in ops:
        method = "allocate" if op[0] == "drain" else op[0]
        arg = current["num_free_blocks"] if op[0] == "drain" else op[1]
        fn = getattr(pool, method, None)
        if not callable(fn):
            trace["steps"].append({"raised": None, "problem": f"BlockPool has no method {method}"})
            return trace
        try:
            ret = fn(list(arg) if isinstance(arg, list) else arg)
        except Exception as exc:  # noqa: BLE001
            step = {"raised": raised_name(exc), "_error": learner_error(exc)}
        else:
            step = {"raised": None}
            if method == "allocate":
                got = None if holds_tensor(ret) else int_values(ret)
                step["returned"] = got if got is not None else {
                    "not a list of ints": f"{str(ret)[:200]} ({type(ret).__name__})"}
        step["state"] = current = state(pool)
        trace["steps"].append(step)
        if step["raised"] == "NotImplementedError" or "problem" in current:
            break
    return trace


def two_pools(impl: ModuleType, num_blocks: int, n: int) -> dict[str, Any]:
    """`a, b = BlockPool(num_blocks), BlockPool(num_blocks); a.allocate(n)`: the state of b."""
    try:
        a, b = impl.BlockPool(num_blocks), impl.BlockPool(num_blocks)
        a.allocate(n)
    except Exception as exc:  # noqa: BLE001
        return {"raised": raised_name(exc), "_error": learner_error(exc)}
    return state(b)


def describe(fn: str, *args: Any) -> str:
    """The call `fn(*args)` of this driver as Python a learner can paste."""
    if fn == "two_pools":
        num_blocks, n = args
        return f"a, b = BlockPool({num_blocks}), BlockPool({num_blocks}); a.allocate({n}); b.ref_cnt, b.num_free_blocks"
    num_blocks, ops = args
    return "; ".join([f"pool = BlockPool({num_blocks})"] + [op_text(op) for op in ops])


def op_text(op: list) -> str:
    """One call of a script as Python ("drain" allocates every free block)."""
    return "pool.allocate(pool.num_free_blocks)" if op[0] == "drain" else f"pool.{op[0]}({op[1]!r})"


def where(path: str, fn: str, *args: Any) -> str | None:
    """A place in this driver's answer (`steps[1].state.ref_cnt`) as the learner's code: `after call 2,
    pool.free([0]): pool.ref_cnt`."""
    if fn == "two_pools":
        return f"b.{path}" if path in ("num_blocks", "ref_cnt", "num_free_blocks") else None
    created = f"pool = BlockPool({args[0]})"
    if path == "created.raised":
        return f"{created}, raised"
    if path in ("created.num_blocks", "created.ref_cnt", "created.num_free_blocks"):
        return f"after {created}: pool.{path.split('.')[1]}"
    step = re.match(r"steps\[(\d+)\]\.(returned|raised|state\.(\w+))", path)
    if step is None:
        return None
    i, what, attr = int(step[1]), step[2], step[3]
    call = f"call {i + 1}, {op_text(args[1][i])}"
    return f"after {call}: pool.{attr}" if attr else f"{call}, {what}"
