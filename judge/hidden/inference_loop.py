"""Hidden tests of exercise 130 (LLMEngine.step and LLMEngine.generate).

The learner's engine runs in the worker on fakes that replay the script of the reference scheduler, KV-cache manager
and model runner, recorded here on the same requests, and its driver records every step (judge/drivers/engine.py).
Each record is checked against what the scheduler asked for: one forward pass carrying every scheduled request with
the right items, `num_computed_tokens` advanced, one token sampled from the right row of logits for exactly the
requests that completed their pending tokens, finished requests retired (blocks freed), one output per request that
got a token.
Then it must equal the record of the reference engine run here on the same requests by the same driver (its twin):
a worker that forges records gains nothing unless it does exactly what a right engine does. The independent
reference for the tokens is `mini_llm.generate` run here, each request alone (greedy, fp32 on the CPU).
"""

from __future__ import annotations

from typing import Any, Sequence

from framework.engine import EngineConfig
from framework.sampling import SamplingParams
from framework.trace import StepRecord
from judge.compare import difference
from judge.drivers.engine import (BracketTokenizer, compared, departure_message, first_difference, plain_params,
                                  with_work)
from judge.drivers.rounds import answered, departure_of, handling
from judge.harness import CaseFailure, Cases, short
from judge.secret import rng as seeded  # random cases drawn with the instructor's secret, if any
from judge.traces import StepLog, offer, row, step_record, with_table
from judge.hidden.end_to_end import alone, expected_reason, load_model, random_prompts
from judge.remote import Driver, learner_failure
from solutions import engine as ref

_ENGINES: list["Engine"] = []  # the engines of the running case
# The names the engine driver keeps the engine under test and the reference's twin under (one case's engines run
# one after the other; distinct names because code graded in this process keeps its engine here too).
ENGINE, TWIN = "engine", "reference engine"


def _end() -> None:
    """Every case ends comparing its engines' steps with the reference engine's."""
    for engine in _ENGINES:
        if engine.unmatched is not None:
            raise engine.unmatched


CASES = Cases(before_each=_ENGINES.clear, after_each=_end)


# ----------------------------------------------------------------------------------------------------------
# Hints


def crash_hint(err: dict) -> str | None:
    """A hint for each way a learner's step or generate commonly crashes (`err`: the exception as reported)."""
    text, kind = str(err.get("message", "")), str(err.get("type", ""))
    if kind == "IndexError" and "out of bounds" in text:
        return ("the logits have one row per item whose need_logits is true, in item order, not one per scheduled "
                "request: keep a row counter that advances only when a request samples a token (and decide "
                "whether it samples from completes_prompt read before num_computed_tokens is updated)")
    if "NoneType" in text:
        return ("something is None: does every function end with its `return` (step returns a list of "
                "RequestOutput, [] when nothing is scheduled; generate returns the final outputs)?")
    if kind == "AttributeError" and ("SchedulerOutput" in text or "ScheduledRequest" in text):
        return ("sched.scheduled is a list of ScheduledRequest; each has .request, .num_new_tokens and "
                ".completes_prompt")
    if kind == "TypeError" and "not iterable" in text:
        return "step returns a list of RequestOutput and generate a list with one final output per prompt"
    return None


def raised(err: dict, name: str, input: str | None = None) -> CaseFailure:
    """The learner's exception as a failure naming `name`, with a hint for the usual crashes."""
    if err.get("memory"):
        raise MemoryError(err.get("message", ""))  # the harness gives the "memory" verdict
    failure = learner_failure(err, name, input)
    if failure.kind == "error":
        failure.hint = crash_hint(err)
    return failure


FIELD_HINTS = {
    "num_computed_tokens": "after the forward pass every scheduled request does num_computed_tokens += "
                           "num_new_tokens, once per step",
    "num_output_tokens": "append exactly one sampled token (an int) to request.output_token_ids, only for a request "
                         "whose pending tokens this step completed",
    "running": "leave the scheduler's queues to it: self.scheduler.finish(request, reason) retires a request",
    "waiting": "leave the scheduler's queues to it: the engine adds requests with self.add_request(s)",
}


def departed(k: int, d: dict, where: str, rids: Sequence[str] = ()) -> CaseFailure:
    """Where the learner's engine left the reference engine's calls (judge/drivers/rounds.py): the same call on a
    request in another state, another forward pass (`rids`: its requests), or another call."""
    made, want = d["made"], d["expected"]
    ops, said = (made["op"], want["op"] if want else None), departure_message(made, want, where) + handling(d)
    if ops == ("execute_model", "execute_model"):
        return other_items(k, made["args"][0], want["args"][0], rids)
    diff = first_difference(made, want)
    if diff is not None:
        hint = FIELD_HINTS.get(diff["field"], "finish a request only with self.scheduler.finish(request, reason), "
                                              "when stop_reason(...) returns a reason")
        return _fail(k, said, field=diff["field"], expected=diff["want"], got=diff["got"], hint=hint)
    if ops == ("finish", "finish") and made["args"][0] == want["args"][0]:
        return _fail(k, f"request {made['args'][0]} finished with reason {made['args'][1]!r}, expected "
                        f"{want['args'][1]!r}", field="reason", expected=want["args"][1], got=made["args"][1],
                     hint="pass stop_reason(request, self.eos_token_id, self.tokenizer)'s result to "
                          "self.scheduler.finish")
    return _fail(k, said, hint=ORDER_HINTS.get(ops, ORDER_HINTS[None]))


