"""The parts of the course the learner's code calls but that another exercise writes, run in the grader for the
public stand-ins of judge/drivers/stand_ins.py (the worker holds no reference): a *host* per world, made when a
driver asks for it (`Opener`, host 0), its operations called with plain JSON.

Whatever arrives is the learner's to forge, so every value is checked before a reference sees it: of the kinds the
stand-ins send, else CallbackRefused (the submission's protocol verdict); in range, else a ValueError raised in
the learner's code. What one submission can make here is bounded (`MAX_HOSTS` hosts at once, caches of at most
`MAX_TOKENS` tokens) and dropped after it (`forget`). Callbacks are served here (`serve_callback`): from the
worker's pipes (judge/worker_handle.py), or, for code graded in this process, through `in_process`.

The references are imported by name (`reference`), so that a student edition's own practice/ modules stand in for
the unreleased ones. Shipped to students: it holds no answer.
"""

from __future__ import annotations

import contextvars
import importlib
import itertools
import json
import sys
from collections import deque
from typing import Any, Callable, Iterator

import torch

from framework.request import Request, RequestStatus
from framework.sampling import SamplingParams, make_generator
from framework.scheduler import ScheduledRequest, SchedulerBase, SchedulerOutput
from judge import drivers, wire
from judge.crossing import error_record
from judge.drivers import OPENER
from judge.drivers.stand_ins import Mirror
from judge.practice_finder import PracticeFinder
from judge.registry import ROOT

MAX_HOSTS = 64  # hosts the drivers asked for kept at once: opening another drops the oldest
class CallbackRefused(Exception):
    """A callback the grader does not serve (no such host or operation, arguments that are not the plain data the
    stand-ins send): whoever sent it forged it, and it is the submission's `protocol` verdict."""


_hosts: dict[int, Any] = {}  # host number -> an object whose `ops` maps operation names to functions
_numbers = itertools.count(1)
# The references the hosts may use while serving a callback: the graded exercise's `part_references`, so that no
# submission can use the grader's parts to run its own answer (None: the grader's own call, or trusted code).
allowed_references: contextvars.ContextVar[tuple[str, ...] | None] = contextvars.ContextVar(
    "allowed_references", default=None)


def register_host(host: Any) -> int:
    """In the grader: make `host.ops` callable by the stand-ins; the number to give the driver (or that the
    opener, host 0, answers a driver that asked for a host)."""
    number = next(_numbers)
    _hosts[number] = host
    return number


def drop_host(number: int) -> None:
    _hosts.pop(number, None)


def forget() -> None:
    """Drop the hosts (after each submission)."""
    _hosts.clear()


def serve_callback(host: Any, name: Any, args: Any, allowed: tuple[str, ...] | None = None) -> dict:
    """In the grader: run operation `name` of host number `host` on `args` (JSON as received: the host checks
    every value before a reference sees it), using only the references `allowed` (None: any). {"value": its
    result, JSON} or {"error": the exception it raised} (bad values of the right kinds: the learner's error);
    CallbackRefused for anything the stand-ins never send, or a part the graded exercise does not run on."""
    if host == OPENER and type(host) is int and OPENER not in _hosts:
        _hosts[OPENER] = Opener()
    target = _hosts.get(host) if type(host) is int else None
    op = target.ops.get(name) if target is not None and type(name) is str else None
    if op is None or not isinstance(args, list):
        raise CallbackRefused(f"no operation {str(name)[:40]!r} of host {str(host)[:20]}")
    if len(args) != op.__code__.co_argcount - 1:  # a host's operations are methods without defaults
        raise CallbackRefused(f"{name} called with {len(args)} argument(s)")
    token = allowed_references.set(allowed)
    try:
        value = op(*args)
    except CallbackRefused:
        raise
    except Exception as exc:  # noqa: BLE001 - the part's own error on the learner's values, raised in their code
        relayed = getattr(exc, "record", None)  # the learner's code, called back by the part, raised it
        if isinstance(relayed, dict):
            return {"error": {**relayed, "relayed": True}}
        return {"error": error_record(exc, None)}
    finally:
        allowed_references.reset(token)
    return {"value": value}


def in_process(host: int, name: str, args: list) -> dict:
    """The stand-ins' channel for code graded in the grader's process (`judge.drivers.channel`): the host called
    directly, on the JSON that would have crossed."""
    return json.loads(json.dumps(serve_callback(host, name, json.loads(json.dumps(args)))))


if drivers.channel is drivers.no_channel:  # this is the grader's process: its own stand-ins call its hosts
    drivers.channel = in_process


