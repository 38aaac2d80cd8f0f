"""Hidden tests of exercise 132 (hash_block, block_hashes, PrefixCache).

Hash values are the learner's own: the cases check properties (determinism, chaining, one hash per full block)
and the cache's behaviour through lookups, never its internal dictionaries. End to end, the learner's functions
and class are plugged into the REFERENCE KVCacheManager (class attributes prefix_cache_cls and block_hashes)
under the reference engine, and greedy outputs must equal each prompt generated alone with `mini_llm.generate`,
with the number of cached prompt tokens the prefix hits predict.
"""

from __future__ import annotations

import itertools
import random
from typing import Any

from judge.secret import rng as seeded  # random cases drawn with the instructor's secret, if any
from judge.harness import CaseFailure, Cases, check_each, short, whole
from judge.hidden.end_to_end import alone, load_model, random_prompts
from judge.drivers.prefix_cache import CHAINED, describe
from judge.remote import Driver, learner_failure
from solutions import engine as ref
from solutions import prefix_cache as ref_cache
from solutions.kv_cache_manager import KVCacheManager
from framework.sampling import SamplingParams

CASES = Cases()
NONE_HASH = ref_cache.NONE_HASH


# ----------------------------------------------------------------------------------------------------------
# hash_block and block_hashes


def reported(got: dict[str, Any], text: str) -> dict[str, Any]:
    """The driver's facts; raises what it reported instead: the learner's exception, or a value of the wrong type."""
    if "raised" in got:
        raise learner_failure(got["_error"], got["in"], text)
    if "not an int" in got:
        raise CaseFailure(f"hash_block returned a {got['not an int']}; it must return an int", input=text,
                          hint="e.g. hash((parent_hash, tuple(token_ids))); a hashlib digest can be turned into an "
                               "int with int.from_bytes(digest[:8], 'big')")
    if "not a list" in got:
        raise CaseFailure(f"block_hashes returned a {got['not a list']}; it must return a list of ints", input=text)
    if "not a list of block ids" in got:
        raise CaseFailure(f"lookup returned {got['not a list of block ids']}; it must return a list of block ids",
                          input=text, hint="block ids are ints, not tensors: a tensor hashes by identity, so the "
                                           "block pool could not find it")
    return got


QWEN3_VOCAB = 151_936  # Qwen3-0.6B's token ids are 0 .. 151,935: a hash must take each id whole
TOKENS = [5, 17, 2, 9]
# Blocks hashed from NONE_HASH beside TOKENS, each different from every other: reordered, shortened, ids that agree
# with TOKENS' in their low 16 bits (and low byte: 9 + 65536, 2 + 131072, both in Qwen3's vocabulary), and blocks
# of 16 (vLLM's default size) and of 32 tokens (the statement fixes no block size) that differ in their last token.
VARIANTS = [[5, 17, 2, 8], [9, 2, 17, 5], [17, 5, 2, 9], [5, 17, 2], [5, 17, 2, 9 + 65536], [5, 17, 2 + 131072, 9],
            [*range(40, 55), 1], [*range(40, 55), 2], [*range(40, 71), 1], [*range(40, 71), 2]]
A7 = [7, 7, 7, 7]
# h0 = hash_block(NONE_HASH, TOKENS); h1 the same again; h2 = p1 = hash_block(NONE_HASH, A7); h3 = p2 =
# hash_block(p1, A7); h4 = hash_block(p1, TOKENS) (the prefix [A7, TOKENS]); h5 = hash_block(p2, TOKENS); then
# each variant from NONE_HASH; last, hash_block(h0, A7): the prefix [TOKENS, A7], the same blocks in another order.
HASH_CALLS = [[NONE_HASH, TOKENS], [NONE_HASH, list(TOKENS)], [NONE_HASH, A7], [["call", 2], A7],
              [["call", 2], TOKENS], [["call", 3], TOKENS]] + [[NONE_HASH, v] for v in VARIANTS] + [[["call", 0], A7]]
FIRST_VARIANT, SWAPPED = 6, 6 + len(VARIANTS)
PARENT_HINT = ("chain the parent's hash in: equal hashes must mean equal PREFIXES, e.g. hash((parent_hash, "
               "tuple(token_ids)))")
