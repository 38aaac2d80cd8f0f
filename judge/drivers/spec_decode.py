"""Driver of exercise 134 (verify_and_update): the learner's function called on requests built beside it.

`verify` makes one call (the grader's speculating engine calls it so for every request of every step);
`distribution` makes many, on requests seeded 0, 1, ... (or holding one generator), and tests their tokens against
the distribution the statement states (`sampling_failure`), which needs no answer: for a correct sampler, whatever
order it draws its random numbers in, the token at position i is t with probability A_i p_i(t) (p_i: the
distribution of logits row i, A_i = p_0(x_0) ... p_{i-1}(x_{i-1}), x_k: draft k), and a call ends on its first token
that is not its draft. So the number K of n calls whose token at position i is t (a "cell") is Binomial(n, A_i
p_i(t)). A cell fails when K lies in a tail of probability at most a on either side (computed exactly), which a
correct sampler does with probability at most 2a; with C cells and a = alpha / (2 C), the union bound keeps the
false rejection probability of the whole test below alpha, the cells' dependence notwithstanding.

A stop ends a run early: after a draft whose appending makes `stop_reason` say the request is done (end of sequence,
max_tokens), the call ends on that draft, and no later position is reached (its cells' probability is 0). Whatever the
random numbers, each call's request also shows what the statement fixes (`bookkeeping_failure`): the tokens returned
are the ones appended to `output_token_ids`, `num_computed_tokens` grew by their number, and the run ends at its first
stop, with that reason."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import torch

from framework.engine import stop_reason
from framework.request import Request
from framework.sampling import SamplingParams, make_generator, sampling_probs
from judge.crossing import learner_error
from judge.harness import int_values, plain_int, short

FALSE_REJECTION = 1e-6  # the test's false-rejection probability for a correct sampler (module docstring)


def _call(impl: ModuleType, case: dict[str, Any], seed: int | None = None, tokenizer=None,
          generator: torch.Generator | None = None) -> dict[str, Any]:
    """One call on a request whose last token and drafts were just computed (every token before its last is
    cached), with its own new generator or `generator`: what it returned and the request's state after it."""
    params = SamplingParams(**case["params"] | ({"seed": seed} if seed is not None else {}))
    request = Request(list(case["prompt"]), params, output_token_ids=list(case["outputs"]))
    request.num_computed_tokens = request.num_tokens - 1
    request.generator = generator or make_generator(params, torch.device("cpu"))
    logits = torch.as_tensor(case["logits"], dtype=torch.float32)  # a list, or a tensor from the grader's engine
    try:
        returned = impl.verify_and_update(request, list(case["drafts"]), logits, case["eos"], tokenizer)
    except Exception as exc:  # noqa: BLE001 - the learner's error, reported as data
        return {"error": learner_error(exc)}
    if not isinstance(returned, (tuple, list)) or len(returned) != 2:
        return {"problem": f"verify_and_update returned {short(returned)} ({type(returned).__name__}); it returns a "
                           "pair", "hint": "return (the tokens appended, the stop reason or None)"}
    if not isinstance(request.output_token_ids, list):  # the engine's request and its outputs extend that list
        return {"problem": f"after the call request.output_token_ids is {short(request.output_token_ids)} "
                           f"({type(request.output_token_ids).__name__}), not a list",
                "hint": "append to request.output_token_ids in place: it stays a list"}
    tokens, reason = returned
    values = int_values(tokens)
    # the request's tokens and count are the engine's, its outputs' and a server's JSON: ints, as the engine's own
    odd = [v for v in map(plain_int, [*request.output_token_ids, request.num_computed_tokens]) if isinstance(v, str)]
    if odd or values is None:
        what = f"request.output_token_ids and num_computed_tokens hold {odd[0]}" if odd else \
            f"verify_and_update returned the tokens {short(tokens)} ({type(tokens).__name__})"
        return {"problem": f"{what} after the call: token ids and counts are Python ints",
                "hint": "append int(token) (or tensor.item()), and add an int to num_computed_tokens"}
    return {"returned": values, "reason": reason, "output_token_ids": list(request.output_token_ids),
            "num_computed_tokens": request.num_computed_tokens}