SAMPLED_HINT = ("a token sampled at an earlier step differs from the reference engine's: greedy takes the argmax of "
                "the request's row of logits; with temperature > 0, sample_token(row, request.sampling_params, "
                "request.generator) draws it with the request's own seeded generator")


def other_items(k: int, got: list, want: list, rids: Sequence[str]) -> CaseFailure:
    """The forward pass differs from the reference engine's, though its items match this step's plan: the plan
    was the same, so the tokens sampled before differ."""
    for i, (g, w) in enumerate(zip(got, want)):
        for name, a, b in zip(ITEM_FIELDS, g, w):
            if a != b:
                rid = rids[i] if i < len(rids) else f"number {i}"
                return _fail(k, f"the item of request {rid} has {name} {short(a)}; the reference engine's forward "
                                f"pass on the same requests has {short(b)}", field=name, expected=b, got=a,
                             hint=SAMPLED_HINT)
    return _fail(k, f"the forward pass carried {len(got)} item(s); the reference engine's on the same requests "
                    f"carried {len(want)}", hint=ORDER_HINTS[None])


ORDER_HINTS = {
    ("schedule", "add_request"): "add every prompt at once (self.add_requests) and step until none is unfinished: "
                                 "the scheduler admits a waiting request as soon as a running one finishes, while "
                                 "adding them in groups runs them in groups (static batching)",
    ("add_request", "schedule"): "add every prompt at once (self.add_requests), then step until none is unfinished",
    ("schedule", "finish"): "a request is done when stop_reason(request, self.eos_token_id, self.tokenizer) returns "
                            "a reason: call self.scheduler.finish(request, reason) in that same step",
    None: "each step: one self.scheduler.schedule(), one self.runner.execute_model(items), then "
          "self.scheduler.finish(request, reason) for each request that is done, in scheduled order",
}


ITEM_FIELDS = ("token_ids", "num_computed", "block_table", "need_logits")
ITEM_HINTS = {
    "token_ids": "the next num_new_tokens tokens of request.all_token_ids, starting at num_computed_tokens",
    "num_computed": "num_computed is request.num_computed_tokens as the scheduler left it (before this step)",
    "block_table": "pass request.block_table",
    "need_logits": "need_logits is true only when this step computes the request's last pending token "
                   "(ScheduledRequest.completes_prompt); a prompt chunk that is not the last needs no logits",
}


FINAL_HINT = ("new_token_ids are what one step produced; generate's final outputs are self.make_output(request, [])"
              " (all tokens are in outputs[0].token_ids)")
RETURN_HINT = ("one self.make_output(request, [token]) per request that received a token this step, in scheduled "
               "order; none for a prompt chunk that sampled nothing")


def public_hints(driver: str, fn: str, args: list, value: Any) -> list[tuple[str, Any, str]]:
    """The hints of a public case's answers, recorded with the reference's (judge/edition.py), at the paths the
    replay compares: each field of each item of a forward pass the engine is paused at (another call is a
    departure: the order of a step's calls), and each step record's requests and outputs."""
    if driver != "engine" or not isinstance(value, dict):
        return []
    call = value.get("call")
    if isinstance(call, dict):  # the call the reference engine made where the learner's made another (or none)
        items = call["args"][0] if call.get("op") == "execute_model" else []
        fields = [(f"['call']['args'][0][{i}][{j}]", None, _item_hint(f, item)) for i, item in enumerate(items)
                  for j, f in enumerate(ITEM_FIELDS)]
        order = [("['call']['op']", pair[0], hint) for pair, hint in ORDER_HINTS.items()
                 if pair and pair[1] == call["op"]]
        return fields + order + [("['call']", None, ORDER_HINTS[None])]
    value = compared(value, fn) or value
    generated = isinstance(value.get("steps"), list)  # generate's answer: its steps' records, and its outputs
    hints = []
    for i, step in enumerate(value["steps"] if generated else [value]):
        at = f"['steps'][{i}]" if generated else ""
        for name in step.get("after", {}) if isinstance(step, dict) else ():
            hints += [(f"{at}['after'][{name!r}]['num_computed']", None, FIELD_HINTS["num_computed_tokens"]),
                      (f"{at}['after'][{name!r}]['outputs']", None, FIELD_HINTS["num_output_tokens"])]
        hints.append((f"{at}['outputs']", None, RETURN_HINT))
    return hints + [("['outputs']", None, FINAL_HINT)] * generated


def _item_hint(field: str, item: list) -> str:
    """The hint for `field` of the reference's `item`: a decode's one token is the one sampled before, so where it
    differs, the sample may be what differs."""
    if field == "token_ids" and len(item[0]) == 1:
        return f"a decode's token_ids is the request's last token, sampled at the step before; if you pass that, " \
            f"{SAMPLED_HINT}"
    return ITEM_HINTS[field]


def _advance_hint(before: int, num_new: int, got: int) -> str:
    """What the learner's num_computed_tokens says they did: not advanced, too little, or too much."""
    if got == before:
        return ("num_computed_tokens was not advanced: after the pass, every scheduled request (a prompt chunk or a "
                "decode) does num_computed_tokens += num_new_tokens")
    if got < before + num_new:
        return (f"advanced by {got - before}, not by the {num_new} tokens the pass computed: add "
                "s.num_new_tokens, not 1")
    return (f"advanced by {got - before}, more than the {num_new} tokens the pass computed: add s.num_new_tokens "
            "once per step (the token sampled now is computed in the next step)")


