"""Hidden tests of exercise 134 (verify_and_update); the reference is solutions/spec_decode.py.

The learner's function runs in the worker on requests the driver builds (judge/drivers/spec_decode.py). Greedy
and stop cases compare one call with the reference's on the same request: what it returned, then the request's
`output_token_ids` and `num_computed_tokens`. Random cases test the tokens of many seeded calls against the
distribution the rule gives, cell by cell, with a false-rejection probability below 1e-6 for any correct sampler
(judge/drivers/spec_decode.py; never the learner's random numbers), and the request after each call against what
rules 3 and 4 fix whatever the random numbers (the tokens returned appended, num_computed_tokens, the stops). The
last case runs the speculating engine with the learner's function on the embedded model: greedy, its tokens must
equal the engine's without speculation.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

import mini_llm
from framework.engine import EngineConfig
from framework.sampling import SamplingParams
from framework.spec_decode import SpeculativeConfig, speculating_engine
from framework.trace import StepTracer
from judge.drivers import spec_decode as spec_driver
from judge.drivers.engine import plain_params
from judge.harness import CaseFailure, Cases, whole
from judge.hidden.end_to_end import load_model
from judge.remote import Driver, learner_failure
from judge.secret import rng as seeded
from judge.traces import TracedEngines, offer, with_table
from solutions import spec_decode as ref
from solutions.engine import LLMEngine

CASES = Cases()
VOCAB = 16
NAME = "verify_and_update"
HINTS = {
    "returned": "greedy: accept drafts while each equals its row's argmax; at the first mismatch emit that row's "
                "argmax and stop; after all d drafts emit row d's argmax too (the bonus token)",
    "output_token_ids": "append each emitted token to request.output_token_ids, and none past a stop",
    "num_computed_tokens": "advance num_computed_tokens by the number of tokens appended (the last token and the "
                           "accepted drafts are now cached), not by 1 + d",
    "reason": "call stop_reason(request, eos_token_id, tokenizer) after each appended token and return the first "
              "reason (None when the request goes on)",
}
STOP_HINT = ("the request emitted past its stop: append the tokens one at a time, call stop_reason after each, and "
             "stop appending at the first reason")


def greedy_case(prompt: list[int], outputs: list[int], drafts: list[int], argmax: list[int], max_tokens: int = 32,
                eos: int | None = None, seed: int = 0, vocab: int = VOCAB, stop: list[str] | None = None
                ) -> dict[str, Any]:
    """Logits whose row i has its maximum at argmax[i] alone: small random integers (shown whole in a failure), or
    one-hot rows for a model's vocabulary."""
    r = seeded(f"134:{seed}")
    if vocab > VOCAB:
        logits = [[float(t == top) for t in range(vocab)] for top in argmax]
    else:
        logits = [[float(r.randint(-4, 4)) for _ in range(vocab)] for _ in argmax]
        for row, top in zip(logits, argmax):
            row[top] = max(row) + r.randint(1, 2)
    return {"prompt": prompt, "outputs": outputs, "drafts": drafts, "logits": logits, "eos": eos,
            "params": {"max_tokens": max_tokens, "stop": stop or []}}


def describe(case: dict[str, Any]) -> str:
    return spec_driver.describe("verify", case)


def check_call(impl, case: dict[str, Any]) -> dict[str, Any]:
    got = Driver(impl, "spec_decode").verify(case)
    if "error" in got:
        raise learner_failure(got["error"], NAME, describe(case))
    if "problem" in got:
        raise CaseFailure(got["problem"], input=describe(case), hint=got.get("hint"))
    want = Driver(ref, "spec_decode").verify(case)
    for field in ("returned", "output_token_ids", "num_computed_tokens", "reason"):
        if got[field] != want[field]:
            past_stop = want["reason"] and field in ("returned", "output_token_ids") and \
                got[field][: len(want[field])] == want[field]
            raise CaseFailure(f"wrong {field} after the call", input=describe(case), field=field,
                              expected=want[field], got=got[field], hint=STOP_HINT if past_stop else
                              _hint(field, want[field], got[field]))
    return got


def _hint(field: str, want: Any, got: Any) -> str:
    """The hint for `field`, led by what the learner's answer shows: too many tokens or too few, num_computed_tokens
    advanced too far or not far enough."""
    if field in ("returned", "output_token_ids") and isinstance(got, list) and len(got) != len(want):
        return f"{'too many' if len(got) > len(want) else 'too few'} tokens: {HINTS[field]}"
    if field == "num_computed_tokens" and isinstance(got, int):
        return f"advanced {'too far' if got > want else 'not far enough'}: {HINTS[field]}"
    return HINTS[field]


