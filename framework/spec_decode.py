"""Speculative decoding's plumbing: its config, scheduling drafts, their logits rows, and what the engine's step
does differently.

A decoding request normally computes one token per forward pass. With speculation the scheduler guesses its next
d tokens (`NgramProposer`), and the request computes its last token and the d drafts in the same pass, as a short
chunk of the flat batch: d + 1 positions, counted in the token budget. The logits at those d + 1 positions say
what the model would have produced after each prefix, so one pass checks every draft (exercise 134,
`verify_and_update`). vLLM v1 does the same: `Scheduler.schedule` counts `spec_token_ids` in
`num_scheduled_tokens` and `Scheduler.update_from_output` rolls back `num_computed_tokens` by the rejected drafts
(vllm/v1/core/sched/scheduler.py at b31e9326a7).

Blocks allocated for draft positions are kept when drafts are rejected: the request grows into them at its next
steps, and the K and V written there for rejected drafts are overwritten before anything attends to them (a
position is only read once it is below `num_computed_tokens`). They are freed with the request's other blocks.
"""

from __future__ import annotations

import dataclasses
import numbers
from dataclasses import dataclass, field
from typing import Callable

import torch

from .model_runner import RunnerBatch, as_runner_batch
from .ngram_proposer import NgramProposer
from .scheduler import ScheduledRequest, SchedulerOutput