def _fail(step: int, message: str, hint: str = "", **kw: Any) -> CaseFailure:
    return CaseFailure(f"engine step {step}: {message}", hint=hint or None, **kw)


def traced_step(index: int, rec: dict, budget: int, num_blocks: int) -> StepRecord:
    """A step record of the engine driver as step `index` of a trace. The record names no pool: the blocks in use
    are those the requests hold (a block shared through the prefix cache counts once per holder)."""
    after = rec["after"]
    used = sum(a.get("blocks", 0) for a in after.values())
    return step_record(index, [row(s["rid"], s["num_computed"], len(s["token_ids"]), s["num_new"],
                                   len(s["block_table"])) for s in rec["sched"]],
                       budget, used, num_blocks - used,
                       finished=sorted(s["rid"] for s in rec["sched"] if after.get(s["rid"], {}).get("finished")))


def log_steps(log: StepLog, records: list[dict], side: list[StepRecord], config: EngineConfig) -> None:
    """Append the step records (those with work) to one side of `log`; a malformed one ends that side."""
    try:
        for rec in records:
            for s in rec["sched"]:  # requests named as they are first scheduled, with their prompt's length
                log.prompts.setdefault(s["rid"], len(s["token_ids"]) - s["num_outputs"])
            side.append(traced_step(len(side), rec, config.token_budget, config.num_blocks))
    except (KeyError, TypeError, ValueError, AttributeError):  # a worker's malformed record: its checks say why
        pass


def completes(s: dict) -> bool:
    return s["num_computed"] + s["num_new"] == len(s["token_ids"])


def expected_item(s: dict) -> list:
    nc = s["num_computed"]
    return [s["token_ids"][nc: nc + s["num_new"]], nc, s["block_table"], completes(s)]


def check_items(k: int, sched: list[dict], items: list[dict]) -> None:
    if len(items) != len(sched):
        ids = [s["rid"] for s in sched]
        raise _fail(k, f"the forward pass carried {len(items)} item(s) but {len(sched)} requests were scheduled "
                       f"({ids})", hint="one item per ScheduledRequest in sched.scheduled, all in ONE call to "
                                        "self.runner.execute_model")
    for s, item in zip(sched, items):
        if "bad" in item:
            raise _fail(k, f"item for request {s['rid']} is {item['bad']}",
                        hint="each item is (token_ids, num_computed, block_table, need_logits)")
        got = item["item"]
        for name, g, e in zip(ITEM_FIELDS, got, expected_item(s)):
            if g != e:
                hint = ITEM_HINTS[name]
                if got[1] == s["num_computed"] + s["num_new"] and s["num_computed"] != got[1]:
                    hint = ("build every item BEFORE you update num_computed_tokens: the item describes the "
                            "tokens this step computes, from the count the scheduler left")
                raise _fail(k, f"wrong {name} in the item of request {s['rid']}", field=name, expected=e, got=g,
                            hint=hint)


def per_prompt(params: Any, n: int) -> list[SamplingParams]:
    """The SamplingParams of each of n prompts, as generate reads `params` (None, one for all, or one each)."""
    return list(params) if isinstance(params, (list, tuple)) else [params or SamplingParams()] * n


# ----------------------------------------------------------------------------------------------------------
# The engine under test, in the worker, and the checks of every step it takes