ORDER_HINT = ("chain the parent's hash in a way that depends on the order: parent_hash + hash(block) or "
              "parent_hash ^ hash(block) gives [A, B] and [B, A] one hash; hash the pair instead, e.g. "
              "hash((parent_hash, tuple(token_ids)))")
EVERY_TOKEN = "hash every token, in order"


def low_bits_shared(a: list[int], b: list[int]) -> int:
    """How many low bits the differing token ids of two blocks of one length agree in, at the least (0 if the
    blocks differ in length or are equal)."""
    pairs = [x ^ y for x, y in zip(a, b) if x != y]
    return min(((d & -d).bit_length() - 1 for d in pairs), default=0) if len(a) == len(b) else 0


def block_collision(a: list[int], b: list[int]) -> tuple[str, str]:
    """Why two different blocks must not share a hash, and the hint for a hash_block that gives them one."""
    bits = low_bits_shared(a, b)
    if bits >= 8:
        ids = " and ".join(f"{x} and {y}" for x, y in zip(a, b) if x != y)
        return (f"token ids {ids} differ (Qwen3's ids go up to {QWEN3_VOCAB - 1:,}) but agree in their low {bits} "
                "bits",
                f"{EVERY_TOKEN}, each id whole: never cut to 8 or 16 bits (numpy uint16, a byte per token); pack it "
                "as an 8-byte integer (struct 'q', numpy int64) or hash the ints themselves")
    differ = [i for i, (x, y) in enumerate(zip(a, b)) if x != y]
    if len(a) == len(b) and differ and differ[0] >= 16:
        where = f"in token {differ[0]}" if len(differ) == 1 else f"from token {differ[0]} on"
        return (f"blocks of {len(a)} tokens that differ only {where} (counting from 0)",
                f"{EVERY_TOKEN}, whatever the block size: a block may hold more than 16 tokens")
    return "", EVERY_TOKEN


@CASES("hash_block: an int, deterministic, depends on the parent and on the tokens in order", public=True)
def _(impl):
    text = describe("hash_calls", HASH_CALLS)
    same = reported(Driver(impl, "prefix_cache").hash_calls(HASH_CALLS), text)["same_as"]
    if same[1] != 0:
        raise CaseFailure("hash_block gave two different hashes for the same arguments",
                          input=f"hash_block({NONE_HASH}, {TOKENS})", hint="the hash must be deterministic")
    labels = {0: "NONE_HASH", 4: "p1 = hash_block(NONE_HASH, [7, 7, 7, 7])", 5: "hash_block(p1, [7, 7, 7, 7])"}
    for i, j in ((4, 0), (5, 0), (5, 4)):
        if same[i] == same[j]:
            raise CaseFailure(f"hash_block(parent, {TOKENS}) is the same for parents {labels[j]} and {labels[i]}",
                              input=text, hint=PARENT_HINT)
    blocks = [TOKENS] + VARIANTS
    checked = [0, *range(FIRST_VARIANT, FIRST_VARIANT + len(VARIANTS))]
    for i, call_i in enumerate(checked):
        for j, call_j in enumerate(checked[:i]):
            if same[call_i] == same[call_j]:
                why, hint = block_collision(blocks[j], blocks[i])
                raise CaseFailure(f"hash_block gives the same hash to blocks {blocks[j]} and {blocks[i]}"
                                  + (f": {why}" if why else ""),
                                  input=f"hash_block({NONE_HASH}, {blocks[j]}) == hash_block({NONE_HASH}, "
                                        f"{blocks[i]})", hint=hint)
    if same[SWAPPED] == same[4]:
        raise CaseFailure(f"prefixes [{A7}, {TOKENS}] and [{TOKENS}, {A7}] got the same hash: the same blocks in "
                          "another order are another prefix (equal hashes must mean equal prefixes)",
                          input=f"hash_block(hash_block({NONE_HASH}, {A7}), {TOKENS}) == "
                                f"hash_block(hash_block({NONE_HASH}, {TOKENS}), {A7})", hint=ORDER_HINT)


