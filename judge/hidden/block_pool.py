"""Hidden tests of exercise 125 (BlockPool).

Each case runs a script of operations on the learner's pool, in the worker, through the public driver
(judge/drivers/block_pool.py), and on `Spec`, a small model of the contract written here (independent of
solutions/), and compares after every step what the engine can observe: the returned ids, the error raised (by
isinstance), `list(ref_cnt)` and `num_free_blocks`. The free queue is private: its order is observed only through
the ids that `allocate` hands out (every script ends by allocating all free blocks).
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

from judge.drivers.block_pool import LOOK_ALIKE, NO_FREE, READ, op_text
from judge.harness import CaseFailure, Cases, check_each, short
from judge.remote import Driver, learner_failure
from judge.secret import rng as seeded  # random cases drawn with the instructor's secret, if any

CASES = Cases()

# An operation: ("allocate", n) | ("free", [ids]) | ("incref", id) | ("drain",) = allocate every free block.
Op = tuple


class Spec:
    """The contract, as plainly as possible: a list for the free queue (front = index 0)."""

    def __init__(self, num_blocks: int) -> None:
        if num_blocks <= 0:
            raise ValueError
        self.ref_cnt = [0] * num_blocks
        self.queue = list(range(num_blocks))

    def apply(self, op: Op) -> tuple[str | None, Any]:
        """(error name or None, return value)."""
        kind = op[0]
        n = len(self.queue) if kind == "drain" else op[1]
        if kind in ("allocate", "drain"):
            if n < 0:
                return "ValueError", None
            if n > len(self.queue):
                return NO_FREE, None
            taken, self.queue = self.queue[:n], self.queue[n:]
            for b in taken:
                self.ref_cnt[b] = 1
            return None, taken
        if kind == "incref":
            if not 0 <= n < len(self.ref_cnt):
                return "ValueError", None
            if self.ref_cnt[n] == 0:
                self.queue.remove(n)
            self.ref_cnt[n] += 1
            return None, None
        for b, times in Counter(n).items():  # free: check everything before changing anything
            if not 0 <= b < len(self.ref_cnt) or self.ref_cnt[b] < times:
                return "ValueError", None
        for b in n:
            self.ref_cnt[b] -= 1
            if self.ref_cnt[b] == 0:
                self.queue.append(b)
        return None, None


def script_text(num_blocks: int, ops: list[Op], upto: int | None = None) -> str:
    """The script as code, each line annotated with what the contract says it does."""
    spec = Spec(num_blocks)
    lines = [f"pool = BlockPool({num_blocks})"]
    for i, op in enumerate(ops[:upto]):
        err, ret = spec.apply(op)
        note = f"raises {err}" if err else f"-> {short(ret)}" if ret is not None else f"ref_cnt {short(spec.ref_cnt)}"
        lines.append(f"{op_text(op):<40} # call {i + 1}: {note}")
    return "\n".join(lines)


def state_failure(state: dict[str, Any], where: str) -> CaseFailure | None:
    """What the driver reported instead of the pool's public state (BlockPool raised, or the state cannot be read),
    as a failure."""
    if "raised" in state:
        return learner_failure(state["_error"], "BlockPool", where)
    if "problem" not in state:
        return None
    if "_error" in state:
        return learner_failure(state["_error"], f"reading {READ}", where)
    return CaseFailure(f"{where}: {state['problem']}", hint=state.get("hint"))


def _hint(op: Op, field: str, exp: Any, got: Any, num_blocks: int) -> str:
    kind = op[0]
    if field == "raises":
        if exp == NO_FREE and got == LOOK_ALIKE:
            return ("raise the NoFreeBlocksError that the starter file imports (from framework.errors import "
                    "NoFreeBlocksError), not a class of the same name: the engine catches that very class")
        if exp == NO_FREE:
            return "allocate(n) with fewer than n free blocks raises NoFreeBlocksError and changes nothing"
        if exp == "ValueError" and kind == "free":
            ids = op[1]
            if any(not 0 <= b < num_blocks for b in ids):
                return "free must reject ids outside 0 .. num_blocks-1 with ValueError"
            if len(set(ids)) < len(ids):
                return ("count repeats within one call: free([b, b]) drops two references, a double free if b "
                        "has only one")
            return "freeing a block more times than it is held (ref_cnt 0 or too small) is a double free: ValueError"
        if exp == "ValueError" and kind == "incref":
            return "incref must reject ids outside 0 .. num_blocks-1 with ValueError (careful: -1 indexes a list)"
        if exp == "ValueError":
            return "a negative n is a ValueError"
        if exp is None and kind in ("allocate", "drain") and op[-1] == 0:
            return "allocate(0) is legal and returns []"
        return "this call is legal: it must not raise"
    if field == "state after the error":
        return "a call that raises must change nothing: check everything first, then change the state"
    if field == "return value":
        if sorted(got or []) == sorted(exp):
            return "the right blocks in the wrong order: hand them out in free-queue order, front first"
        return ("allocate takes from the FRONT of the free queue and free appends at the BACK, so the block "
                "freed longest ago is reused first (LRU); initially the queue is 0, 1, ..., num_blocks-1")
    if field == "ref_cnt":
        if kind == "free":
            return "free drops ONE reference per id; a block is free only when its ref_cnt reaches 0"
        if kind == "incref":
            return "incref adds one owner: ref_cnt[block_id] += 1"
        return "allocate sets each handed-out block's ref_cnt to 1"
    if field == "num_free_blocks":
        if kind == "incref":
            return "incref of a free block (ref_cnt 0) takes it out of the free queue"
        return "num_free_blocks is the length of the free queue"
    return ""


def public_hints(driver: str, fn: str, args: list, value: Any) -> list[tuple[str, Any, str]]:
    """The hints of each call of a public case's script, recorded with its answer (judge/edition.py)."""
    if (driver, fn) != ("block_pool", "run"):
        return []
    num_blocks, ops = args[0], [tuple(op) for op in args[1]]
    spec, hints = Spec(num_blocks), []
    for i, op in enumerate(ops):
        exp_err, exp_ret = spec.apply(op)
        at = f"['steps'][{i}]"
        hints.append((f"{at}['raised']", None, _hint(op, "raises", exp_err, None, num_blocks)))
        if exp_ret is not None:
            hints.append((f"{at}['returned']", None, _hint(op, "return value", exp_ret, None, num_blocks)))
        for name in ("ref_cnt", "num_free_blocks"):
            hints.append((f"{at}['state']['{name}']", None,
                          _hint(op, "state after the error" if exp_err else name, None, None, num_blocks)))
    return hints