class Engine:
    """The learner's engine as the grader drives it (judge/drivers/engine.py): each step's record is checked as it
    arrives. `log` keeps what the scheduler scheduled at each step."""

    def __init__(self, impl, model, eos: int | None, chunks_first: bool = False, tokenizer: Any = None,
                 step_limit: int = 400, **config: Any) -> None:
        eos = model.cfg.eos_token_id if eos is None else eos  # as LLMEngineBase does
        self.drv, self.model, self.eos, self.tokenizer, self.config = Driver(impl, "engine"), model, eos, tokenizer, \
            config
        self.params: list[SamplingParams] = []  # of each request, in order of arrival
        self.arrivals: list[str] = []  # request ids in order of arrival
        self.log: list[list[dict]] = []
        args = (config, eos, chunks_first, tokenizer is not None, step_limit)
        reply = self.drv.new_engine(ENGINE, *args)
        if "problem" in reply:
            raise CaseFailure(reply["problem"], hint="keep `class LLMEngine(LLMEngineBase):` and write step and "
                                                     "generate")
        if "error" in reply:
            raise raised(reply["error"], "LLMEngine(...)")
        self.twin = Driver(ref, "engine")  # the reference engine, here, driven the same way: it records the script
        self.twin.new_engine(TWIN, *args, record=True)
        self.twin_steps = 0  # the twin's records with work, matched so far
        self.unmatched: CaseFailure | None = None  # the first difference from the twin
        self.trace = StepLog({})  # both engines' steps with work, offered to --trace
        offer(self.trace)
        _ENGINES.append(self)

    def params_of(self, rid: str) -> SamplingParams:
        return self.params[self.arrivals.index(rid)]

    def add(self, prompt: list[int], params: SamplingParams) -> str:
        script = self.twin.add(TWIN, prompt, plain_params(params)).get("_script", [])
        reply = self.answered(self.drv.add(ENGINE, prompt, plain_params(params)), script)
        if "departure" in reply:
            raise departed(len(self.log) + 1, reply["departure"], "add_request")
        if "error" in reply:
            raise raised(reply["error"], "add_request", input=f"engine.add_request({prompt}, {params})")
        self.params.append(params)
        return reply["request_id"]

    def step(self) -> list[dict]:
        """One learner step, checked, on the script of the twin's step; what it returned (plain outputs)."""
        twin = self.twin.step(TWIN)
        record = self.answered(self.drv.step(ENGINE), twin.pop("_script", []))
        self.log_trace([record], [twin])
        outs = self.check_step(record)
        self.match([record], [twin], "step")
        return outs

    def generate(self, prompts: list[list[int]], params: Any) -> list[dict]:
        """The learner's generate, every step of it checked; its outputs (one per prompt, checked for shape)."""
        wire_params = [plain_params(p) for p in params] if isinstance(params, (list, tuple)) else \
            (plain_params(params) if params is not None else None)
        self.params += per_prompt(params, len(prompts))
        text = f"engine.generate({prompts!r}, {params!r})"
        twin = self.twin.generate(TWIN, [list(p) for p in prompts], wire_params)
        reply = self.answered(self.drv.generate(ENGINE, [list(p) for p in prompts], wire_params),
                              twin.pop("_script", []))
        self.log_trace(reply.get("steps", []), twin["steps"])
        for record in reply["steps"]:
            self.check_step(record)
        if "departure" in reply:
            raise departed(len(self.log) + 1, reply["departure"], "LLMEngine.generate")
        if "error" in reply:
            raise raised(reply["error"], "LLMEngine.generate", input=text)
        self.match(reply["steps"], twin["steps"], "generate")
        if not isinstance(reply.get("outputs"), list):
            if reply.get("returned") == "NoneType":
                raise CaseFailure("generate returned None", input=text,
                                  hint="end generate with `return [self.make_output(r, []) for r in requests]`")
            raise CaseFailure(f"generate returned a {reply.get('returned')}; it must return a list", input=text,
                              hint="one final output per prompt, in a list: [self.make_output(r, []) for r in "
                                   "requests]")
        outs = reply["outputs"]
        if len(outs) != len(prompts):
            raise CaseFailure(f"generate returned {len(outs)} outputs for {len(prompts)} prompts", input=text,
                              hint="one final output per prompt: [self.make_output(r, []) for r in requests]")
        for o in outs:
            if isinstance(o, str):
                raise CaseFailure(f"generate returned, among its outputs, {o}",
                                  input=text, hint="[self.make_output(r, []) for r in requests]")
        return outs

    def answered(self, reply: Any, script: list[dict]) -> dict:
        """The driver's reply once the engine's calls of its parts are answered from the twin's `script`."""
        return answered(self.drv, ENGINE, reply, {None: script}, departure_message)

    def final(self) -> dict:
        return self.drv.final(ENGINE)

    def log_trace(self, got: list[dict], want: list[dict]) -> None:
        """Both engines' step records with work, to their traces (--trace): before any check, which may end the case."""
        config = EngineConfig(**self.config)
        log_steps(self.trace, with_work(got), self.trace.yours, config)
        log_steps(self.trace, with_work(want), self.trace.reference, config)

    def match(self, got: list[dict], want: list[dict], call: str) -> None:
        """Compare the learner's step records (already checked) with the twin's, steps that scheduled nothing left
        out. The first difference is raised at the end of the case: the case's own checks, run before, say more about
        what is wrong."""
        got, want = with_work(got), with_work(want)
        for i, (g, w) in enumerate(zip(got, want)):
            diff = difference(w, g, "record")
            if diff and self.unmatched is None:
                where, expected, value = diff
                self.unmatched = with_table(CaseFailure(
                    f"engine step {self.twin_steps + i + 1} (counting steps that scheduled something): your engine's "
                    f"step differs from the reference engine's on the same requests, at {where}", field=where,
                    expected=expected, got=value,
                    hint="the checks of the step passed: compare what it recorded with the statement"),
                    self.trace, self.twin_steps + i)
        if len(got) != len(want) and self.unmatched is None:
            self.unmatched = with_table(CaseFailure(
                f"{call} ran {len(got)} step(s) that scheduled something; the reference engine runs {len(want)} on "
                "the same requests", hint="generate calls self.step() while self.has_unfinished_requests(); each "
                                          "step calls self.scheduler.schedule() once"),
                self.trace, self.twin_steps + min(len(got), len(want)))
        self.twin_steps += len(want)

    # -- the checks of one step

    def check_step(self, rec: dict) -> list[dict]:
        k = len(self.log) + 1
        if "limit" in rec:
            raise CaseFailure(f"still running after {rec['limit']} steps: some request never finishes",
                              hint="a request is done when stop_reason(...) returns a reason; then call "
                                   "self.scheduler.finish(request, reason), which frees its blocks")
        for rid in rec.get("after", {}):
            if rid not in self.arrivals:
                self.arrivals.append(rid)
        sched, calls = rec.get("sched", []), rec.get("calls", [])
        self.log.append(sched)
        for call in calls:  # the items first: they say more than the departure they made
            check_items(k, sched, call["items"])
        record = departure_of(self.drv, ENGINE)  # the grader's, raised at the step the worker says it fell in
        if "departure" in rec and record is not None:
            raise departed(k, record, "LLMEngine.step", [s["rid"] for s in sched])
        if "error" in rec:
            raise raised(rec["error"], "LLMEngine.step")
        if rec.get("schedules") != 1:
            raise _fail(k, f"step called self.scheduler.schedule() {rec.get('schedules')} times; once per step",
                        hint="start the step with sched = self.scheduler.schedule()")
        if not isinstance(rec.get("outputs"), list):
            if rec.get("returned") == "NoneType":
                raise _fail(k, "step returned None; it must return a list of RequestOutput",
                            hint="end step with `return outputs` (the list of self.make_output(request, [token])); "
                                 "return [] when nothing is scheduled")
            raise _fail(k, f"step returned a {rec.get('returned')}; it must return a list of RequestOutput",
                        hint="return a list, [self.make_output(request, [token]), ...], even for one request")
        outs = rec["outputs"]
        if not sched:
            if calls or outs:
                raise _fail(k, "nothing was scheduled, yet the step ran the model or returned outputs",
                            hint="if nothing is scheduled, return []")
            return outs
        if len(calls) != 1:
            raise _fail(k, f"step ran the model {len(calls)} times for {len(sched)} scheduled requests; one forward "
                           "pass must carry every scheduled request",
                        hint="build all the items first, then call self.runner.execute_model(items) once")
        self.check_requests(k, rec, calls[0]["argmax"], outs)
        return outs

    def check_requests(self, k: int, rec: dict, argmax: list[int], outs: list[dict]) -> None:
        after, expected_outs, row = rec["after"], [], 0
        for s in rec["sched"]:
            rid, a = s["rid"], rec["after"][s["rid"]]
            if isinstance(a["num_computed"], str):  # the driver's description of a value that is not an int
                raise _fail(k, f"request {rid} has num_computed_tokens {a['num_computed']} after the step: an int",
                            hint="num_computed_tokens += s.num_new_tokens (an int: not a tensor, not a numpy int)")
            if a["num_computed"] != s["num_computed"] + s["num_new"]:
                raise _fail(k, f"request {rid} has num_computed_tokens {a['num_computed']} after a step that "
                               f"computed {s['num_new']} token(s) from {s['num_computed']}",
                            field="num_computed_tokens", expected=s["num_computed"] + s["num_new"],
                            got=a["num_computed"],
                            hint=_advance_hint(s["num_computed"], s["num_new"], a["num_computed"]))
            new = a["outputs"][s["num_outputs"]:]
            if not completes(s):
                if new:
                    raise _fail(k, f"request {rid} got token(s) {new} from a prompt chunk that is not its last "
                                   f"({s['num_computed'] + s['num_new']} of {len(s['token_ids'])} tokens computed)",
                                hint="only a request whose pending tokens are all computed samples a token")
                continue
            if not new:
                raise _fail(k, f"request {rid} completed its pending tokens ({s['num_computed']} + {s['num_new']} = "
                               f"{len(s['token_ids'])}) but got 0 new tokens; exactly one is sampled",
                            hint="read s.completes_prompt BEFORE num_computed_tokens += num_new_tokens: after the "
                                 "update it compares the new count and is false; then append the sampled token to "
                                 "request.output_token_ids")
            if len(new) != 1:
                raise _fail(k, f"request {rid} completed its pending tokens but got {len(new)} new tokens ({new}); "
                               "exactly one is sampled", hint="append the sampled token to request.output_token_ids")
            if isinstance(new[0], str):  # the driver's description of a token that is not an int
                raise _fail(k, f"request {rid} got token {new[0]}: token ids are Python ints (prefix caching hashes "
                               "them, a server writes them as JSON)", hint="append int(token) (or tensor.item())")
            if self.params_of(rid).temperature == 0 and row < len(argmax) and new[0] != argmax[row]:
                raise _fail(k, f"request {rid} got token {new[0]}, but its row of the logits (row {row}: it is "
                               f"number {row} among this step's items that need logits) gives {argmax[row]}",
                            hint="row j of the logits belongs to the j-th item whose need_logits is true, not to "
                                 "the j-th scheduled request")
            row += 1
            self.check_stop(k, rid, a)
            expected_outs.append((rid, new, a["finished"]))
        self.check_outputs(k, outs, expected_outs, after)
        scheduled = {s["rid"] for s in rec["sched"]}
        for rid, state in rec["before"].items():
            a = after.get(rid)
            if rid not in scheduled and a is not None and state != [len(a["outputs"]), a["num_computed"]]:
                raise _fail(k, f"request {rid} was not scheduled, yet the step changed its tokens or "
                               "num_computed_tokens", hint="update only the requests in sched.scheduled")

    def check_stop(self, k: int, rid: str, a: dict) -> None:
        params, tokens = self.params_of(rid), a["outputs"]
        reason = expected_reason(tokens, params, self.eos, self.tokenizer)
        n, limit = len(tokens), params.max_tokens
        if reason is None:
            if a["finished"] or not a["in_running"]:
                raise _fail(k, f"request {rid} was retired after {n} token(s) (max_tokens={limit}, last token "
                               f"{tokens[-1]} is not end-of-sequence {self.eos})",
                            hint="finish a request only when stop_reason(request, self.eos_token_id, self.tokenizer) "
                                 "returns a reason")
            return
        why = "its last token is end-of-sequence" if reason == "stop" else f"it has max_tokens={limit} tokens"
        hint = ("when stop_reason(...) returns a reason call self.scheduler.finish(request, reason): it retires the "
                "request and frees its blocks")
        if reason == "stop" and tokens[-1] in params.stop_token_ids:
            why = f"its last token {tokens[-1]} is one of stop_token_ids={params.stop_token_ids}"
            hint = ("stop_reason(request, self.eos_token_id, self.tokenizer) also stops at a token of "
                    "sampling_params.stop_token_ids: call it after appending each token, and finish the request "
                    "with the reason it gives")
        elif reason == "stop" and tokens[-1] != self.eos:
            why = f"its text {self.tokenizer.decode(tokens)!r} contains a stop string of {params.stop}"
            hint = ("stop strings are seen through the tokenizer: call stop_reason(request, self.eos_token_id, "
                    "self.tokenizer), with all three arguments")
        if a["in_running"] or not a["finished"] or a["blocks"]:
            raise _fail(k, f"request {rid} should have finished ({why}) but is still running or holds blocks "
                           f"(status {a['status']}, {a['blocks']} blocks)", hint=hint)
        if a["finish_reason"] != reason:
            raise _fail(k, f"request {rid} finished with reason {a['finish_reason']!r}, expected {reason!r} ({why})",
                        hint="pass stop_reason's result to self.scheduler.finish")

    def check_outputs(self, k: int, outs: list[dict], expected: list[tuple[str, list[int], bool]],
                      after: dict) -> None:
        got = []
        for o in outs:
            if isinstance(o, str):
                raise _fail(k, f"step returned, among its outputs, {o}",
                            hint="return self.make_output(request, [token]) for each request that got a token")
            got.append((o["request_id"], o["new_token_ids"], o["finished"]))
        if got != expected:
            raise _fail(k, "wrong outputs returned by step", field="(request_id, new_token_ids, finished)",
                        expected=expected, got=got,
                        hint=RETURN_HINT)
        for o in outs:
            if o["token_ids"] != after[o["request_id"]]["outputs"]:
                raise _fail(k, f"the output of request {o['request_id']} does not hold all its tokens so far",
                            hint="build outputs with self.make_output(request, [token]) after appending the token")