def hash_call_hints(calls: list) -> list[tuple[str, Any, str]]:
    """The hints of the public case's hash_calls: for each call, a wrong same_as there (another call's hash; None:
    any) and the rule it breaks, as the case's own failures say it."""
    if calls != HASH_CALLS:
        return []
    hints: list[tuple[str, Any, str]] = [("['same_as'][1]", None, "the hash must be deterministic")]
    hints += [(f"['same_as'][{i}]", None, PARENT_HINT) for i in (3, 4, 5)]
    blocks = {0: TOKENS, **{FIRST_VARIANT + k: v for k, v in enumerate(VARIANTS)}}
    for i, block in blocks.items():
        for j, other in blocks.items():
            if j < i:
                why, hint = block_collision(other, block)
                hints.append((f"['same_as'][{i}]", j, f"{other} and {block} got the same hash"
                                                      + (f"; {why}" if why else "") + f": {hint}"))
        if i:
            hints.append((f"['same_as'][{i}]", None, EVERY_TOKEN))
    hints.append((f"['same_as'][{SWAPPED}]", 4, f"prefixes [{A7}, {TOKENS}] and [{TOKENS}, {A7}] got the same hash: "
                                                f"{ORDER_HINT}"))
    hints.append((f"['same_as'][{SWAPPED}]", None, PARENT_HINT))
    return hints


def check_block_hashes(impl, tokens: list[int], block_size: int) -> CaseFailure | None:
    text = f"block_hashes({tokens!r}, {block_size})"
    try:
        got = reported(Driver(impl, "prefix_cache").chain(tokens, block_size, NONE_HASH), text)
    except CaseFailure as failure:
        return failure
    want = len(tokens) // block_size
    if got["count"] != want:
        return CaseFailure(f"block_hashes returned {got['count']} hashes for {len(tokens)} tokens in blocks of "
                           f"{block_size}; expected {want} (one per FULL block)", input=text,
                           field="len(block_hashes(...))", expected=want, got=got["count"],
                           hint="a trailing partial block is still being written: it gets no hash; "
                                "len(token_ids) // block_size hashes")
    i = next((i for i, chained in enumerate(got[CHAINED]) if not chained), None)
    if i is not None:
        parent = "NONE_HASH" if i == 0 else f"hashes[{i - 1}]"
        return CaseFailure(f"hash {i} is not hash_block({parent}, block {i})", input=text,
                           hint="hashes[0] = hash_block(NONE_HASH, first block); hashes[i] = "
                                "hash_block(hashes[i-1], block i)")
    return None


def block_hash_inputs(seed: int, count: int) -> list[tuple[list[int], int]]:
    rng = seeded(seed)
    out = [([1, 2, 3, 4, 5, 6, 7, 8], 4), ([1, 2, 3, 4, 5, 6, 7], 4), ([1, 2, 3], 4), ([], 4), ([9], 1)]
    for _ in range(count):
        bs = rng.choice([1, 2, 3, 4, 8])
        n = bs * rng.randint(0, 5) + (rng.randint(0, bs - 1) if rng.random() < 0.5 else 0)
        out.append(([rng.randrange(1000) for _ in range(n)], bs))
    return out


def shrink_tokens(value):
    tokens, bs = value
    if len(tokens) > bs:
        yield tokens[:-bs], bs
    if tokens:
        yield tokens[:-1], bs
    if any(t > 9 for t in tokens):
        yield [t % 10 for t in tokens], bs


def hash_values(impl, inputs: list[tuple[int, list[int]]]) -> list[str]:
    """hash_block's values on `inputs` (as text), computed by the learner's code where `impl` runs."""
    got = Driver(impl, "prefix_cache").hash_calls([[p, t] for p, t in inputs])
    return reported(got, " ; ".join(f"hash_block({p!r}, {t!r})" for p, t in inputs))["_values"]


def hashes_elsewhere(impl, inputs: list[tuple[int, list[int]]]) -> list[str]:
    """hash_values in another process, the learner's code loaded afresh."""
    from judge.wire import WorkerLost
    from judge.runner import another_process

    try:
        with another_process(impl) as other:
            return hash_values(other, inputs)
    except (WorkerLost, RuntimeError) as exc:
        raise CaseFailure(f"your code failed in a fresh process: {short(str(exc))}", kind="error") from None