def verify(impl: ModuleType, case: dict[str, Any]) -> dict[str, Any]:
    """One call, with the course's tokenizer where the case has a stop string."""
    if case["params"].get("stop"):
        from mini_llm import load_tokenizer
        return _call(impl, case, tokenizer=load_tokenizer())
    return _call(impl, case)


def distribution(impl: ModuleType, case: dict[str, Any], trials: int, repeats: int = 0,
                 one_generator: bool = False) -> dict[str, Any]:
    """`trials` calls on fresh requests seeded 0, 1, ..., then the first `repeats` of them again (the first error
    ends it): what the test finds wrong with them ("problem", None if nothing), and each call's tokens as a
    diagnostic (the grader tests them again). With `one_generator`, every call is seeded 0 and its request holds
    the same generator, which each call moves on: the calls of one request's steps."""
    shared = make_generator(SamplingParams(**case["params"] | {"seed": 0}), torch.device("cpu")) if one_generator \
        else None
    runs, states = [], []
    for seed in [*range(trials), *range(repeats)]:
        result = _call(impl, case, 0 if one_generator else seed, generator=shared)
        if "error" in result or "problem" in result:
            return result
        runs.append(result.pop("returned"))
        states.append(result)
    runs, again = runs[:trials], runs[trials:]
    failure = calls_failure(case, runs, again, states, one_generator)
    return {"problem": failure and f"{failure['message']}\nhint: {failure['hint']}", "_runs": runs, "_again": again,
            "_states": states}


def calls_failure(case: dict[str, Any], runs: list[list[int]], again: list[list[int]], states: list[dict[str, Any]],
                  one_generator: bool = False) -> dict[str, str] | None:
    """What the loop's calls show wrong (message, hint), or None: the requests' state after each call (`states`, for
    the calls `runs` then `again`), then the tokens' distribution, then the repeated calls' tokens."""
    return bookkeeping_failure(case, [*runs, *again], states) or sampling_failure(case, runs, one_generator) or \
        repeat_failure(runs, again)


def _stops(case: dict[str, Any], run: list[int]) -> list[str | None]:
    """stop_reason (no tokenizer, as the loop's calls get none) after each token of `run`, appended one at a time to
    a fresh request of the case."""
    request = Request(list(case["prompt"]), SamplingParams(**case["params"]), output_token_ids=list(case["outputs"]))
    reasons = []
    for token in run:
        request.output_token_ids.append(token)
        reasons.append(stop_reason(request, case["eos"], None))
    return reasons


def draft_stops(case: dict[str, Any]) -> list[bool]:
    """For k = 0 .. d: whether the request is done once drafts 0 .. k - 1 are appended (False for k = 0)."""
    return [False, *(reason is not None for reason in _stops(case, case["drafts"]))]