MAX_TOKENS = 1 << 16  # tokens of one request, or of one forward pass, a host accepts
MAX_ID = 1 << 31  # token ids of the scheduler exercises' requests are below it
_STATUSES = {s.value: s for s in RequestStatus}


def reference(part: str) -> Any:
    """The module `solutions.<part>`; in a student edition without it, the student's practice/<part>.py.
    CallbackRefused while serving a submission's callback if it is not one of the graded exercise's parts."""
    allowed = allowed_references.get()
    if allowed is not None and f"solutions.{part}" not in allowed:
        raise CallbackRefused(f"solutions.{part} is not a part the graded exercise runs on")
    if not any(isinstance(f, PracticeFinder) for f in sys.meta_path):
        sys.meta_path.append(PracticeFinder(str(ROOT)))
    return importlib.import_module(f"solutions.{part}")


def _int(value: Any, low: int, high: int, what: str) -> int:
    """An int the stand-ins sent; CallbackRefused (the submission's protocol verdict) if it is not one, ValueError
    (raised in the learner's code) if it is out of [low, high]."""
    if type(value) is not int:
        raise CallbackRefused(f"{what} is not an int")
    if not low <= value <= high:
        raise ValueError(f"{what} is {value}, outside [{low}, {high}]")
    return value


def _ints(value: Any, low: int, high: int, what: str, most: int = MAX_TOKENS) -> list[int]:
    if not isinstance(value, list) or len(value) > most:
        raise CallbackRefused(f"{what} is not a list of at most {most} ints")
    return [_int(v, low, high, what) for v in value]


def _params(value: Any) -> SamplingParams:
    """The SamplingParams of a new request, from the stand-ins' dict of its fields (ValueError: a bad value)."""
    number, flag, maybe_int = (int, float), (bool,), (int, type(None))
    kinds = {"max_tokens": (int,), "temperature": number, "top_k": (int,), "top_p": number,
             "stop": (list,), "ignore_eos": flag, "seed": maybe_int, "stop_token_ids": (list,),
             "include_stop_str_in_output": flag, "skip_special_tokens": flag, "min_p": number,
             "presence_penalty": number, "frequency_penalty": number, "repetition_penalty": number,
             "min_tokens": (int,), "logprobs": maybe_int, "prompt_logprobs": maybe_int,
             "structured_outputs": (type(None),)}
    if not isinstance(value, dict) or set(value) != set(kinds) or \
            any(type(value[k]) not in t for k, t in kinds.items()):
        raise CallbackRefused("sampling parameters that are not the stand-ins'")
    if len(value["stop"]) > 16 or any(type(s) is not str or len(s) > 200 for s in value["stop"]):
        raise CallbackRefused("stop strings that are not a few short strs")
    _int(value["max_tokens"], 1, MAX_TOKENS, "max_tokens")
    _ints(value["stop_token_ids"], 0, 2**31, "stop_token_ids", most=16)
    return SamplingParams(**value)


def _text(value: Any) -> str | None:
    if value is not None and (type(value) is not str or len(value) > 100):
        raise CallbackRefused("a name or reason that is not a short str")
    return value