def diff(num_blocks: int, ops: list[Op], impl: Any) -> CaseFailure | None:
    """None if the learner's pool follows the contract on this script, else the first difference."""
    failure, steps = _first_difference(num_blocks, ops, impl)
    if failure is not None:
        failure.input = script_text(num_blocks, ops, steps)
    return failure


def _first_difference(num_blocks: int, ops: list[Op], impl: Any) -> tuple[CaseFailure | None, int]:
    """(failure or None, number of steps up to and including the failing one)."""
    trace = Driver(impl, "block_pool").run(num_blocks, ops)
    failure = state_failure(trace["created"], f"BlockPool({num_blocks})")
    if failure is not None:
        return failure, 0
    if trace["created"]["num_blocks"] != num_blocks:
        return CaseFailure(f"BlockPool({num_blocks}).num_blocks is {trace['created']['num_blocks']}",
                           field="num_blocks", expected=num_blocks, got=trace["created"]["num_blocks"],
                           hint="keep the number of blocks the pool was made with in pool.num_blocks: the scheduler "
                                "reads it (the size of the whole cache)"), 0
    spec = Spec(num_blocks)
    for i, (op, got) in enumerate(zip(ops, trace["steps"])):
        exp_err, exp_ret = spec.apply(op)
        where = f"call {i + 1}, {op_text(op)}"
        method = "allocate" if op[0] == "drain" else op[0]
        if "problem" in got:
            return CaseFailure(got["problem"]), i + 1
        got_err = got["raised"]
        if got_err == "NotImplementedError" or got_err is not None and exp_err is None:
            return learner_failure(got["_error"], f"BlockPool.{method}", op_text(op)), i + 1
        if got_err != exp_err:
            msg = f"{where} should raise {exp_err}, " + (f"it raised {got_err}" if got_err else "it did not")
            return CaseFailure(msg, field="raises", expected=exp_err, got=got_err,
                               hint=_hint(op, "raises", exp_err, got_err, num_blocks)), i + 1
        if method == "allocate" and exp_err is None:
            got_list = got["returned"]
            if got_list != exp_ret:
                ok = isinstance(got_list, list)
                return CaseFailure(f"{where} returned the wrong block ids", field="return value",
                                   expected=exp_ret, got=got_list if ok else got_list["not a list of ints"],
                                   hint=_hint(op, "return value", exp_ret, got_list, num_blocks)
                                   if ok else "allocate returns the ids as a list of ints (not tensors: a tensor "
                                   "hashes by identity, so the pool and the prefix cache could never find it)"), i + 1
        state = got["state"]
        failure = state_failure(state, f"after {where}")
        if failure is not None:
            return failure, i + 1
        for name, exp in (("ref_cnt", spec.ref_cnt), ("num_free_blocks", len(spec.queue))):
            if state[name] != exp:
                field = "state after the error" if exp_err else name
                msg = f"after {where}" + (f" (which raised {exp_err} as it should)" if exp_err else "") + \
                      f", {name} is wrong"
                shown, exp_shown, got_shown = name, exp, state[name]
                if name == "ref_cnt" and len(exp) > 16:  # a long list: show only the entries that differ
                    bad = [b for b, (e, g) in enumerate(zip(exp, state[name])) if e != g][:10]
                    shown = "ref_cnt (entries that differ)"
                    exp_shown, got_shown = {b: exp[b] for b in bad}, {b: state[name][b] for b in bad}
                return CaseFailure(msg, field=shown, expected=exp_shown, got=got_shown,
                                   hint=_hint(op, field, exp, state[name], num_blocks)), i + 1
    return None, len(ops)


