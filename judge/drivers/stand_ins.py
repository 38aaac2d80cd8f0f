"""Public stand-ins for the parts of the course the learner's code calls but that another exercise writes: the
KV-cache manager (125 and 132) under 129's scheduler, and preemption (131). They hold
no answer: each call sends plain data to the grader, which runs the reference part there (a host, in
judge/drivers/hosts.py) and sends back what it did, applied here to the worker's own objects, in place.

One `Link` is one world of parts in the grader. With every call it sends the state of each of the worker's requests
as the learner's code left it (a value of the wrong kind is refused here, in their code, with a TypeError) and the
queues of the scheduler it watches, where they differ from what the grader's copies hold; the grader answers the
state its parts left, with the pool's free blocks and reference counts. So the learner's code sees real `Request`s,
a real `SchedulerOutput`, real logits. Some allocations are answered here, without crossing (`Link.known_allocation`).
"""

from __future__ import annotations

import dataclasses
import operator
from types import SimpleNamespace
from typing import Any

from framework.kv_cache_manager import blocks_to_allocate
from framework.request import Request, RequestStatus
from framework.sampling import SamplingParams
from framework.scheduler import ScheduledRequest, SchedulerOutput
from judge.drivers import host_call
from judge.harness import int_values


class Mirror:
    """One side of a link: its requests by name, the scheduler whose queues travel with them, and what the other
    side holds of each (sent or received last), so that only what differs is sent. Names start with `mark`."""

    mark = "#"

    def __init__(self) -> None:
        self.requests: dict[str, Request] = {}
        self.names: dict[Request, str] = {}  # a Request hashes by identity
        self.new: list[str] = []  # named since the last exchange: the other side makes its own copy of each
        self.scheduler: Any = None
        self.synced: dict[str, list] = {}
        self.synced_queues: list[list[str]] | None = None

    def name_of(self, request: Any) -> str:
        if not isinstance(request, Request):
            raise TypeError(f"{type(request).__name__} {str(request)[:60]} is not a framework.request.Request")
        name = self.names.get(request)
        if name is None:
            name = f"{self.mark}{len(self.requests)}"
            self.requests[name], self.names[request] = request, name
            self.new.append(name)
        return name

    def state(self) -> dict:
        """What changed since the last exchange: new requests, requests whose state differs, the queues."""
        s, out = self.scheduler, {}
        if s is not None:
            queues = [[self.name_of(r) for r in s.running], [self.name_of(r) for r in s.waiting]]
            if queues != self.synced_queues:
                out["running"], out["waiting"] = self.synced_queues = queues
        out["new"], self.new = [[n, *_identity(self.requests[n])] for n in self.new], []
        out["requests"] = []
        for name, r in self.requests.items():
            fields = self.fields(r)
            if self.synced.get(name) != fields:
                self.synced[name] = fields
                out["requests"].append([name, *fields])
        return out

    @staticmethod
    def fields(r: Request) -> list:
        return request_state(r)

    def plan(self, out: Any) -> dict:
        """A SchedulerOutput as names: {"scheduled": [[name, num_new_tokens], ...], "preempted": [name, ...]}."""
        scheduled, preempted = getattr(out, "scheduled", None), getattr(out, "preempted", None)
        if not isinstance(scheduled, list) or not isinstance(preempted, list):
            raise TypeError(f"out is {type(out).__name__}; it must be a SchedulerOutput")
        pairs = []
        for s in scheduled:
            n = getattr(s, "num_new_tokens", None)
            if isinstance(n, bool) or not isinstance(n, int):
                raise TypeError(f"out.scheduled holds {str(s)[:80]}; each is ScheduledRequest(request, int)")
            pairs.append([self.name_of(getattr(s, "request", None)), n])
        return {"scheduled": pairs, "preempted": [self.name_of(r) for r in preempted]}