@CASES("greedy: every draft accepted, then the bonus token", public=True)
def _(impl):
    check_call(impl, greedy_case([3, 4, 5], [6, 7, 8], [7, 8, 9], [7, 8, 9, 5]))


@CASES("greedy: the first mismatch ends the run", public=True)
def _(impl):
    check_call(impl, greedy_case([3, 4, 5], [6, 7, 8], [7, 8, 9], [7, 8, 4, 5], seed=1))
    check_call(impl, greedy_case([3, 4, 5], [6], [2, 8, 9], [7, 8, 9, 5], seed=2))


@CASES("greedy: no drafts, one token", public=True)
def _(impl):
    check_call(impl, greedy_case([1, 2], [], [], [11], seed=3))


@CASES("greedy: an argmax tie goes to the first index")
def _(impl):
    tie = {"prompt": [3, 4], "outputs": [6], "drafts": [5, 2], "eos": None, "params": {"max_tokens": 32, "stop": []},
           "logits": [[0.0, 1.0, 0.0, 0.0, 0.0, 1.0], [0.0, 0.0, 2.0, 0.0, 0.0, 2.0], [1.0] * 6]}
    check_call(impl, tie)  # row 0's maxima are 1 and 5: the argmax is 1, so draft 5 is rejected and 1 emitted
    check_call(impl, tie | {"drafts": [1, 5]})  # draft 1 accepted; row 1's argmax is 2, not 5
    check_call(impl, tie | {"drafts": [1, 2]})  # both accepted; the bonus of an all-equal row is token 0


@CASES("greedy: seeded drafts and argmaxes")
def _(impl):
    r = seeded("134:random greedy")
    for i in range(20):
        d = r.randrange(0, 6)
        drafts = [r.randrange(VOCAB) for _ in range(d)]
        accepted = r.randrange(0, d + 1)
        argmax = drafts[:accepted] + [r.randrange(VOCAB) for _ in range(d + 1 - accepted)]
        check_call(impl, greedy_case([r.randrange(VOCAB) for _ in range(r.randrange(1, 6))],
                                     [r.randrange(VOCAB) for _ in range(r.randrange(0, 4))], drafts, argmax,
                                     seed=100 + i))


@CASES("stop: max_tokens inside an accepted run", public=True)
def _(impl):
    check_call(impl, greedy_case([3, 4], [6, 7, 8], [7, 8, 9], [7, 8, 9, 5], max_tokens=5, seed=4))
    check_call(impl, greedy_case([3, 4], [6, 7, 8], [7, 8, 9], [7, 8, 9, 5], max_tokens=7, seed=5))


@CASES("stop: end of sequence inside an accepted run", public=True)
def _(impl):
    check_call(impl, greedy_case([3, 4], [6], [7, 2, 9], [7, 2, 9, 5], eos=2, seed=6))
    check_call(impl, greedy_case([3, 4], [6], [7, 8, 9], [7, 8, 2, 5], eos=2, seed=7))


@CASES("stop: a stop string inside an accepted run")
def _(impl):
    from mini_llm import load_tokenizer

    tokens = load_tokenizer().encode(" was happy. The")  # the stop string "." ends the run at its third token
    vocab = load_model().cfg.vocab_size
    check_call(impl, greedy_case(tokens[:2], [], tokens, tokens + [tokens[0]], vocab=vocab, stop=["."], seed=8))


# ----------------------------------------------------------------------------------------------------------
# Random sampling: many seeded calls' tokens against the distribution the statement states, cell by cell, with a
# false-rejection probability below 1e-6 for any correct sampler (judge/drivers/spec_decode.py derives it)

TRIALS, REPEATS = 2000, 200
STEPS = 500  # calls of one request's steps (one generator): the same numbers at every step fail all but certainly


