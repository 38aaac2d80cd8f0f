"""Public stand-ins for the parts of the course a learner's engine calls but that another exercise writes: the
scheduler (129 and 131), the KV-cache manager (125 and 132) and the model runner (126 to 128). They hold no answer:
each call sends plain data to the grader, which runs the reference part there (a host, judge/hidden/support.py)
and sends back what it did, applied here to the worker's own objects, in place.

One `Link` is one world of parts in the grader: the requests by name ("#0", "#1", ... in order of arrival), the
scheduler's queues, the pool's free blocks. Every call first sends the state of every request as the learner's
code left it (tokens, `num_computed_tokens`, status, the queues), and the grader's answer sets what its parts
changed (block tables, statuses, the queues, the free blocks): the learner's engine sees real `Request`s, a real
`SchedulerOutput`, real logits. A value the learner left of the wrong kind is refused here, in their code.
"""

from __future__ import annotations

import operator
from collections import deque
from typing import Any

from framework.request import Request, RequestStatus
from framework.scheduler import ScheduledRequest, SchedulerBase, SchedulerOutput
from judge.drivers import host_call, plain_ints


class Link:
    """The worker's side of one host: its requests by name, and the stand-ins that read and change them."""

    def __init__(self, host: int) -> None:
        self.host = host
        self.requests: dict[str, Request] = {}
        self.names: dict[Request, str] = {}
        self.scheduler: RemoteScheduler | None = None
        self.kv: RemoteKVCacheManager | None = None

    def name_of(self, request: Any) -> str:
        name = self.names.get(request) if isinstance(request, Request) else None
        if name is None:
            raise ValueError(f"{type(request).__name__} {str(request)[:60]} is not a request of this engine")
        return name

    def call(self, op: str, *args: Any) -> Any:
        """Operation `op` of the host, after sending the requests' state; the state it answers is applied here."""
        answer = host_call(self.host, op, self.state(), *args)
        self.apply(answer["state"])
        return answer["value"]

    def state(self) -> dict:
        s = self.scheduler
        return {"requests": [[name, *_request_state(r)] for name, r in self.requests.items()],
                "running": [self.name_of(r) for r in s.running] if s is not None else [],
                "waiting": [self.name_of(r) for r in s.waiting] if s is not None else []}

    def apply(self, state: dict) -> None:
        for name, num_computed, block_table, status, reason, num_cached, num_preemptions in state["requests"]:
            r = self.requests.get(name)
            if r is None:
                continue
            r.num_computed_tokens, r.block_table, r.status = num_computed, block_table, RequestStatus(status)
            r.finish_reason, r.num_cached_tokens, r.num_preemptions = reason, num_cached, num_preemptions
        if self.scheduler is not None:
            self.scheduler.running[:] = [self.requests[n] for n in state["running"] if n in self.requests]
            self.scheduler.waiting = deque(self.requests[n] for n in state["waiting"] if n in self.requests)
        if self.kv is not None:
            self.kv.block_pool.num_free_blocks = state["free"]
            if "ref_cnt" in state:
                self.kv.block_pool.ref_cnt = state["ref_cnt"]


def _request_state(r: Request) -> list:
    """[num_computed_tokens, output_token_ids, status, finish_reason] of a request, as plain values."""
    nc, outputs = r.num_computed_tokens, plain_ints(r.output_token_ids)
    if isinstance(nc, bool) or not isinstance(nc, int):
        raise TypeError(f"request {r.request_id}: num_computed_tokens is {nc!r:.40}, it must be an int")
    if outputs is None:
        raise TypeError(f"request {r.request_id}: output_token_ids is {r.output_token_ids!r:.60}, it must be a list "
                        "of ints")
    if not isinstance(r.status, RequestStatus):
        raise TypeError(f"request {r.request_id}: status is {r.status!r:.40}, it must be a RequestStatus")
    reason = r.finish_reason
    if reason is not None and not isinstance(reason, str):
        raise TypeError(f"request {r.request_id}: finish_reason is {reason!r:.40}, it must be a str or None")
    return [nc, outputs, r.status.value, reason]