class RequestHost(Mirror):
    """The grader's side of one link: a copy of each of the worker's requests (by the link's names), a KV-cache
    manager of the reference, and `scheduler`, whose queues are the worker's. Every operation first sets the
    copies from the state the worker sent, checked (plain values of the right kinds, else CallbackRefused; values
    out of range are a ValueError raised in the learner's code), runs the reference, and answers the state its
    parts left. Subclasses add `scheduler` and their operations to `ops`."""

    mark = "g"

    def __init__(self, num_blocks: int, block_size: int, prefix: bool) -> None:
        super().__init__()
        self.kv = reference("kv_cache_manager").KVCacheManager(num_blocks, block_size, prefix)
        self.num_blocks = num_blocks
        self.synced_pool: list | None = None
        self.synced_named: dict[str, int] = {}
        self.ops: dict[str, Callable] = {"get_computed_blocks": self.get_computed_blocks,
                                         "allocate_slots": self.allocate_slots, "free": self.free,
                                         "evict": self.evict}

    # -- the state

    def apply(self, state: Any) -> None:
        if not isinstance(state, dict) or not isinstance(state.get("requests"), list) or \
                not isinstance(state.get("new", []), list):
            raise CallbackRefused("a state that is not the stand-ins'")
        for rec in state.get("new", []):
            if not isinstance(rec, list) or len(rec) != 4 or rec[0] in self.requests:
                raise CallbackRefused("a new request that is not the stand-ins'")
            name, request_id, prompt, params = _text(rec[0]), _text(rec[1]), rec[2], _params(rec[3])
            prompt = _ints(prompt, 0, MAX_ID - 1, f"a prompt token of request {request_id}")
            if not prompt:
                raise ValueError(f"request {request_id} has no prompt token")
            r = Request(prompt, params, request_id=request_id, generator=make_generator(params, torch.device("cpu")))
            self.requests[name], self.names[r] = r, name
        for rec in state["requests"]:
            if not isinstance(rec, list) or len(rec) != 9:
                raise CallbackRefused("a request's state that is not the stand-ins'")
            r = self.request(rec[0])
            outputs = _ints(rec[2], 0, MAX_ID - 1, f"request {r.request_id}: an output token")
            table = _ints(rec[3], 0, self.num_blocks - 1, f"request {r.request_id}: a block id", self.num_blocks)
            nc = _int(rec[1], 0, len(r.prompt_token_ids) + len(outputs), f"request {r.request_id}: num_computed_tokens")
            status = _STATUSES.get(rec[4]) if type(rec[4]) is str else None
            if status is None:
                raise CallbackRefused("a status that is not a RequestStatus")
            r.num_computed_tokens, r.output_token_ids, r.block_table = nc, outputs, table
            r.status, r.finish_reason = status, _text(rec[5])
            r.num_cached_tokens = _int(rec[6], 0, MAX_TOKENS, f"request {r.request_id}: num_cached_tokens")
            r.num_preemptions = _int(rec[7], 0, MAX_TOKENS, f"request {r.request_id}: num_preemptions")
            if rec[8] is not None and type(rec[8]) is not str:
                raise CallbackRefused("an error that is not a str")
            r.error = None if rec[8] is None else rec[8][:wire.TEXT_LIMIT]
            self.synced[rec[0]] = self.fields(r)
        if "running" in state and self.scheduler is not None:
            if not isinstance(state["running"], list) or not isinstance(state.get("waiting"), list):
                raise CallbackRefused("queues that are not lists")
            running, waiting = [self.request(n) for n in state["running"]], [self.request(n) for n in state["waiting"]]
            if len({id(r) for r in running + waiting}) != len(running) + len(waiting):
                raise ValueError("a request is twice in the scheduler's queues (running and waiting)")
            self.scheduler.running[:] = running
            self.scheduler.waiting.clear()
            self.scheduler.waiting.extend(waiting)
            self.synced_queues = [list(state["running"]), list(state["waiting"])]

    def request(self, name: Any):
        r = self.requests.get(_text(name))
        if r is None:
            raise CallbackRefused("a request the grader was never shown")
        return r

    @staticmethod
    def fields(r: Any) -> list:
        """The copy's fields as `request_state` reads them, unchecked: the copies hold only checked values."""
        return [r.num_computed_tokens, list(r.output_token_ids), list(r.block_table), r.status._value_,
                r.finish_reason, r.num_cached_tokens, r.num_preemptions, r.error]

    def state(self) -> dict:
        """What changed since the last exchange, the pool too."""
        out = super().state()
        pool = [self.kv.num_free_blocks, list(self.kv.block_pool.ref_cnt)]
        if pool != self.synced_pool:
            out["free"], out["ref_cnt"] = self.synced_pool = pool
        if self.kv.prefix_cache is not None:
            named = [[n, v] for n, v in self._named() if self.synced_named.get(n) != v]
            if named:
                out["named"] = named
                self.synced_named.update(named)
        return out

    def _named(self) -> Iterator[tuple[str, int]]:
        """With prefix caching, how many full blocks of each request the KV-cache manager has named (BlockNames; -1
        while one waits to be named), for the stand-ins' `Link.known_allocation`."""
        names = getattr(self.kv, "block_names", None)
        for name, r in self.requests.items():
            bn = names.get(r) if isinstance(names, dict) else None
            offered = getattr(bn, "num_offered", None) if bn is not None else 0
            yield name, offered if type(offered) is int and not getattr(bn, "unregistered", None) else -1

    def answer(self, value: Any = None) -> dict:
        return {"state": self.state(), "value": value}

    def output(self, plan: Any) -> SchedulerOutput:
        """A SchedulerOutput of the copies from the names the worker sent (`plan`)."""
        if not isinstance(plan, dict) or not isinstance(plan.get("scheduled"), list) or \
                not isinstance(plan.get("preempted"), list):
            raise CallbackRefused("a SchedulerOutput that is not the stand-ins'")
        out = SchedulerOutput()
        for pair in plan["scheduled"]:
            if not isinstance(pair, list) or len(pair) != 2:
                raise CallbackRefused("a scheduled entry that is not [name, tokens]")
            out.scheduled.append(ScheduledRequest(self.request(pair[0]), _int(pair[1], -MAX_TOKENS, MAX_TOKENS,
                                                                                "num_new_tokens")))
        out.preempted = [self.request(n) for n in plan["preempted"]]
        return out

    def add_request(self, state: Any, name: Any) -> dict:
        """The scheduler's (an operation of the hosts that run one)."""
        self.apply(state)
        self.scheduler.add_request(self.request(name))
        return self.answer()

    # -- the KV-cache manager's operations

    def get_computed_blocks(self, state: Any, name: Any) -> dict:
        self.apply(state)
        return self.answer(self.kv.get_computed_blocks(self.request(name)))

    def allocate_slots(self, state: Any, name: Any, num_new_tokens: Any, computed: Any) -> dict:
        self.apply(state)
        n = _int(num_new_tokens, -MAX_TOKENS, MAX_TOKENS, "num_new_tokens")
        blocks = _ints(computed, 0, self.num_blocks - 1, "a computed block", self.num_blocks)
        return self.answer(bool(self.kv.allocate_slots(self.request(name), n, blocks)))

    def free(self, state: Any, name: Any) -> dict:
        self.apply(state)
        self.kv.free(self.request(name))
        return self.answer()

    def evict(self, state: Any, block: Any) -> dict:
        self.apply(state)
        if self.kv.prefix_cache is not None:
            self.kv.prefix_cache.evict(_int(block, 0, self.num_blocks - 1, "block id"))
        return self.answer()


