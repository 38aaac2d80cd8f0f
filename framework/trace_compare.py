"""Two step traces of the same workload side by side: the first step where their plans differ.

A step's plan is what the engine decided, not how long it took: the requests it scheduled, in order, each with
its kind (prefill or decode), new tokens, draft tokens and the blocks it held once scheduled; then the step's KV
blocks in use, preemptions, prefix-cache hits, accepted drafts and finished requests. Requests are named by their
order of arrival (`#0`, `#1`, ...), since two engines may number their request ids differently.

    diff = first_difference(yours, reference)      # StepTracers, paths of saved traces, or load_trace's tuples
    if diff is not None:
        print(diff.table())                        # the step, what differs, the rows side by side

`first_difference` is what a report calls with two traces; `course/figures.py` draws a `Divergence` as a figure.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Union

from .trace import RequestRecord, StepRecord, StepTracer, load_trace

Trace = tuple[list[StepRecord], list[RequestRecord]]
TraceLike = Union[Trace, StepTracer, str, Path]

# compared after the rows, in this order; (label, how to read it from a step)
STEP_FIELDS = [("KV blocks used", lambda s, name: s.kv_blocks_used),
               ("preempted", lambda s, name: [name(r) for r in s.preempted]),
               ("prefix-hit tokens", lambda s, name: s.prefix_hit_tokens),
               ("drafts accepted", lambda s, name: s.drafts_accepted),
               ("finished", lambda s, name: [name(r) for r in s.finished]),
               ("error", lambda s, name: s.error)]


@dataclass(frozen=True)
class Row:
    """One scheduled request of a step, as compared."""

    request: str  # "#i": the i-th request to arrive
    kind: str  # "prefill" (a prompt, a chunk of it, or a recomputation) or "decode"
    tokens: int  # new tokens computed for it, drafts not counted
    drafts: int
    blocks: int  # its block table's length once scheduled


@dataclass
class Divergence:
    """The first step at which trace `a` and trace `b` differ (`step`, its index, from 0), what differs there, that
    step's rows in each (empty where one trace has no such step), and both traces' steps up to and including it."""

    step: int
    what: list[str]  # e.g. ["scheduled requests", "token counts"]
    rows: tuple[list[Row], list[Row]]
    fields: list[tuple[str, Any, Any]]  # (label, a's, b's) of the step-level fields, the differing ones
    steps: tuple[list[StepRecord], list[StepRecord]]
    requests: tuple[list[RequestRecord], list[RequestRecord]]
    labels: tuple[str, str] = ("yours", "reference")

    def table(self, step_name: str = "step") -> str:
        """The differing step as a short text table: one line per request scheduled in either trace, `<` where
        they differ; then the step-level fields that differ. Steps are numbered from 1, as the figures draw them,
        and called `step_name` (the judge says "engine step")."""
        a, b = ({r.request: r for r in rows} for rows in self.rows)
        order = list(dict.fromkeys([r.request for r in self.rows[1]] + [r.request for r in self.rows[0]]))
        drafts = any(r.drafts for rows in self.rows for r in rows)
        columns = [("kind", 9), ("tokens", 7)] + [("drafts", 7)] * drafts + [("blocks", 7)]
        width = sum(w for _, w in columns) + 4
        ended = [label for label, steps in zip(self.labels, self.steps) if len(steps) <= self.step]

        def cells(row: Row | None) -> str:
            if row is None:
                return f"{'-':<{width}}"
            values = [row.kind, row.tokens] + [row.drafts] * drafts + [row.blocks]
            return "".join(f"{v:<{w}}" if name == "kind" else f"{v:>{w}}" for (name, w), v in
                           zip(columns, values)) + " " * 4

        head = "".join(f"{n:<{w}}" if n == "kind" else f"{n:>{w}}" for n, w in columns) + " " * 4
        lines = [f"first difference at {step_name} {self.step + 1} (trace index {self.step}): {', '.join(self.what)}"
                 + (f"; {' and '.join(ended)} had no such step" if ended else ""),
                 (f"{'':9}{self.labels[0]:<{width}}{self.labels[1]}"),
                 f"{'request':9}{head}{head}".rstrip()]
        for request in order:
            mark = "" if a.get(request) == b.get(request) else "  <"
            lines.append(f"{request:9}{cells(a.get(request))}{cells(b.get(request))}".rstrip() + mark)
        if [r.request for r in self.rows[0]] != [r.request for r in self.rows[1]] and set(a) == set(b):
            lines.append(f"{'order':9}{' '.join(r.request for r in self.rows[0]):<{width}}"
                         f"{' '.join(r.request for r in self.rows[1])}")
        lines += [f"{label}: {self.labels[0]} {x}, {self.labels[1]} {y}" for label, x, y in self.fields]
        return "\n".join(lines)


def as_trace(trace: TraceLike) -> Trace:
    """Steps and requests from a StepTracer, a saved trace's path, or `load_trace`'s result."""
    if isinstance(trace, StepTracer):
        return trace.steps, list(trace.requests.values())
    if isinstance(trace, (str, Path)):
        return load_trace(trace)
    if isinstance(trace, tuple) and len(trace) == 2:
        return trace
    raise TypeError(f"a trace is a StepTracer, the path of a saved trace or (steps, requests), not {type(trace)}")


def namer(requests: list[RequestRecord]):
    """request_id -> "#i", i its order of arrival (the order the tracer met it)."""
    index = {r.request_id: f"#{i}" for i, r in enumerate(requests)}
    return lambda request_id: index.get(request_id, request_id)


def plan(step: StepRecord, name) -> list[Row]:
    """The rows of `step`, requests named by `name`."""
    return [Row(name(s["request_id"]), s["kind"], s["tokens"], s["drafts"], s.get("blocks", 0))
            for s in step.scheduled]


def _what(a: list[Row], b: list[Row]) -> list[str]:
    """Which parts of two plans differ, coarsest first."""
    by_a, by_b = {r.request: r for r in a}, {r.request: r for r in b}
    if by_a.keys() != by_b.keys():
        return ["scheduled requests"]
    what = [label for label, attr in (("kinds", "kind"), ("token counts", "tokens"), ("drafts", "drafts"),
                                      ("blocks", "blocks"))
            if any(getattr(by_a[k], attr) != getattr(by_b[k], attr) for k in by_a)]
    if [r.request for r in a] != [r.request for r in b]:
        what.append("order")
    return what


def first_difference(a: TraceLike, b: TraceLike, labels: tuple[str, str] = ("yours", "reference")) \
        -> Divergence | None:
    """The first step where the plans of traces `a` and `b` differ (see the module's docstring), or None if they
    agree on every step and have as many."""
    (a_steps, a_requests), (b_steps, b_requests) = as_trace(a), as_trace(b)
    a_name, b_name = namer(a_requests), namer(b_requests)
    for i in range(max(len(a_steps), len(b_steps))):
        x = a_steps[i] if i < len(a_steps) else None
        y = b_steps[i] if i < len(b_steps) else None
        rows = (plan(x, a_name) if x else [], plan(y, b_name) if y else [])
        what = _what(*rows)
        fields = [(label, get(x, a_name) if x else None, get(y, b_name) if y else None)
                  for label, get in STEP_FIELDS]
        fields = [f for f in fields if f[1] != f[2]] if x and y else []
        if x is None or y is None:
            what.append("number of steps")
        if what or fields:
            return Divergence(i, what + [label for label, *_ in fields if label not in what], rows, fields,
                              (a_steps[:i + 1], b_steps[:i + 1]), (a_requests, b_requests), labels)
    return None