def bookkeeping_failure(case: dict[str, Any], runs: list[list[int]], states: list[Any]) -> dict[str, str] | None:
    """The first call whose request breaks what the statement fixes whatever the random numbers (message, hint), or
    None: the tokens returned are those appended to output_token_ids, in order; num_computed_tokens grew by their
    number; the run ends at the first token after which stop_reason gives a reason, and returns that reason."""
    outputs, start = list(case["outputs"]), len(case["prompt"]) + len(case["outputs"]) - 1
    stops: dict[tuple[int, ...], list[str | None]] = {}
    for call, (run, state) in enumerate(zip(runs, states)):
        if not isinstance(state, dict) or not isinstance(run, list) or any(type(t) is not int for t in run):
            return {"message": f"the judge's driver reported {run!r}, {state!r} for call {call}: this report is not "
                               "the public driver's", "hint": "is judge/drivers/ replaced or changed by your code?"}
        appended = state.get("output_token_ids")
        if appended != outputs + run:
            return {"message": f"call {call} of the loop returned {run}, but request.output_token_ids went from "
                               f"{outputs} to {appended}: the tokens returned are not those appended",
                    "hint": "append each token you emit to request.output_token_ids, one at a time, and return the "
                            "tokens appended in this call, in order"}
        if tuple(run) not in stops:
            stops[tuple(run)] = _stops(case, run)
        reasons = stops[tuple(run)]
        first = next((i for i, reason in enumerate(reasons) if reason), None)
        if first is not None and first < len(run) - 1:
            return {"message": f"call {call} of the loop emitted {run}: after token {run[first]} at position {first} "
                               f"stop_reason says {reasons[first]!r}, yet it appended {len(run) - first - 1} more",
                    "hint": "the request emitted past its stop: append the tokens one at a time, call "
                            "stop_reason(request, eos_token_id, tokenizer) after each, and stop appending at the "
                            "first reason"}
        want = reasons[-1] if run else None
        if state.get("reason") != want:
            return {"message": f"call {call} of the loop emitted {run} and returned the finish reason "
                               f"{state.get('reason')!r}: stop_reason after its last token says {want!r}",
                    "hint": "call stop_reason(request, eos_token_id, tokenizer) after each appended token and return "
                            "the first reason (None when the request goes on)"}
        if state.get("num_computed_tokens") != start + len(run):
            return {"message": f"call {call} of the loop appended {len(run)} token(s) with {len(case['drafts'])} "
                               f"draft(s), and num_computed_tokens went from {start} to "
                               f"{state.get('num_computed_tokens')}, not {start + len(run)}",
                    "hint": "advance num_computed_tokens by the number of tokens appended (the last token and the "
                            "accepted drafts are now cached), not by 1 + d"}
    return None


def repeat_failure(runs: list[list[int]], again: list[list[int]]) -> dict[str, str] | None:
    """A seeded request is reproducible: the same seeded calls made again emit the same tokens (a global random
    generator has moved on between the two)."""
    seed = next((seed for seed, (a, b) in enumerate(zip(runs, again)) if a != b), None)
    if seed is None:
        return None
    return {"message": f"the same seeded calls, made again, emitted other tokens: seed {seed} gave {runs[seed]}, "
                       f"then {again[seed]}",
            "hint": "draw your random numbers with the request's generator, torch.rand((), "
                    "generator=request.generator), not a global one: a seeded request is reproducible"}


def row_probs(case: dict[str, Any]) -> list[list[float]]:
    """p_i for each row of the case's logits, as framework.sampling computes it (temperature, top-k, top-p)."""
    params = SamplingParams(**case["params"])
    return [sampling_probs(torch.tensor(row, dtype=torch.float32), params).double().tolist() for row in case["logits"]]


def _accepted(run: list[int], drafts: list[int]) -> int:
    """How many drafts the run begins with."""
    return next((i for i, (t, d) in enumerate(zip(run, drafts)) if t != d), min(len(run), len(drafts)))


def _shape_failure(runs: list[list[int]], drafts: list[int], stops: list[bool]) -> dict[str, str] | None:
    """Why a call's tokens cannot come from the rule whatever its random numbers: a call emits its accepted drafts
    and then exactly one token that is not the next draft (the bonus token after all of them), unless the request
    is done after n accepted drafts (`stops[n]`): then the call ends on draft n - 1."""
    bonus_seen = any(len(run) == len(drafts) + 1 and _accepted(run, drafts) == len(drafts) for run in runs)
    for call, run in enumerate(runs):
        n = _accepted(run, drafts)
        cut = next((k for k in range(1, n + 1) if stops[k]), None)  # drafts accepted when the request is done
        if len(run) == (n + 1 if cut is None else cut):
            continue
        if cut is not None:
            why = f"went on after draft {cut - 1} (token {drafts[cut - 1]}), after which the request is done"
            hint = "append the tokens one at a time, call stop_reason after each, and stop at the first reason"
        elif not run:
            why, hint = "emitted no token", "every call emits at least one token"
        elif len(run) > n + 1:
            why = f"went on after token {run[n]} at position {n}, which is not draft {drafts[n]}" \
                if n < len(drafts) else f"emitted {len(run) - n - 1} more token(s) after the bonus token"
            hint = "stop at the first rejected draft: its replacement is the call's last token"
        elif n == len(drafts) and not bonus_seen:
            why, hint = "emitted no bonus token after all its drafts", \
                "after all d drafts are accepted, sample one more token from row d (sample_token)"
        else:
            why = f"ended on draft {n - 1} (token {drafts[n - 1]}): a rejected draft was emitted as its own replacement"
            hint = ("on a rejection sample the replacement from p with the draft's probability set to 0 "
                    "(renormalised): it is never the draft")
        return {"message": f"call {call} of the loop emitted {run}: it {why}", "hint": hint}
    return None