# ----------------------------------------------------------------------------------------------------------
# Running workloads and comparing with each request alone


def check_final(engine: Engine, prompts: list[list[int]], outs: list[dict], text: str) -> dict:
    """generate's outputs against each request alone; every request retired, every block back in the pool.
    Returns the engine's final state."""
    got_prompts = [o["prompt_token_ids"] for o in outs]
    if got_prompts != prompts:
        order = [prompts.index(p) if p in prompts else None for p in got_prompts]
        raise CaseFailure(f"generate returned the outputs in the order of prompts {order}, not in prompt order",
                          input=text, hint="keep the requests add_requests returned and make one output per "
                                           "request in that order, not in the order they finished")
    state = engine.final()
    if state["unfinished"]:
        raise CaseFailure("generate returned while requests were still unfinished", input=text,
                          hint="a step may return no outputs (a step of prompt chunks samples nothing): loop while "
                               "self.has_unfinished_requests(), not until a step returns []")
    for i, (p, params, o) in enumerate(zip(prompts, engine.params, outs)):
        want = alone(engine.model, p, params, engine.eos, engine.tokenizer)
        got = o["token_ids"]
        if got != want:
            hint = "compare with mini_llm.generate(model, prompt, max_tokens, eos_token_id=eos) on this prompt"
            if got[: len(want)] == want:
                hint = ("too many tokens: stop when the request has max_tokens tokens or its last token is "
                        "end-of-sequence (stop_reason does both)")
            raise CaseFailure(f"prompt {i}: the engine's tokens differ from generating it alone", input=text,
                              field=f"outputs[{i}].outputs[0].token_ids", expected=want, got=got, hint=hint)
        if not o["finished"]:
            raise CaseFailure(f"prompt {i}: its final output says finished=False", input=text)
        if o["new_token_ids"] != []:
            raise CaseFailure(f"prompt {i}: its final output has new_token_ids {short(o['new_token_ids'])}; "
                              "a final output has none", input=text, field=f"outputs[{i}].new_token_ids",
                              expected=[], got=o["new_token_ids"],
                              hint=FINAL_HINT)
    free, total = state["free"], engine.config["num_blocks"]
    if free != total:
        raise CaseFailure(f"after generate only {free} of {total} KV-cache blocks are free", input=text,
                          hint="self.scheduler.finish(request, reason) frees a finished request's blocks")
    return state