@CASES("hash_block: equal in every process (PYTHONHASHSEED does not change it)")
def _(impl):
    # parents as an engine passes them: NONE_HASH and the hashes this very code gave (["call", j]: h<j>), whatever
    # their range; an int of any other range is not a parent the statement promises
    inputs = [(NONE_HASH, [5, 17, 2, 9]), (123456789, [1, 2, 3, 4]), (NONE_HASH, [7]), (["call", 1], [3, 1]),
              (["call", 0], [6, 6, 6, 6]), (["call", 4], [1])]
    shown = describe("hash_calls", [[p, t] for p, t in inputs]).split("; ")
    here = hash_values(impl, inputs)
    if len(set(here)) < len(inputs):  # a constant hash is equal everywhere, and names nothing
        raise CaseFailure(f"hash_block gives equal hashes to different blocks: {here}", input=" ; ".join(shown),
                          hint="hash the parent and every token, e.g. hash((parent_hash, tuple(token_ids)))")
    for attempt in (1, 2):  # each process has its own random hash seed (str and bytes hash differently)
        there = hashes_elsewhere(impl, inputs)
        for call, h, o in zip(shown, here, there):
            if h != o:
                raise CaseFailure(f"{call.split(' = ')[1]} is {h} in one process but {o} in another: block hashes "
                                  "must be equal across processes", input=" ; ".join(shown),
                                  hint="Python salts hash() of str and bytes per process: hash ints or a tuple "
                                       "of ints (hash((parent_hash, tuple(token_ids)))), or a hashlib digest "
                                       "turned into an int (int.from_bytes(digest[:8], 'big'))")


@CASES("block_hashes: one chained hash per full block, from NONE_HASH", public=True)
def _(impl):
    check_each(block_hash_inputs(1, 30), lambda v: check_block_hashes(impl, *v), shrink_tokens)


@CASES("block_hashes: equal prefixes share hashes, a different block changes every hash after it")
def _(impl):
    bs = 4
    shared, tail = [3, 1, 4, 1, 5, 9, 2, 6], [8, 8, 8, 8, 7, 7, 7, 7, 1]
    a, b = shared + [0, 0, 0, 0] + tail, shared + [0, 0, 0, 1] + tail  # differ only in block 2
    text = f"block_hashes({a}, {bs}) vs block_hashes({b}, {bs})"
    ha, hb = learner_hashes(impl, a, bs), learner_hashes(impl, b, bs)
    if len(ha) != 5 or len(hb) != 5:
        raise CaseFailure(f"expected 5 hashes for 21 tokens in blocks of 4, got {len(ha)} and {len(hb)}", input=text)
    if ha[:2] != hb[:2]:
        raise CaseFailure("the first two blocks are equal, and so are their prefixes, yet their hashes differ",
                          input=text, field="hashes[:2]", expected=ha[:2], got=hb[:2])
    for i in range(2, 5):
        if ha[i] == hb[i]:
            raise CaseFailure(f"block {i} has the same hash in both sequences, although the prefixes differ (at "
                              "block 2)", input=text, field=f"hashes[{i}]", expected="different hashes", got=ha[i],
                              hint="chain each block's hash with its parent's: hashes[i] = hash_block(hashes[i-1], "
                                   "block i), so a block's hash names its whole prefix")
    for seqs, block_size in prefix_families(1032):
        check_prefixes(impl, seqs, block_size)