@dataclass
class SpeculativeConfig:
    """As vLLM's `SpeculativeConfig` with method "ngram": up to `num_speculative_tokens` drafts per request and
    step, found by prompt lookup with n-grams of `prompt_lookup_max` down to `prompt_lookup_min` tokens."""

    num_speculative_tokens: int = 4
    prompt_lookup_min: int = 2  # a single repeated token is too weak a clue: its drafts are mostly rejected
    prompt_lookup_max: int = 4
    method: str = "ngram"

    def __post_init__(self) -> None:
        if self.method != "ngram":
            raise ValueError(f"SpeculativeConfig.method must be 'ngram' (the only proposer here), got {self.method!r}")
        for name in ("num_speculative_tokens", "prompt_lookup_min", "prompt_lookup_max"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
                raise ValueError(f"SpeculativeConfig.{name} must be an int >= 1, got {value!r}")
        if self.prompt_lookup_min > self.prompt_lookup_max:
            raise ValueError(f"SpeculativeConfig.prompt_lookup_min ({self.prompt_lookup_min}) must not exceed "
                             f"prompt_lookup_max ({self.prompt_lookup_max})")

    def proposer(self) -> NgramProposer:
        return NgramProposer(self.num_speculative_tokens, self.prompt_lookup_min, self.prompt_lookup_max)


@dataclass
class DraftedRequest(ScheduledRequest):
    """A decoding request scheduled for its last token and `draft_token_ids`: num_new_tokens = 1 + len(drafts)."""

    draft_token_ids: list[int] = field(default_factory=list)

    @property
    def completes_prompt(self) -> bool:
        return True  # its last token is among the new ones, so it needs logits


class DraftingScheduler:
    """Put before a scheduler class in the bases (`class S(DraftingScheduler, Scheduler)`): after the scheduler's
    own `schedule`, each request scheduled for its last pending token gets drafts from `self.proposer`, as many as
    the token budget left over, its max_tokens and the free blocks allow. Drafts never preempt anyone: they are a
    bet, and a bet is not worth another request's KV cache."""

    proposer: NgramProposer  # set by the engine

    def schedule(self) -> SchedulerOutput:
        out = super().schedule()
        budget = self.token_budget - out.num_scheduled_tokens
        for i, s in enumerate(out.scheduled):
            request = s.request
            if budget == 0:
                break
            if request.num_tokens - request.num_computed_tokens != s.num_new_tokens or s.num_new_tokens != 1:
                continue  # a prompt (or part of one) still to compute: no drafts yet
            # The step emits at most 1 + len(drafts) tokens; more than max_tokens allows would be thrown away.
            room = request.sampling_params.max_tokens - len(request.output_token_ids) - 1
            drafts = self.proposer.propose(request.all_token_ids)[: min(budget, room)]
            if drafts and self.kv.allocate_slots(request, 1 + len(drafts)):
                out.scheduled[i] = DraftedRequest(request, 1 + len(drafts), drafts)
                budget -= len(drafts)
        return out


def batch_items(sched: SchedulerOutput) -> list[tuple]:
    """One item per scheduled request, as exercise 128's `build_batch` takes them, with a fifth field: the number
    of drafts (0 for a request without any). A drafted request's tokens are its last token and its drafts."""
    items = []
    for s in sched.scheduled:
        request, start = s.request, s.request.num_computed_tokens
        drafts = s.draft_token_ids if isinstance(s, DraftedRequest) else []
        tokens = request.all_token_ids[start: start + s.num_new_tokens - len(drafts)] + drafts
        items.append((tokens, start, request.block_table, s.completes_prompt, len(drafts)))
    return items


def with_draft_rows(build_batch: Callable) -> Callable:
    """`build_batch` (exercise 128) for items with a fifth field, their number of drafts d. The batch layout is
    the one of 128 with one addition: a drafted item's `logits_indices` rows are every position from its last
    accepted token on (its last d + 1 positions) instead of its last position alone."""

    def build(items: list[tuple], block_size: int) -> RunnerBatch:
        batch = as_runner_batch(build_batch([item[:4] for item in items], block_size))
        num_rows = torch.tensor([1 + item[4] for item in items if item[3]], dtype=torch.long)
        if not bool((num_rows > 1).any()):
            return batch
        first_row = torch.cumsum(num_rows, 0) - num_rows  # each item's first row among the new ones
        offsets = torch.arange(int(num_rows.sum())) - torch.repeat_interleave(first_row, num_rows)
        rows = torch.repeat_interleave(batch.logits_indices - num_rows + 1, num_rows) + offsets
        return dataclasses.replace(batch, logits_indices=rows)

    return build


def accepted_length(drafts: list[int], tokens: list[int]) -> int:
    """How many drafts were accepted: the emitted tokens agree with the drafts up to the first rejection (the
    token emitted there differs from its draft) or a stop."""
    return next((i for i, (d, t) in enumerate(zip(drafts, tokens)) if d != t), min(len(drafts), len(tokens)))


class SpecDecodeEngineMixin:
    """Put before an engine class in the bases (`class E(SpecDecodeEngineMixin, LLMEngine)`), with a
    `DraftingScheduler` scheduler and a runner whose `build_batch` is `with_draft_rows(...)`. Its `step` changes only
    what speculation changes: the forward pass carries the drafts, and `verify_and_update` (exercise 134) turns each
    drafted request's logits rows into the tokens it emits. Every request without drafts goes through the engine's
    own `step` (exercise 130), given the rows already computed; `generate` stays the engine's.
    The config's `speculative` field (a `SpeculativeConfig`) defaults to `SpeculativeConfig()`.

    Counters, here for every request and on each request: `num_draft_tokens` proposed, `num_accepted_tokens`
    among them."""

    verify_and_update: Callable  # (request, draft_token_ids, logits, eos_token_id, tokenizer) -> (tokens, reason)
    samples_with_history = False  # verify_and_update samples with sample_token: no penalties, min_tokens, logprobs

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.speculative = self.config.speculative or SpeculativeConfig()
        self.scheduler.proposer = self.speculative.proposer()
        self.num_draft_tokens = self.num_accepted_tokens = 0

    def step(self) -> list:
        """Schedule (with drafts), one forward pass for every scheduled request, then the engine's own step for
        the requests without drafts and `verify` for the others; outputs in the order they were scheduled. A
        failed step finishes all its requests with reason "error" and raises a `StepError`, as the engine's does."""
        sched = self.scheduler.schedule()
        if not sched:
            return []
        try:
            logits = self.runner.execute_model(batch_items(sched))
            plain, plain_rows, drafted, row = SchedulerOutput(preempted=sched.preempted), [], [], 0
            for s in sched.scheduled:  # rows: 1 + d for a drafted request, 1 or none (a prompt chunk) for others
                if isinstance(s, DraftedRequest):
                    drafted.append((s, logits[row: row + 1 + len(s.draft_token_ids)]))
                    row += 1 + len(s.draft_token_ids)
                    continue
                plain.scheduled.append(s)
                if s.completes_prompt:
                    plain_rows.append(row)
                    row += 1
            outputs = self.engine_step(plain, logits[plain_rows]) + [self.verify(s, rows) for s, rows in drafted]
        except BaseException as error:
            from .engine import StepError  # engine.py imports this module

            # the engine's step may have failed its own requests already: fail the others with the same cause
            cause = error.__cause__ if isinstance(error, StepError) and error.__cause__ else error
            failure = self.fail_step([s.request for s in sched.scheduled], cause)
            if isinstance(error, Exception):  # an interrupt (Ctrl-C) stays itself
                raise failure from cause
            raise
        order = {s.request.request_id: i for i, s in enumerate(sched.scheduled)}
        return sorted(outputs, key=lambda out: order[out.request_id])

    def engine_step(self, sched: SchedulerOutput, logits: torch.Tensor) -> list:
        """The engine's own `step` on `sched`, the requests without drafts: for that one call, its scheduler gives
        `sched` and its forward pass returns `logits`, their rows of the pass already run."""
        if not sched:
            return []
        scheduler, runner = self.scheduler, self.runner
        schedule, execute = scheduler.schedule, runner.execute_model
        scheduler.schedule, runner.execute_model = (lambda: sched), (lambda items: logits)
        try:
            return super().step()
        finally:
            scheduler.schedule, runner.execute_model = schedule, execute

    def verify(self, s: DraftedRequest, rows: torch.Tensor):
        """A drafted request: its 1 + d rows through `verify_and_update`, the counters, and its output."""
        request, drafts = s.request, s.draft_token_ids
        tokens, reason = self.verify_and_update(request, drafts, rows, self.eos_token_id, self.tokenizer)
        accepted = accepted_length(drafts, tokens)
        request.num_draft_tokens += len(drafts)
        request.num_accepted_tokens += accepted
        self.num_draft_tokens += len(drafts)
        self.num_accepted_tokens += accepted
        if reason:
            self.scheduler.finish(request, reason)
        return self.make_output(request, tokens)


def speculating_engine(engine_cls: type, verify_and_update: Callable) -> type:
    """`engine_cls` (an LLMEngineBase subclass) with n-gram speculation: its scheduler drafting, its runner giving
    drafted requests d + 1 rows, and `verify_and_update` (exercise 134) after each forward pass."""

    class Scheduler(DraftingScheduler, engine_cls.scheduler_cls):
        pass

    class Runner(engine_cls.runner_cls):
        build_batch = staticmethod(with_draft_rows(engine_cls.runner_cls.build_batch))

    class Engine(SpecDecodeEngineMixin, engine_cls):
        scheduler_cls, runner_cls = Scheduler, Runner

    Engine.verify_and_update = staticmethod(verify_and_update)
    return Engine