def run_generate(impl, model, prompts: list[list[int]], params, eos: int | None = None, step_limit: int = 400,
                 tokenizer: Any = None, **config: Any) -> tuple[Engine, list[dict], dict]:
    """(the engine, generate's outputs, the final state), every step and the outputs checked."""
    engine = Engine(impl, model, eos, tokenizer=tokenizer, step_limit=step_limit, **config)
    outs = engine.generate(prompts, params)
    text = f"engine.generate({prompts!r}, {params!r}) with EngineConfig({config}), eos_token_id={engine.eos}"
    return engine, outs, check_final(engine, prompts, outs, text)


def tokens_of(state: dict) -> dict[str, list[int]]:
    return {r["request_id"]: r["outputs"] for r in state["requests"]}


# ----------------------------------------------------------------------------------------------------------
# The cases


@CASES("one request: step by step", timeout=60, public=True)
def _(impl):
    model = load_model()
    eos = model.cfg.eos_token_id
    engine = Engine(impl, model, eos, num_blocks=32, block_size=4)
    if engine.step() != []:
        raise CaseFailure("step() on an engine with no requests must return []")
    prompt, params = random_prompts(model, 1, [9])[0], SamplingParams(max_tokens=6)
    rid = engine.add(prompt, params)
    tokens = []
    while engine.final()["unfinished"]:
        tokens += [t for o in engine.step() for t in o["new_token_ids"]]
    want = alone(model, prompt, params, eos)
    if tokens != want or tokens_of(engine.final())[rid] != want:
        raise CaseFailure("the tokens differ from generating the prompt alone",
                          input=f"engine.add_request({prompt}, {params}); step() until done",
                          field="tokens", expected=want, got=tokens)