def _binomial_range(n: int, prob: float, tail: float) -> tuple[int, int]:
    """The counts (lo, hi) outside which Binomial(n, prob) has at most `tail` probability on either side."""
    if prob <= 0 or prob >= 1:
        return (0, 0) if prob <= 0 else (n, n)
    pmf = torch.distributions.Binomial(n, torch.tensor(prob, dtype=torch.float64)).log_prob(
        torch.arange(n + 1, dtype=torch.float64)).exp()
    below, above = pmf.cumsum(0), pmf.flip(0).cumsum(0).flip(0)  # P(K <= k), P(K >= k)
    return int((below <= tail).sum()), n - int((above <= tail).sum())


def _cell_hint(position: int, token: int, drafts: list[int], too_many: bool, p: float) -> str:
    """What a cell out of range says is wrong; `p`: the token's probability in its row, after temperature and cuts."""
    if too_many and p == 0:
        return (f"token {token} came at position {position}, where temperature and the cuts (top_k, top_p, min_p) "
                "give it probability 0: take p from sampling_probs(logits[i], params), not a plain softmax")
    if position == len(drafts):
        return ("the bonus token is not distributed as p of row d: after all d drafts are accepted, sample it with "
                "sample_token(logits[d], params, request.generator)" +
                ("; with no drafts (d = 0) it is the call's one token, sampled from row 0" if not drafts else ""))
    if token == drafts[position]:
        return (f"draft {position} is accepted too {'often' if too_many else 'rarely'}: accept draft x with "
                "probability p(x): torch.rand((), generator=request.generator) < p[x]")
    return (f"the replacement of rejected draft {position} is not distributed as p with the draft removed: sample it "
            "from p with p[x] set to 0, renormalised")