class KVHost(RequestHost):
    """The reference KV-cache manager of a scheduler world (129, and 131's single calls), and the reference
    preemption (131's answer) for 129's learner scheduler, whose queues are the copies here. `config`: the fields
    of judge.drivers.scheduler.Config."""

    def __init__(self, config: dict) -> None:
        c = config
        super().__init__(c["num_blocks"], c["block_size"], c["prefix"])
        self.scheduler = SchedulerBase(self.kv, c["token_budget"], c["max_num_seqs"], c["chunked"])
        self.ops.update(allocate_or_preempt=self.allocate_or_preempt, preempt=self.preempt)

    def allocate_or_preempt(self, state: Any, name: Any, num_new_tokens: Any, plan: Any) -> dict:
        self.scheduler.preemption = reference("preemption")  # only 129's: 131's answer
        self.apply(state)
        out = self.output(plan)
        ok = self.scheduler.allocate_or_preempt(self.request(name), _int(num_new_tokens, -MAX_TOKENS, MAX_TOKENS,
                                                                         "num_new_tokens"), out)
        return self.answer([bool(ok), self.plan(out)])

    def preempt(self, state: Any, name: Any) -> dict:
        self.scheduler.preemption = reference("preemption")
        self.apply(state)
        self.scheduler.preempt(self.request(name))
        return self.answer()


class Opener:
    """Host 0: makes the hosts the drivers ask for, on configurations checked to be small; the oldest is dropped
    when MAX_HOSTS are open (a case uses a few at a time: a workload's worlds)."""

    LIMITS = {"num_blocks": 4096, "block_size": 256, "token_budget": MAX_TOKENS, "max_num_seqs": 1024}

    def __init__(self) -> None:
        self.ops = {"kv": self.kv}
        self.opened: deque[int] = deque()

    def _open(self, host: Any) -> int:
        if len(self.opened) >= MAX_HOSTS:
            drop_host(self.opened.popleft())
        self.opened.append(register_host(host))
        return self.opened[-1]

    def _config(self, config: Any, flags: tuple[str, str]) -> dict:
        """`config`, checked: the sizes of LIMITS, each an int in [1, its limit], and the two bools `flags`."""
        if not isinstance(config, dict) or set(config) != {*self.LIMITS, *flags}:
            raise CallbackRefused("a configuration that is not the drivers'")
        for key, limit in self.LIMITS.items():
            _int(config[key], 1, limit, key)
        if any(type(config[k]) is not bool for k in flags):
            raise CallbackRefused("a configuration flag that is not a bool")
        if config["num_blocks"] * config["block_size"] > MAX_TOKENS:
            raise ValueError(f"a KV cache of more than {MAX_TOKENS} tokens")
        return config

    def kv(self, config: Any) -> int:
        """A KVHost (exercises 129 and 131) for a scheduler world of judge.drivers.scheduler.Config(**config)."""
        return self._open(KVHost(self._config(config, ("chunked", "prefix"))))