class Link(Mirror):
    """The worker's side of one host."""

    def __init__(self, host: int) -> None:
        super().__init__()
        self.host = host
        self.kv: RemoteKVCacheManager | None = None
        # the grader's KV cache, as its last answer left it: (num_blocks, block_size, prefix caching), the free
        # blocks, the reference counts, and with prefix caching the full blocks of each request it has named
        self.layout: tuple[int, int, bool] = (0, 1, False)
        self.free: int | None = None  # not known before the grader's first answer
        self.ref_cnt: list[int] = []
        self.named: dict[str, int] = {}

    def call(self, op: str, *args: Any) -> Any:
        """Operation `op` of the host, after sending the state; the state it answers is applied here."""
        answer = host_call(self.host, op, self.state(), *args)
        self.apply(answer["state"])
        return answer["value"]

    def apply(self, state: dict) -> None:
        for name, request_id, prompt, params in state.get("new", ()):  # made by the grader's parts
            r = Request(prompt, SamplingParams(**params), request_id=request_id)
            self.requests[name], self.names[r] = r, name
        for name, *fields in state["requests"]:
            r = self.requests.get(name)
            if r is not None:
                nc, outputs, table, status, reason, num_cached, num_preemptions, r.error = fields
                _set_list(r, "output_token_ids", outputs)
                _set_list(r, "block_table", table)
                r.num_computed_tokens, r.status, r.finish_reason = nc, RequestStatus(status), reason
                r.num_cached_tokens, r.num_preemptions = num_cached, num_preemptions
                self.synced[name] = [list(f) if isinstance(f, list) else f for f in fields]  # not the request's
        if self.scheduler is not None and "running" in state:  # in place: the learner's code may hold them
            self.synced_queues = [state["running"], state["waiting"]]
            for queue, names in zip((self.scheduler.running, self.scheduler.waiting), self.synced_queues):
                if [self.names.get(r) for r in queue] != names:
                    queue.clear()
                    queue.extend(self.requests[n] for n in names)
        if self.kv is not None and "free" in state:
            pool, self.free, self.ref_cnt = self.kv.block_pool, state["free"], state["ref_cnt"]
            pool.num_free_blocks, pool.ref_cnt = self.free, list(self.ref_cnt)  # the learner's to read (or spoil)
        self.named.update(state.get("named", ()))

    def known_allocation(self, name: str, request: Request, n: int, computed: list[int]) -> bool | None:
        """What `allocate_slots(request, n, computed)` answers, where it is known here, else None: it is
        framework/kv_cache_manager.py's (KVCacheManagerBase), on the grader's pool as its last answer left it.
        False when the blocks needed exceed the free ones (it changes nothing then); True when no new block is
        needed and, with prefix caching, the grader has named every full block among them (it takes none, names
        none). Then nothing crosses (most decode steps, and a waiting request that does not fit); the state the
        learner's code left travels with the next call, checked there."""
        num_blocks, block_size, prefix = self.layout
        nc, table = request.num_computed_tokens, request.block_table
        if self.free is None or type(nc) is not int or type(table) is not list or not 0 <= nc <= num_blocks * \
                block_size or not 0 <= n <= num_blocks * block_size or len(table) > num_blocks or \
                any(not 0 <= b < num_blocks for b in computed):
            return None
        num_new_blocks, taken = blocks_to_allocate(request, n, computed, block_size, self.ref_cnt)
        if taken > self.free:
            return False
        if computed or num_new_blocks > 0 or not table or \
                prefix and not (nc + n) // block_size <= self.named.get(name, 0):
            return None
        return True

    def set_plan(self, out: Any, plan: dict) -> None:
        """Make `out` say `plan`, keeping the ScheduledRequest objects that stay."""
        kept = {(id(s.request), s.num_new_tokens): s for s in out.scheduled}
        out.scheduled = [kept.get((id(self.requests[n]), k)) or ScheduledRequest(self.requests[n], k)
                         for n, k in plan["scheduled"]]
        out.preempted[:] = [self.requests[n] for n in plan["preempted"]]

    def output(self, plan: dict) -> SchedulerOutput:
        out = SchedulerOutput()
        self.set_plan(out, plan)
        return out


def _set_list(r: Request, attr: str, value: list[int]) -> None:
    """Set a list field only if it changed, in place when it is a list (the learner's code may hold it)."""
    old = getattr(r, attr)
    if isinstance(old, list) and old != value:
        old[:] = value
    elif not isinstance(old, list):
        setattr(r, attr, value)


def _identity(r: Request) -> list:
    """[request_id, prompt_token_ids, sampling params]: what the host's copy of a request is made from."""
    prompt, params = int_values(r.prompt_token_ids), r.sampling_params
    if prompt is None or not isinstance(params, SamplingParams):
        raise TypeError(f"request {r.request_id}: prompt_token_ids must be a list of ints, sampling_params a "
                        "SamplingParams")
    return [str(r.request_id)[:100], prompt, dataclasses.asdict(params)]