def candidates(value: tuple[int, list[Op]]):
    """Shorter scripts, then smaller numbers."""
    nb, ops = value
    body = ops[:-1] if ops and ops[-1] == ("drain",) else ops  # the final drain shows the queue order: keep it
    tail = ops[len(body):]
    for size in (len(body) // 2, len(body) // 4, 2, 1):
        if size < 1:
            continue
        for start in range(0, len(body), size):
            yield nb, body[:start] + body[start + size:] + tail
    for i, op in enumerate(body):
        if op[0] == "allocate" and op[1] > 0:
            for smaller in {op[1] // 2, op[1] - 1}:
                yield nb, body[:i] + [("allocate", smaller)] + body[i + 1:] + tail
        if op[0] == "free" and len(op[1]) > 1:
            for j in range(len(op[1])):
                yield nb, body[:i] + [("free", op[1][:j] + op[1][j + 1:])] + body[i + 1:] + tail
    for smaller in sorted({nb // 2, nb - 1}):
        if smaller >= 1:
            yield smaller, ops


def check_scripts(impl: Any, scripts: list[tuple[int, list[Op]]]) -> None:
    check_each(scripts, lambda v: diff(*v, impl), candidates, max_calls=600)


# ----------------------------------------------------------------------------------------------------------
# Random scripts


def random_script(rng: random.Random, num_blocks: int, length: int, misuse: float) -> list[Op]:
    """Mostly legal operations chosen from the current state; with probability `misuse`, an illegal one."""
    spec = Spec(num_blocks)
    ops: list[Op] = []
    for _ in range(length):
        held = [b for b, c in enumerate(spec.ref_cnt) for _ in range(c)]
        r = rng.random()
        if rng.random() < misuse:
            op = rng.choice([
                ("allocate", len(spec.queue) + rng.randint(1, 3)),
                ("free", [rng.randrange(num_blocks)] * 2),
                ("free", rng.sample(held, min(len(held), 2)) + [rng.choice([-1, num_blocks])]),
                ("free", [b for b, c in enumerate(spec.ref_cnt) if c == 0][:1] or [num_blocks]),
                ("incref", rng.choice([-1, num_blocks, num_blocks + 3])),
                ("allocate", rng.randint(-2, -1)),
            ])
        elif r < 0.4 or not held:
            op = ("allocate", rng.randint(0, max(1, min(4, len(spec.queue)))))
        elif r < 0.75:
            op = ("free", rng.sample(held, rng.randint(1, min(4, len(held)))))
        else:
            op = ("incref", rng.randrange(num_blocks))
        spec.apply(op)
        ops.append(op)
    return ops + [("drain",)]


def random_scripts(seed: int, count: int, sizes: tuple[int, int], length: tuple[int, int],
                   misuse: float) -> list[tuple[int, list[Op]]]:
    rng = seeded(seed)
    out = []
    for _ in range(count):
        nb = rng.randint(*sizes)
        out.append((nb, random_script(rng, nb, rng.randint(*length), misuse)))
    return out


# ----------------------------------------------------------------------------------------------------------
# The cases


@CASES("the worked example", public=True)
def _(impl):
    check_scripts(impl, [(4, [("allocate", 3), ("incref", 1), ("free", [2, 1]), ("allocate", 2), ("allocate", 1),
                              ("free", [0, 0]), ("drain",)])])


@CASES("a new pool: all blocks free, handed out in order 0, 1, 2, ...", public=True)
def _(impl):
    check_scripts(impl, [(1, [("drain",)]), (5, [("allocate", 2), ("allocate", 3)]), (8, [("drain",)])])


@CASES("num_blocks must be positive")
def _(impl):
    for nb in (0, -3):
        created = Driver(impl, "block_pool").run(nb, [])["created"]
        got = created.get("raised")
        if got == "NotImplementedError":
            raise learner_failure(created["_error"], "BlockPool", f"BlockPool({nb})")
        if got != "ValueError":
            raise CaseFailure(f"BlockPool({nb}) " + (f"raised {got}; expected ValueError" if got else "did not raise"),
                              input=f"BlockPool({nb})", field="raises", expected="ValueError", got=got,
                              hint="a pool needs at least one block: ValueError")


@CASES("allocate is all or nothing (NoFreeBlocksError changes nothing)", public=True)
def _(impl):
    check_scripts(impl, [(4, [("allocate", 5), ("drain",)]), (6, [("allocate", 4), ("allocate", 3), ("drain",)]),
                         (3, [("allocate", 3), ("allocate", 1), ("free", [1]), ("allocate", 2), ("drain",)])])


@CASES("allocate(0) returns [], a negative n is a ValueError")
def _(impl):
    check_scripts(impl, [(3, [("allocate", 0), ("drain",)]), (2, [("allocate", 2), ("allocate", 0), ("drain",)]),
                         (3, [("allocate", -1), ("drain",)])])


@CASES("freed blocks go to the back of the queue (LRU reuse)", public=True)
def _(impl):
    check_scripts(impl, [
        (4, [("allocate", 2), ("free", [0]), ("drain",)]),
        (6, [("allocate", 4), ("free", [3, 1]), ("free", [0]), ("drain",)]),
        (5, [("drain",), ("free", [2, 4, 0]), ("allocate", 1), ("free", [1, 3]), ("drain",)]),
    ])


@CASES("double free is a ValueError and changes nothing", public=True)
def _(impl):
    check_scripts(impl, [(3, [("free", [0]), ("drain",)]), (3, [("allocate", 1), ("free", [0]), ("free", [0]),
                                                               ("drain",)]),
                         (4, [("allocate", 2), ("free", [0, 1, 2]), ("drain",)])])


@CASES("repeats within one free call are counted")
def _(impl):
    check_scripts(impl, [(3, [("allocate", 2), ("free", [1, 1]), ("drain",)]),
                         (3, [("allocate", 2), ("incref", 1), ("free", [1, 1]), ("drain",)]),
                         (4, [("allocate", 3), ("incref", 0), ("free", [0, 2, 0, 0]), ("drain",)])])


@CASES("ids out of range are a ValueError and change nothing", public=True)
def _(impl):
    check_scripts(impl, [(3, [("allocate", 2), ("free", [0, 3]), ("drain",)]),
                         (3, [("allocate", 2), ("free", [1, -1]), ("drain",)]),
                         (3, [("incref", 3), ("drain",)]), (3, [("incref", -1), ("drain",)])])


@CASES("shared blocks: incref adds an owner, free drops one", public=True)
def _(impl):
    check_scripts(impl, [
        (3, [("allocate", 1), ("incref", 0), ("free", [0]), ("drain",)]),
        (4, [("allocate", 2), ("incref", 1), ("incref", 1), ("free", [1]), ("free", [0, 1]), ("free", [1]),
             ("drain",)]),
    ])


@CASES("incref of a free block takes it out of the free queue", public=True)
def _(impl):
    check_scripts(impl, [(4, [("incref", 2), ("drain",)]),
                         (4, [("allocate", 2), ("free", [0, 1]), ("incref", 0), ("drain",)]),
                         (3, [("incref", 0), ("free", [0]), ("drain",)])])


@CASES("random legal scripts")
def _(impl):
    check_scripts(impl, random_scripts(125, 40, (1, 10), (5, 30), misuse=0.0))


@CASES("random scripts with illegal calls mixed in")
def _(impl):
    check_scripts(impl, random_scripts(1250, 40, (1, 10), (5, 30), misuse=0.25))


@CASES("a larger pool (1000 blocks)")
def _(impl):
    check_scripts(impl, random_scripts(12500, 2, (1000, 1000), (300, 300), misuse=0.05))


@CASES("two pools are independent")
def _(impl):
    text = "a, b = BlockPool(3), BlockPool(3); a.allocate(2)"
    got = Driver(impl, "block_pool").two_pools(3, 2)
    failure = state_failure(got, text if "raised" in got else "the second pool")
    if failure is not None:
        raise failure
    got = {k: got[k] for k in ("ref_cnt", "num_free_blocks")}
    if got != {"ref_cnt": [0, 0, 0], "num_free_blocks": 3}:
        raise CaseFailure("allocating from one pool changed another pool", field="second pool", input=text,
                          expected={"ref_cnt": [0, 0, 0], "num_free_blocks": 3}, got=got,
                          hint="keep the state in instance attributes (self.x = ... in __init__), not in class "
                               "attributes or default arguments")