class _PoolView:
    """What the engine reads of the block pool, as the grader's pool last was."""

    def __init__(self, num_blocks: int) -> None:
        self.num_blocks, self.num_free_blocks, self.ref_cnt = num_blocks, num_blocks, [0] * num_blocks


class RemoteKVCacheManager:
    """The KV-cache manager, run in the grader: `num_free_blocks`, `block_pool.ref_cnt`, `free(request)` and, with
    prefix caching, `prefix_cache.evict(block)` (what `LLMEngineBase.abort_requests` uses)."""

    link: Link

    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool = False) -> None:
        self.block_size = block_size
        self.block_pool = _PoolView(num_blocks)
        self.prefix_cache = _RemotePrefixCache(self.link) if enable_prefix_caching else None
        self.link.kv = self

    @property
    def num_free_blocks(self) -> int:
        return self.block_pool.num_free_blocks

    def free(self, request: Request) -> None:
        self.link.call("free", self.link.name_of(request))


class _RemotePrefixCache:
    def __init__(self, link: Link) -> None:
        self.link = link

    def evict(self, block_id: int) -> None:
        self.link.call("evict", int(block_id))


class RemoteScheduler(SchedulerBase):
    """The scheduler, run in the grader: `add_request`, `schedule`, `finish`; the queues `running` and `waiting`
    hold this engine's requests as the grader's scheduler left them."""

    link: Link

    def __init__(self, kv_cache_manager: Any, token_budget: int = 256, max_num_seqs: int = 16,
                 enable_chunked_prefill: bool = True) -> None:
        super().__init__(kv_cache_manager, token_budget, max_num_seqs, enable_chunked_prefill)
        self.link.scheduler = self

    def add_request(self, request: Request) -> None:
        prompt = plain_ints(request.prompt_token_ids)
        if prompt is None:
            raise TypeError(f"request {request.request_id}: prompt_token_ids must be a list of ints")
        name = self.link.call("add_request", str(request.request_id)[:100], prompt,
                              int(request.sampling_params.max_tokens))
        self.link.requests[name] = request
        self.link.names[request] = name
        self.waiting.append(request)  # where the grader's scheduler put it (the state came before it had a name)

    def schedule(self) -> SchedulerOutput:
        plan = self.link.call("schedule")
        requests = self.link.requests
        return SchedulerOutput([ScheduledRequest(requests[n], k) for n, k in plan["scheduled"]],
                               [requests[n] for n in plan["preempted"]])

    def finish(self, request: Request, reason: str) -> None:
        if not isinstance(reason, str):
            raise TypeError(f"finish(request, reason): reason is {reason!r:.40}, it must be a str")
        self.link.call("finish", self.link.name_of(request), reason[:100])


class RemoteModelRunner:
    """The model runner, run in the grader on its paged KV cache: `execute_model(items)` returns the logits."""

    link: Link

    def __init__(self, model: Any, num_blocks: int, block_size: int) -> None:
        self.num_blocks, self.block_size = num_blocks, block_size

    def execute_model(self, items: Any) -> Any:
        return host_call(self.link.host, "execute_model", [_plain_item(it) for it in items])


def _plain_item(item: Any) -> list:
    try:
        tokens, num_computed, table, need = item
    except (TypeError, ValueError):
        raise TypeError(f"an item is {item!r:.80}; each item is (token_ids, num_computed, block_table, "
                        "need_logits)") from None
    tokens, table = plain_ints(tokens), plain_ints(table)
    if tokens is None or table is None or isinstance(num_computed, bool) or not hasattr(num_computed, "__index__"):
        raise TypeError(f"an item is {item!r:.80}: token_ids and block_table are lists of ints, num_computed an int")
    return [tokens, operator.index(num_computed), table, bool(need)]


def parts(host: int) -> tuple[type, type, type]:
    """(scheduler, KV-cache manager, model runner) classes for `LLMEngineBase`, all on one new link to `host`."""
    link = Link(host)
    bound = {"link": link}
    return (type("Scheduler", (RemoteScheduler,), bound), type("KVCacheManager", (RemoteKVCacheManager,), bound),
            type("ModelRunner", (RemoteModelRunner,), bound))