def request_state(r: Request) -> list:
    """The fields of a request the parts read and write, as plain values (read for every request at every call:
    the usual kinds are checked first, quickly)."""
    nc, num_cached, num_preemptions = r.num_computed_tokens, r.num_cached_tokens, r.num_preemptions
    if not type(nc) is type(num_cached) is type(num_preemptions) is int and \
            any(isinstance(v, bool) or not isinstance(v, int) for v in (nc, num_cached, num_preemptions)):
        raise TypeError(f"request {r.request_id}: num_computed_tokens, num_cached_tokens and num_preemptions must "
                        f"be ints, got {[nc, num_cached, num_preemptions]!r:.80}")
    outputs, table = int_values(r.output_token_ids), int_values(r.block_table)
    if outputs is None or table is None:
        raise TypeError(f"request {r.request_id}: output_token_ids and block_table must be lists of ints")
    status, reason, error = r.status, r.finish_reason, r.error
    if not isinstance(status, RequestStatus):
        raise TypeError(f"request {r.request_id}: status is {status!r:.40}, it must be a RequestStatus")
    if not (reason is None or isinstance(reason, str)) or not (error is None or isinstance(error, str)):
        raise TypeError(f"request {r.request_id}: finish_reason and error must be a str or None")
    return [nc, outputs, table, status._value_, reason, num_cached, num_preemptions, error]


class RemoteKVCacheManager:
    """The KV-cache manager, run in the grader: `get_computed_blocks`, `allocate_slots`, `free`, `block_size`,
    `num_free_blocks`, `block_pool.ref_cnt` and, with prefix caching, `prefix_cache.evict(block)`."""

    link: Link

    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool = False) -> None:
        self.block_size = block_size
        # what the learner's code reads of the block pool, as the grader's pool last was
        self.block_pool = SimpleNamespace(num_blocks=num_blocks, num_free_blocks=num_blocks, ref_cnt=[0] * num_blocks)
        self.prefix_cache = _RemotePrefixCache(self.link) if enable_prefix_caching else None
        self.link.kv, self.link.layout = self, (num_blocks, block_size, bool(enable_prefix_caching))

    @property
    def num_free_blocks(self) -> int:
        return self.block_pool.num_free_blocks

    def get_computed_blocks(self, request: Request) -> list[int]:
        if self.prefix_cache is None:  # as framework.kv_cache_manager's: no cache, no hit (and no call)
            return []
        return self.link.call("get_computed_blocks", self.link.name_of(request))

    def allocate_slots(self, request: Request, num_new_tokens: int, computed_blocks: Any = ()) -> bool:
        blocks = int_values(computed_blocks)
        if blocks is None or isinstance(num_new_tokens, bool) or not hasattr(num_new_tokens, "__index__"):
            raise TypeError("allocate_slots(request, num_new_tokens: int, computed_blocks: list of ints)")
        name, n = self.link.name_of(request), operator.index(num_new_tokens)
        known = self.link.known_allocation(name, request, n, blocks)
        return known if known is not None else self.link.call("allocate_slots", name, n, blocks)

    def free(self, request: Request) -> None:
        self.link.call("free", self.link.name_of(request))


class _RemotePrefixCache:
    def __init__(self, link: Link) -> None:
        self.link = link

    def evict(self, block_id: int) -> None:
        self.link.call("evict", operator.index(block_id))


class RemotePreemption:
    """The preemption module (exercise 131), run in the grader on the scheduler it is called with."""

    def __init__(self, link: Link) -> None:
        self.link = link

    def allocate_or_preempt(self, scheduler: Any, request: Request, num_new_tokens: int, out: Any) -> bool:
        self.link.scheduler = scheduler
        if isinstance(num_new_tokens, bool) or not hasattr(num_new_tokens, "__index__"):
            raise TypeError("allocate_or_preempt(scheduler, request, num_new_tokens: int, out)")
        name, n, plan = self.link.name_of(request), operator.index(num_new_tokens), self.link.plan(out)
        if self.link.kv is not None and self.link.known_allocation(name, request, n, []):
            return True  # the statement: True once allocate_slots succeeds (first try: nobody preempted)
        ok, plan = self.link.call("allocate_or_preempt", name, n, plan)
        self.link.set_plan(out, plan)
        return ok

    def preempt(self, scheduler: Any, request: Request) -> None:
        self.link.scheduler = scheduler
        self.link.call("preempt", self.link.name_of(request))


def bound(cls: type, link: Link) -> type:
    """`cls` on `link`: a class the framework can build with its usual arguments."""
    return type(cls.__name__.removeprefix("Remote"), (cls,), {"link": link})