@CASES("one request: generate (default SamplingParams)", timeout=60)
def _(impl):
    model = load_model()
    run_generate(impl, model, random_prompts(model, 2, [7]), None, num_blocks=32, block_size=4)


@CASES("several requests share each forward pass", timeout=60, public=True)
def _(impl):
    model = load_model()
    prompts = random_prompts(model, 3, [5, 11, 3, 8])
    engine, _, _ = run_generate(impl, model, prompts, SamplingParams(max_tokens=8), num_blocks=64, block_size=4)
    sizes = [len(sched) for sched in engine.log if sched]  # each step's one forward pass carries them all
    if max(sizes, default=0) < len(prompts):
        raise CaseFailure(f"forward passes carried {sizes} requests; all {len(prompts)} fit in one",
                          hint="one item per scheduled request, one execute_model call per step")


@CASES("max_tokens respected exactly (different per request)", timeout=60, public=True)
def _(impl):
    model = load_model()
    prompts = random_prompts(model, 4, [6, 4, 9, 5])
    params = [SamplingParams(max_tokens=n, ignore_eos=True) for n in (1, 5, 2, 9)]
    run_generate(impl, model, prompts, params, num_blocks=64, block_size=4)


def check_reasons(engine: Engine, outs: list[dict], state: dict) -> None:
    tokens = tokens_of(state)
    for i, o in enumerate(outs):
        if o["request_id"] not in tokens:
            raise CaseFailure(f"prompt {i}: its output names request {o['request_id']!r}, which the engine never had")
        want = expected_reason(tokens[o["request_id"]], engine.params[i], engine.eos, engine.tokenizer)
        if o["finish_reason"] != want:
            raise CaseFailure(f"prompt {i} finished with reason {o['finish_reason']!r}, expected {want!r}",
                              hint="pass stop_reason(request, self.eos_token_id, self.tokenizer)'s result to "
                                   "self.scheduler.finish")


@CASES("end-of-sequence stops a request (and ignore_eos does not)", timeout=60)
def _(impl):
    model = load_model()
    prompts = random_prompts(model, 5, [6, 10, 4])
    free_run = alone(model, prompts[0], SamplingParams(max_tokens=10, ignore_eos=True), None)
    eos = free_run[2]  # a token the model does emit: prompt 0 stops at its third token at the latest
    prompts.append(list(prompts[0]))
    params = [SamplingParams(max_tokens=10)] * 3 + [SamplingParams(max_tokens=10, ignore_eos=True)]
    engine, outs, state = run_generate(impl, model, prompts, params, eos=eos, num_blocks=64, block_size=4)
    check_reasons(engine, outs, state)


def step_until_done(engine: Engine) -> None:
    while engine.final()["unfinished"]:  # the driver's step limit ends a loop that never finishes
        engine.step()


def check_alone(engine: Engine, prompts: list[list[int]], params: SamplingParams) -> None:
    tokens = list(tokens_of(engine.final()).values())
    for i, p in enumerate(prompts):
        want = alone(engine.model, p, params, engine.eos)
        if tokens[i] != want:
            raise CaseFailure(f"request {i}: the tokens differ from generating it alone", field="output_token_ids",
                              expected=want, got=tokens[i])


@CASES("chunked prefill: a prompt chunk samples nothing, step returns no output for it", timeout=60, public=True)
def _(impl):
    model = load_model()
    engine = Engine(impl, model, model.cfg.eos_token_id, num_blocks=64, block_size=4, token_budget=7, max_num_seqs=4)
    prompts = random_prompts(model, 6, [17, 3, 12])
    params = SamplingParams(max_tokens=5)
    for p in prompts:
        engine.add(p, params)
        engine.step()  # a new request arrives while others are mid-prompt
    step_until_done(engine)
    if not any(not completes(s) for sched in engine.log for s in sched):
        raise CaseFailure("the workload was meant to cut prompts into chunks (a course bug)", kind="error")
    check_alone(engine, prompts, params)


@CASES("rows of logits: the j-th row is the j-th item that needs logits", timeout=60, public=True)
def _(impl):
    model = load_model()
    engine = Engine(impl, model, model.cfg.eos_token_id, chunks_first=True, num_blocks=64, block_size=4,
                    token_budget=8, max_num_seqs=4)
    prompts = random_prompts(model, 12, [3, 2, 20, 4])
    params = SamplingParams(max_tokens=6, ignore_eos=True)
    for p in prompts[:2]:
        engine.add(p, params)
    engine.step()  # two prompts: decodes from now on
    for p in prompts[2:]:
        engine.add(p, params)
    step_until_done(engine)  # a 20-token prompt in chunks, listed before the decodes
    check_alone(engine, prompts, params)