def sampling_failure(case: dict[str, Any], runs: list[list[int]], one_generator: bool = False
                     ) -> dict[str, str] | None:
    """What the calls' tokens `runs` (in the loop's order) show wrong, or None: a call whose tokens no random numbers
    could give, else the first position with a cell out of range, with a table of its cells (message, hint).
    `one_generator`: the calls' requests held one generator (every call seeded 0)."""
    drafts, stops = case["drafts"], draft_stops(case)
    failure = _shape_failure(runs, drafts, stops)
    if failure:
        return failure
    probs, n = row_probs(case), len(runs)
    cells = [(i, t) for i in range(len(drafts) + 1) for t in range(len(probs[i]))]
    tail = FALSE_REJECTION / (2 * len(cells))
    reach, bad = [1.0], []
    for i, x in enumerate(drafts):  # position i + 1 is reached after draft i is accepted, unless the request is done
        reach.append(0.0 if stops[i + 1] else reach[-1] * probs[i][x])
    rows = {}
    for i, t in cells:
        expected = reach[i] * probs[i][t]
        count = sum(1 for run in runs if len(run) > i and run[i] == t)
        lo, hi = _binomial_range(n, expected, tail)
        rows.setdefault(i, []).append((t, expected, count, lo, hi))
        if not lo <= count <= hi:
            bad.append((i, -max(lo - count, count - hi) / max(hi - lo, 1), t, count > hi))
    if not bad:
        return None
    i, _, t, too_many = min(bad)  # the first position out of range (later ones depend on it), its worst cell
    table = "\n".join([f"position {i}: token, P(emitted there), expected count, got, a correct sampler's range"] + [
        f"  {tok:>5}  {e:>8.4f}  {e * n:>8.1f}  {c:>6}  [{lo}, {hi}]{'  <- out of range' if not lo <= c <= hi else ''}"
        for tok, e, c, lo, hi in rows[i]])
    hint, all_same = _cell_hint(i, t, drafts, too_many, probs[i][t]), len({tuple(run) for run in runs}) == 1
    if all_same and one_generator:
        hint = (f"all {n} calls emitted {runs[0]}: they drew the same random numbers. Draw them with the request's "
                "generator, torch.rand((), generator=request.generator), which every call moves on: a generator made "
                "from the seed at each call draws the same numbers every time")
    elif all_same:
        hint = (f"all {n} calls, on requests seeded 0 to {n - 1}, emitted {runs[0]}: with temperature > 0 the tokens "
                f"are sampled with the request's generator, never taken as an argmax. {hint[:1].upper()}{hint[1:]}")
    return {"message": f"over {n} calls, token {t} came at position {i} {'more' if too_many else 'less'} often "
                       f"than a correct sampler gives it, except with probability below {FALSE_REJECTION:g}:\n{table}",
            "hint": hint}


def _logits_text(logits: Any) -> str:
    """The logits as Python: rows that are one-hot as a one_hot of their argmax, else every value."""
    rows = torch.as_tensor(logits, dtype=torch.float64)
    argmax = rows.argmax(-1).tolist()
    if bool(((rows == 0) | (rows == 1)).all()) and rows.sum(-1).eq(1).all():
        return f"logits = torch.nn.functional.one_hot(torch.tensor({argmax}), {rows.shape[-1]}).float()"
    return f"logits = torch.tensor({rows.tolist()})  # rows' argmax {argmax}"


def describe(fn: str, case: dict[str, Any], trials: int | None = None, repeats: int = 0,
             one_generator: bool = False) -> str:
    """A call of this driver as code a learner can run, after `import torch`,
    `from framework.request import Request` and `from framework.sampling import SamplingParams, make_generator`."""
    params = ", ".join(f"{k}={v!r}" for k, v in case["params"].items() if v not in (None, []))
    stop = bool(case["params"].get("stop"))
    call = f"verify_and_update(request, {case['drafts']}, logits, {case['eos']}{', tokenizer' if stop else ''})"
    generator = "shared" if one_generator else "make_generator(request.sampling_params, torch.device('cpu'))"
    setup = "request.num_computed_tokens = request.num_tokens - 1" + (
        f"; request.generator = {generator}" if case["params"].get("temperature") else "")
    tokenizer = "tokenizer = mini_llm.load_tokenizer()\n" if stop else ""

    def request(seed: str) -> str:
        return f"request = Request({case['prompt']}, SamplingParams({params}{seed}), " \
               f"output_token_ids={case['outputs']}); {setup}"

    if fn != "distribution":
        return f"{_logits_text(case['logits'])}\n{tokenizer}{request('')}\n{call}"
    probs = [[round(p, 4) for p in row] for row in row_probs(case)]
    if one_generator:  # one request's generator, moved on by every call
        loop = (f"shared = make_generator(SamplingParams({params}, seed=0), torch.device('cpu'))\n"
                f"for _ in range({trials}):\n    {request(', seed=0')}")
    else:
        loop = (f"for seed in {f'[*range({trials}), *range({repeats})]' if repeats else f'range({trials})'}:\n"
                f"    {request(', seed=seed')}")
    return f"{_logits_text(case['logits'])}\n# p of each row, after temperature and cuts: {probs}\n{loop}\n    {call}"