def prefix_families(seed: int) -> list[tuple[list[list[int]], int]]:
    """Token sequences, each family in blocks of one size, whose prefixes differ only where a careless hash sees no
    difference: the same three blocks in every order; one token id swapped for another that agrees with it in its
    low 8 to 17 bits (both in Qwen3's vocabulary); blocks of 17 to 64 tokens that differ only after their 16th."""
    rng = seeded(seed)

    def block(n: int) -> list[int]:
        return [rng.randrange(QWEN3_VOCAB) for _ in range(n)]

    out = []
    for _ in range(4):
        bs = rng.choice([1, 2, 4, 16])
        blocks = [block(bs) for _ in range(3)]
        out.append(([sum(order, []) for order in itertools.permutations(blocks)], bs))
    for _ in range(6):
        bs, step = rng.choice([1, 4, 16]), 1 << rng.randint(8, 17)
        low = rng.randrange(min(step, QWEN3_VOCAB - step))
        m, n = rng.sample(range((QWEN3_VOCAB - 1 - low) // step + 1), 2)
        a, pos = block(bs), rng.randrange(bs)
        b = list(a)
        a[pos], b[pos] = low + m * step, low + n * step
        head, tail = block(bs * rng.randint(0, 1)), block(bs + rng.randrange(bs))
        out.append(([head + a + tail, head + b + tail], bs))
    for _ in range(4):
        bs = rng.randint(17, 64)
        a, pos = block(bs), rng.randrange(16, bs)
        b = list(a)
        b[pos] = (a[pos] + rng.randrange(1, QWEN3_VOCAB)) % QWEN3_VOCAB
        tail = block(bs)
        out.append(([a + tail, b + tail], bs))
    return out


def check_prefixes(impl, seqs: list[list[int]], bs: int) -> None:
    """Equal hashes iff equal prefixes: hashes[k] of two sequences agree exactly when their first k + 1 blocks do."""
    got = [learner_hashes(impl, s, bs) for s in seqs]
    for s, h in zip(seqs, got):
        if len(h) != len(s) // bs:
            raise CaseFailure(f"block_hashes returned {len(h)} hashes for {len(s)} tokens in blocks of {bs}; expected "
                              f"{len(s) // bs} (one per FULL block)", input=f"block_hashes({s}, {bs})")
    for i, j in itertools.combinations(range(len(seqs)), 2):
        for k in range(len(seqs[i]) // bs):
            x, y = seqs[i][: (k + 1) * bs], seqs[j][: (k + 1) * bs]
            text = f"block_hashes({x}, {bs})[{k}] vs block_hashes({y}, {bs})[{k}]"
            if x == y and got[i][k] != got[j][k]:
                raise CaseFailure(f"equal prefixes got different hashes ({got[i][k]} and {got[j][k]})", input=text,
                                  hint="the hash must be deterministic and depend on the tokens and the parent only")
            if x != y and got[i][k] == got[j][k]:
                bx, by = ([z[b: b + bs] for b in range(0, len(z), bs)] for z in (x, y))
                if sorted(bx) == sorted(by):
                    raise CaseFailure(f"prefixes {bx} and {by} hold the same blocks in another order, yet got the "
                                      "same hash: equal hashes must mean equal prefixes", input=text, hint=ORDER_HINT)
                d = next(b for b in range(len(bx)) if bx[b] != by[b])
                why, hint = block_collision(bx[d], by[d])
                raise CaseFailure(f"two prefixes that differ in block {d} got the same hash (hashes[{k}])"
                                  + (f": {why}" if why else "") + "; equal hashes must mean equal prefixes",
                                  input=text, hint=hint if why else "chain each block's hash with its parent's and "
                                                                   f"{EVERY_TOKEN}")


# ----------------------------------------------------------------------------------------------------------
# PrefixCache, through its behaviour


def reference_lookups(ops: list[tuple]) -> list[list[int]]:
    cache, out = ref_cache.PrefixCache(), []
    for op in ops:
        if op[0] == "lookup":
            out.append(cache.lookup(op[1]))
        else:
            getattr(cache, op[0])(*op[1:])
    return out


HINTS = {
    "lookup": "lookup walks the hashes in order and stops at the first one not cached: a block is only useful if "
              "every block before it is cached too",
    "insert": "insert keeps the existing entry when the hash is already cached OR the block already holds a hash "
              "(the first holder wins)",
    "evict": "evict(block_id) forgets both directions: the block's hash (so lookups miss it) and the block (so it "
             "can hold a new hash)",
}


def mistaken_lookups(ops: list[tuple], skips_misses: bool = False, overwrites: bool = False,
                     forgets: tuple[str, ...] = ("hash", "block")) -> list[list[int]]:
    """The lookups of a cache with one of the mistakes HINTS name: a lookup that skips misses, an insert that
    overwrites, an evict that forgets only the block's hash or only the block."""
    by_hash: dict[int, int] = {}
    by_block: dict[int, int] = {}
    out = []
    for op in ops:
        if op[0] == "insert" and (overwrites or (op[1] not in by_hash and op[2] not in by_block)):
            by_hash[op[1]], by_block[op[2]] = op[2], op[1]
        elif op[0] == "evict":
            h = by_block.pop(op[1], None) if "block" in forgets else by_block.get(op[1])
            if "hash" in forgets and h is not None:
                by_hash.pop(h, None)
        elif op[0] == "lookup":
            hits = [h in by_hash for h in op[1]]
            n = len(hits) if skips_misses else next((i for i, hit in enumerate(hits) if not hit), len(hits))
            out.append([by_hash[h] for h in op[1][:n] if h in by_hash])
    return out


def public_hints(driver: str, fn: str, args: list, value: Any) -> list[tuple[str, Any, str]]:
    """The hints of a public case's calls, recorded with the reference's answer (judge/edition.py): the
    lookups each mistake gives, where they differ from the reference's; and of the hash calls, the rule each
    collision breaks."""
    if (driver, fn) == ("prefix_cache", "hash_calls"):
        return hash_call_hints(args[0])
    if (driver, fn) != ("prefix_cache", "cache_ops") or "lookups" not in value:
        return []
    ops = [tuple(op) for op in args[0]]
    mistakes = [(mistaken_lookups(ops, skips_misses=True), HINTS["lookup"]),
                (mistaken_lookups(ops, overwrites=True), HINTS["insert"]),
                (mistaken_lookups(ops, forgets=("hash",)), HINTS["evict"]),
                (mistaken_lookups(ops, forgets=("block",)), HINTS["evict"])]
    return [("['lookups']", wrong, hint) for wrong, hint in mistakes if wrong != value["lookups"]]


def check_ops(impl, ops: list[tuple], topic: str) -> CaseFailure | None:
    """None if the learner's cache, given ops ('insert', h, b) / ('evict', b) / ('lookup', hashes), answers every
    lookup as the reference does; else the failure."""
    got = Driver(impl, "prefix_cache").cache_ops([list(op) for op in ops])
    shown = ops[: got["call"] + 1] if "call" in got else ops
    text = "\n".join(["c = PrefixCache()"] + [f"c.{op[0]}({', '.join(map(repr, op[1:]))})" for op in shown])
    try:
        lookups = whole(reported(got, text)["lookups"], sum(op[0] == "lookup" for op in ops), "lookups")
    except CaseFailure as f:
        return f
    for i, (g, w) in enumerate(zip(lookups, reference_lookups(ops))):
        if g != w:
            return CaseFailure(f"lookup number {i + 1} returned the wrong blocks", input=text,
                               field=f"lookup {i + 1}", expected=w, got=g, hint=HINTS[topic])
    return None


def check_scenario(impl, ops: list[tuple], topic: str) -> None:
    failure = check_ops(impl, ops, topic)
    if failure is not None:
        raise failure


@CASES("PrefixCache.lookup: the longest cached prefix, stopping at the first miss", public=True)
def _(impl):
    check_scenario(impl, [("lookup", [11, 12])], "lookup")
    inserts = [("insert", 11, 4), ("insert", 12, 0), ("insert", 14, 2)]
    check_scenario(impl, inserts + [("lookup", [11, 12, 13, 14]), ("lookup", [11, 12]), ("lookup", [12, 14]),
                                    ("lookup", [13, 11, 12]), ("lookup", [14]), ("lookup", [])], "lookup")


@CASES("PrefixCache.insert: the first holder wins", public=True)
def _(impl):
    check_scenario(impl, [("insert", 11, 3), ("insert", 11, 5), ("lookup", [11])], "insert")
    check_scenario(impl, [("insert", 11, 3), ("insert", 12, 3), ("lookup", [12]), ("lookup", [11])], "insert")
    check_scenario(impl, [("insert", 11, 3), ("insert", 11, 3), ("lookup", [11])], "insert")


@CASES("PrefixCache.evict: the block is forgotten both ways", public=True)
def _(impl):
    check_scenario(impl, [("insert", 11, 3), ("insert", 12, 4), ("evict", 3), ("lookup", [11]), ("lookup", [12])],
                   "evict")
    check_scenario(impl, [("insert", 11, 3), ("evict", 3), ("insert", 11, 6), ("lookup", [11])], "evict")
    check_scenario(impl, [("insert", 11, 3), ("evict", 3), ("insert", 15, 3), ("lookup", [15]), ("lookup", [11])],
                   "evict")
    check_scenario(impl, [("evict", 7), ("insert", 11, 3), ("evict", 8), ("evict", 3), ("evict", 3),
                          ("lookup", [11])], "evict")


def random_ops(rng: random.Random, n: int) -> list[tuple]:
    ops: list[tuple] = []
    for _ in range(n):
        x = rng.random()
        if x < 0.45:
            ops.append(("insert", 100 + rng.randrange(6), rng.randrange(6)))
        elif x < 0.7:
            ops.append(("evict", rng.randrange(7)))
        else:
            ops.append(("lookup", [100 + rng.randrange(7) for _ in range(rng.randint(0, 4))]))
    return ops


def shrink_ops(ops: list[tuple]):
    for i in range(len(ops)):
        yield ops[:i] + ops[i + 1:]


@CASES("PrefixCache: random inserts, evictions and lookups against the reference")
def _(impl):
    def explained(ops: list[tuple]) -> CaseFailure | None:
        failure = check_ops(impl, ops, "lookup")
        if failure is not None:  # a random script may break any rule
            failure.hint = " / ".join(HINTS.values())
        return failure

    rng = seeded(132)
    scripts = [random_ops(rng, rng.randint(4, 30)) for _ in range(60)]
    check_each(scripts, lambda ops: check_ops(impl, ops, "lookup"), shrink_ops, explain=explained)


# ----------------------------------------------------------------------------------------------------------
# End to end: the learner's prefix cache inside the reference KV-cache manager and engine


class LearnerCache:
    """The learner's PrefixCache as the reference KV-cache manager uses it, without an object kept in the worker:
    inserts and evictions are logged here, and each lookup replays the whole log on a fresh PrefixCache there
    (the public driver's cache_ops), so its answers are those of one cache that saw every operation in order."""

    def __init__(self, impl) -> None:
        self.impl, self.ops = impl, []

    def insert(self, block_hash: int, block_id: int) -> None:
        self.ops.append(["insert", block_hash, block_id])

    def evict(self, block_id: int) -> None:
        self.ops.append(["evict", block_id])

    def lookup(self, hashes) -> list[int]:
        self.ops.append(["lookup", list(hashes)])
        return self.replay()[-1]

    def replay(self) -> list[list[int]]:
        got = Driver(self.impl, "prefix_cache").cache_ops(self.ops)
        return reported(got, "your PrefixCache inside the reference KV-cache manager")["lookups"]


def learner_hashes(impl, tokens: list[int], block_size: int) -> list[int]:
    got = Driver(impl, "prefix_cache").hashes(list(tokens), block_size)
    return reported(got, f"block_hashes({list(tokens)}, {block_size})")["hashes"]


def engine_with(impl, model, reference: bool = False, **config: Any):
    """The reference engine with prefix caching on, its KV-cache manager using the learner's prefix cache (or,
    with `reference`, the reference's)."""

    class Manager(KVCacheManager):
        if not reference:
            prefix_cache_cls = staticmethod(lambda: LearnerCache(impl))
            block_hashes = staticmethod(lambda tokens, block_size: learner_hashes(impl, tokens, block_size))

    class Engine(ref.LLMEngine):
        kv_cache_manager_cls = Manager

    cfg = ref.EngineConfig(enable_prefix_caching=True, **config)
    return Engine(model, cfg)


def run_waves(impl, model, waves: list[list[list[int]]], params: SamplingParams, reference: bool = False,
              **config: Any):
    """Each wave is one generate call on the same engine; returns the engine and every request in order."""
    engine = engine_with(impl, model, reference, **config)
    before = set(engine.requests)
    try:
        for wave in waves:
            engine.generate(wave, params)
        if not reference:
            engine.kv_cache_manager.prefix_cache.replay()  # the inserts and evictions after the last lookup
    except (CaseFailure, KeyboardInterrupt, MemoryError):
        raise
    except Exception as exc:  # noqa: BLE001 - the reference engine, on what your cache answered
        raise CaseFailure(f"the reference engine failed on what your prefix cache answered: {type(exc).__name__}: "
                          f"{short(str(exc))}", hint="lookup returns the list of block ids of the longest cached "
                                                    "prefix, in order") from None
    requests = [r for rid, r in engine.requests.items() if rid not in before]
    return engine, requests


def check_end_to_end(impl, model, waves, params, expected_hits: list[int], text: str, **config: Any) -> None:
    engine, requests = run_waves(impl, model, waves, params, **config)
    prompts = [p for wave in waves for p in wave]
    for i, (p, r) in enumerate(zip(prompts, requests)):
        want = alone(model, p, params, engine.eos_token_id)
        if r.output_token_ids != want:
            raise CaseFailure(f"prompt {i}: with your prefix cache the tokens differ from generating it alone "
                              "(some cached block held other tokens' K and V)", input=text,
                              field=f"prompt {i} tokens", expected=want, got=r.output_token_ids,
                              hint="a hit must mean the same whole prefix (chained hashes) and an evicted block must "
                                   "no longer be found")
    got_hits = [r.num_cached_tokens for r in requests]
    if got_hits != expected_hits:
        raise CaseFailure("wrong number of prompt tokens found in the prefix cache (request.num_cached_tokens)",
                          input=text, field="num_cached_tokens per prompt", expected=expected_hits, got=got_hits,
                          hint="lookup returns the blocks of the longest cached prefix of the prompt's full-block "
                               "hashes")
    if engine.kv_cache_manager.num_free_blocks != engine.config.num_blocks:
        raise CaseFailure("blocks were not returned to the pool at the end", input=text)


def lcp(a: list[int], b: list[int]) -> int:
    """The length of the longest common prefix of a and b."""
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


@CASES("end to end: a shared system prompt is computed once, outputs unchanged", timeout=90)
def _(impl):
    model = load_model()
    bs = 4
    rng = seeded(7)
    system = random_prompts(model, 20, [13])[0]
    suffixes = random_prompts(model, 21, [5, 3, 8, 1])
    first = system + suffixes[0]
    later = [system + s for s in suffixes[1:]] + [list(first), list(system), system[:8]]
    rng.shuffle(later)
    # Admitted after `first` finished: the full blocks of the longest prefix shared with it, the last prompt
    # token excluded (it is always recomputed, to produce logits).
    hits = [0] + [bs * (min(lcp(p, first), len(p) - 1) // bs) for p in later]
    params = SamplingParams(max_tokens=5)
    text = (f"block_size={bs}; engine.generate([first]) then engine.generate(later) on the same engine, "
            f"first = system + {suffixes[0]}, system = {system}")
    check_end_to_end(impl, model, [[first], later], params, hits, text, num_blocks=64, block_size=bs)


@CASES("end to end: a small KV cache evicts cached blocks and reuses them", timeout=90)
def _(impl):
    model = load_model()
    bs = 4
    system = random_prompts(model, 30, [12])[0]
    others = random_prompts(model, 31, [19, 18, 7])
    tails = random_prompts(model, 32, [3, 2])
    # One request at a time in a cache of 10 blocks: the two unrelated prompts take the system prompt's freed
    # blocks, so the third request must miss; the last one hits its own predecessor's blocks.
    waves = [[system + tails[0]], [others[0]], [others[1]], [system + tails[1]], [others[1] + others[2]]]
    params = SamplingParams(max_tokens=4, ignore_eos=True)
    config = dict(num_blocks=10, block_size=bs)
    _, reference_requests = run_waves(impl, model, waves, params, reference=True, **config)
    hits = [r.num_cached_tokens for r in reference_requests]
    if hits[3] != 0 or hits[4] == 0:
        raise CaseFailure(f"the workload no longer evicts then hits as designed (a course bug): {hits}", kind="error")
    text = f"EngineConfig(num_blocks=10, block_size={bs}, enable_prefix_caching=True); one generate call per prompt: " \
           f"{waves}"
    check_end_to_end(impl, model, waves, params, hits, text, **config)