def check_distribution(impl, logits: list[list[float]], drafts: list[int], temperature: float, repeats: int = 0,
                       one_generator: bool = False, eos: int | None = None, outputs: tuple[int, ...] = (),
                       max_tokens: int = 64, **cut: Any) -> None:
    """TRIALS seeded calls against the distribution, then the first `repeats` of them again; with `one_generator`,
    STEPS calls whose requests hold one generator, as the calls of one request's steps do. After every call, the
    request's state too: the tokens returned appended, num_computed_tokens grown by their number, the run ended at
    its first stop (`eos`, or `max_tokens` counting the request's `outputs`)."""
    trials = STEPS if one_generator else TRIALS
    case = {"prompt": [1, 2, 3], "outputs": list(outputs), "drafts": drafts, "logits": logits, "eos": eos,
            "params": {"max_tokens": max_tokens, "temperature": temperature, **cut}}
    text = spec_driver.describe("distribution", case, trials, repeats, one_generator)
    got = Driver(impl, "spec_decode").distribution(case, trials, repeats, one_generator)
    if "error" in got:
        raise learner_failure(got["error"], NAME, text)
    if "_runs" not in got and got.get("problem"):  # a call's tokens that are not ints
        raise CaseFailure(got["problem"], input=text, hint=got.get("hint"))
    # tested here, never trusting the worker's verdict
    runs, again = whole(got.get("_runs"), trials, "calls"), whole(got.get("_again"), repeats, "repeated calls")
    states = whole(got.get("_states"), trials + repeats, "requests' states")
    failure = spec_driver.calls_failure(case, runs, again, states, one_generator)
    if failure:
        raise CaseFailure(failure["message"], input=text, hint=failure["hint"])


def probs_logits(rows: list[list[float]]) -> list[list[float]]:
    """Logits whose softmax is each row of `rows` (at temperature 1)."""
    return torch.tensor(rows, dtype=torch.float64).log().tolist()


def random_logits(seed: str, rows: int, vocab: int = 8) -> list[list[float]]:
    """Rounded, so that a failure shows them exactly."""
    r = seeded(seed)
    return [[round(r.gauss(0, 1.2), 2) for _ in range(vocab)] for _ in range(rows)]


@CASES("random: acceptance with probability p(x), residual without the draft", public=True)
def _(impl):
    logits = probs_logits([[0.4, 0.4, 0.15, 0.05], [0.1, 0.2, 0.3, 0.4], [0.5, 0.1, 0.1, 0.3]])
    check_distribution(impl, logits, [0, 2], temperature=1.0, repeats=REPEATS)
    check_distribution(impl, logits, [0, 2], temperature=1.0, one_generator=True)
    check_distribution(impl, logits[1:], [0], temperature=1.0, top_k=3)  # a draft outside the top-k: never accepted


@CASES("random: a likely draft, the first token is distributed as p")
def _(impl):
    logits = random_logits("134:likely", 3)
    top = int(np.argmax(logits[0]))
    logits[0][top] += 1.5  # p(draft) near one half: acceptance and rejection both common
    check_distribution(impl, logits, [top, int(np.argmax(logits[1]))], temperature=1.0)


@CASES("random: an unlikely draft, a top-k and a top-p cut")
def _(impl):
    logits = random_logits("134:unlikely", 2)
    check_distribution(impl, logits, [int(np.argmin(logits[0]))], temperature=0.8)
    check_distribution(impl, logits, [int(np.argsort(logits[0])[-2])], temperature=1.0, top_k=3)
    check_distribution(impl, logits, [int(np.argsort(logits[0])[-3])], temperature=1.0, top_p=0.7)


@CASES("random: a stop inside the run, and no drafts")
def _(impl):
    logits = probs_logits([[0.7, 0.1, 0.1, 0.1], [0.1, 0.1, 0.6, 0.2], [0.25, 0.25, 0.25, 0.25]])
    check_distribution(impl, logits, [0, 2], temperature=1.0, eos=2)  # draft 1 is the end of sequence: the run ends
    check_distribution(impl, logits, [0, 2], temperature=1.0, outputs=(5, 6), max_tokens=4)  # room for two tokens
    check_distribution(impl, probs_logits([[0.1, 0.35, 0.3, 0.2, 0.05]]), [], temperature=1.0, top_k=4)  # the bonus
    # token alone, sampled: an argmax or a constant gives every call the same token


# ----------------------------------------------------------------------------------------------------------
# End to end