@CASES("continuous batching: a waiting request starts as soon as a slot frees", timeout=60, public=True)
def _(impl):
    model = load_model()
    prompts = random_prompts(model, 7, [6, 4, 8, 5])
    params = [SamplingParams(max_tokens=n, ignore_eos=True) for n in (12, 3, 5, 4)]
    engine, _, _ = run_generate(impl, model, prompts, params, num_blocks=64, block_size=4, max_num_seqs=2)
    seen: set[str] = set()
    for sched in engine.log:
        ids = {s["rid"] for s in sched}
        if ids - seen and ids & seen:
            return  # a request was admitted while one admitted earlier was still running
        seen |= ids
    raise CaseFailure("no request was ever admitted while an earlier one was still running: the requests ran in "
                      "groups (static batching)",
                      input=f"max_num_seqs=2, engine.generate({prompts}, {params})",
                      hint="add every prompt at once (self.add_requests) and step until none is unfinished: "
                           "the scheduler admits a waiting request as soon as a running one finishes")


@CASES("generate returns outputs in prompt order", timeout=60)
def _(impl):
    model = load_model()
    prompts = random_prompts(model, 8, [5, 7, 3])
    params = [SamplingParams(max_tokens=n, ignore_eos=True) for n in (9, 2, 5)]  # the first finishes last
    run_generate(impl, model, prompts, params, num_blocks=64, block_size=4)
    engine = Engine(impl, model, None, num_blocks=8, block_size=4)
    if engine.generate([], None) != []:
        raise CaseFailure("generate([]) must return []")


@CASES("a small KV cache: blocks are freed and reused", timeout=60)
def _(impl):
    model = load_model()
    prompts = random_prompts(model, 9, [9, 6, 11, 7, 10])
    params = SamplingParams(max_tokens=7, ignore_eos=True)
    # 6 blocks of 4 hold at most about one and a half requests: later ones need blocks of finished ones.
    run_generate(impl, model, prompts, params, num_blocks=6, block_size=4, step_limit=200)


@CASES("seeded sampling uses each request's own generator", timeout=60, public=True)
def _(impl):
    model = load_model()
    prompts = random_prompts(model, 10, [6, 9, 4])
    params = [SamplingParams(max_tokens=8, temperature=1.0, seed=s, ignore_eos=True) for s in (1, 2, 3)]
    engine = Engine(impl, model, None, num_blocks=64, block_size=4)
    outs = engine.generate(prompts, params)
    expected = ref.LLMEngine(model, ref.EngineConfig(num_blocks=64, block_size=4)).generate(prompts, params)
    for i, (o, e) in enumerate(zip(outs, expected)):
        got, want = o["token_ids"], e.outputs[0].token_ids
        if got != want:
            raise CaseFailure(f"prompt {i} (temperature 1, seed {params[i].seed}): wrong tokens", field="token_ids",
                              expected=want, got=got,
                              hint="sample with sample_token(row, request.sampling_params, request.generator)")


@CASES("a mixed workload: chunks, decodes, admissions and a full cache", timeout=90)
def _(impl):
    model = load_model()
    rng = seeded(11)
    prompts = random_prompts(model, 11, [rng.randint(1, 24) for _ in range(8)])
    params = [SamplingParams(max_tokens=rng.randint(1, 10), ignore_eos=rng.random() < 0.5) for _ in prompts]
    run_generate(impl, model, prompts, params, num_blocks=16, block_size=4, token_budget=16, max_num_seqs=4,
                 step_limit=300)


@CASES("generate: a long prompt with a small token budget (steps that return no outputs)", timeout=60, public=True)
def _(impl):
    model = load_model()
    prompts = random_prompts(model, 13, [30, 26])
    # token_budget 6: the first steps compute only prompt chunks and sample nothing
    run_generate(impl, model, prompts, SamplingParams(max_tokens=4, ignore_eos=True), num_blocks=32, block_size=4,
                 token_budget=6, max_num_seqs=2)


@CASES("stop strings (through the tokenizer) and stop_token_ids", timeout=60, public=True)
def _(impl):
    model = load_model()
    tokenizer = BracketTokenizer()
    prompts = random_prompts(model, 14, [7, 5, 9])
    free = alone(model, prompts[0], SamplingParams(max_tokens=10, ignore_eos=True), None)
    stop = tokenizer.decode(free[2:4])[1:-1]  # spans two tokens: the whole text must be decoded, not the last token
    params = [SamplingParams(max_tokens=10, ignore_eos=True, stop=[stop]),
              SamplingParams(max_tokens=6, ignore_eos=True, stop=["<no such token>"]),
              SamplingParams(max_tokens=10, ignore_eos=True, stop=[stop]),
              SamplingParams(max_tokens=10, ignore_eos=True, stop_token_ids=[free[2]])]
    engine, outs, state = run_generate(impl, model, prompts[:2] + [list(prompts[0])] * 2, params,
                                       tokenizer=tokenizer, num_blocks=64, block_size=4)
    check_reasons(engine, outs, state)