def generate(impl, prompts: list[list[int]], max_tokens: int, config: dict[str, Any],
             speculative: dict[str, Any]) -> tuple[dict[str, Any], StepTracer]:
    """Greedy outputs of the reference engine with speculation, run here, calling the learner's verify_and_update
    in the worker (the driver's `verify`, on a copy of the request) and taking back the request's new state; and the
    engine's step trace."""
    drv = Driver(impl, "spec_decode")

    class Failed(Exception):
        """The worker's reply to a call that failed (the learner's error, or tokens that are not ints)."""

        def __init__(self, reply: dict) -> None:
            super().__init__(str(reply))
            self.reply = reply

    def verify_and_update(request, drafts, logits, eos, tokenizer):
        case = {"params": plain_params(request.sampling_params), "prompt": list(request.prompt_token_ids),
                "outputs": list(request.output_token_ids), "drafts": list(drafts), "eos": eos,
                "logits": logits.float()}
        got = drv.verify(case)
        if "error" in got or "problem" in got:
            raise Failed(got)
        request.output_token_ids[:] = got["output_token_ids"]
        request.num_computed_tokens = got["num_computed_tokens"]
        return got["returned"], got["reason"]

    engine = speculating_engine(LLMEngine, verify_and_update)(
        load_model(), EngineConfig(**config, speculative=SpeculativeConfig(**speculative)))
    tracer = StepTracer(engine)
    try:
        outputs = engine.generate(prompts, SamplingParams(max_tokens=max_tokens, ignore_eos=True))
    except Exception as exc:  # noqa: BLE001 - a StepError caused by the learner's function
        if isinstance(exc.__cause__, Failed):
            return exc.__cause__.reply, tracer
        raise
    finally:
        tracer.close()
    return {"outputs": [o.outputs[0].token_ids for o in outputs], "num_draft_tokens": engine.num_draft_tokens,
            "num_accepted_tokens": engine.num_accepted_tokens,
            "free_blocks": engine.kv_cache_manager.num_free_blocks}, tracer


@CASES("end to end: greedy with speculation equals without", timeout=120)
def _(impl):
    r, model = seeded("134:e2e"), load_model()
    prompts = []
    for n in (3, 2, 5, 1):  # p, the model's greedy continuation of p, p again: prompt lookup drafts what the model
        p = [r.randrange(model.cfg.vocab_size) for _ in range(n)]  # is likely to say again, so drafts are accepted
        prompts.append(p + mini_llm.generate(model, p, 8) + p)
    config = {"num_blocks": 48, "block_size": 4, "token_budget": 24, "max_num_seqs": 4}
    speculative = {"num_speculative_tokens": 4, "prompt_lookup_min": 1, "prompt_lookup_max": 3}
    text = (f"SpecDecodeEngine(model, EngineConfig(**{config}, speculative=SpeculativeConfig(**{speculative})))"
            f".generate({prompts}, SamplingParams(max_tokens=12, ignore_eos=True))")
    got, yours = generate(impl, prompts, 12, config, speculative)
    if "error" in got:
        raise learner_failure(got["error"], NAME, text)
    if "problem" in got:
        raise CaseFailure(got["problem"], input=text, hint=got.get("hint"))
    plain = LLMEngine(model, EngineConfig(**config))
    want = [o.outputs[0].token_ids for o in plain.generate(prompts, SamplingParams(max_tokens=12, ignore_eos=True))]
    reference, theirs = generate(ref, prompts, 12, config, speculative)  # the same drafts, verified by the reference
    failure = e2e_failure(got, want, config, text) or accepted_failure(got, reference, text)
    runs = TracedEngines(yours, theirs)
    offer(runs)
    if failure is not None:
        raise with_table(failure, runs, 0)


def accepted_failure(got: dict[str, Any], reference: dict[str, Any], text: str) -> CaseFailure | None:
    """Greedy acceptance is exact: the same drafts, verified right, accept as many tokens as the reference's."""
    mine, want = ([run[k] for k in ("num_draft_tokens", "num_accepted_tokens")] for run in (got, reference))
    if mine != want:
        return CaseFailure("the engine accepted another number of drafted tokens than with the reference's "
                           "verify_and_update", input=text, field="drafted, accepted tokens", expected=want,
                           got=mine, hint=HINTS["returned"])
    return None


def e2e_failure(got: dict[str, Any], want: list[list[int]], config: dict[str, Any], text: str) -> CaseFailure | None:
    """What is wrong with the speculating engine's run `got`, given the tokens without speculation."""
    for i, (w, g) in enumerate(zip(want, got["outputs"])):
        if w != g:
            return CaseFailure(f"request {i}'s tokens differ from the engine's without speculation", input=text,
                               field=f"output {i}", expected=w, got=g, hint=HINTS["returned"])
    if got["free_blocks"] != config["num_blocks"]:
        return CaseFailure("blocks are still held after every request finished", input=text, field="free blocks",
                           expected=config["num_blocks"], got=got["free_blocks"])
    return None
