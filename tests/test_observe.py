"""framework/observe.py: the one hook on a scheduler's `schedule` that the server's metrics and the step tracer
share. Observers see every step's SchedulerOutput in order; the last one to detach leaves the class's method."""

from __future__ import annotations

import torch

from course.serve import Metrics, ServerState, StepObserver
from framework.observe import ObservedSchedule, observe_schedule
from framework.sampling import SamplingParams
from framework.trace import StepTracer
from solutions.engine import LLM


class Log:
    def __init__(self, name: str, log: list) -> None:
        self.name, self.log = name, log

    def before_schedule(self) -> None:
        self.log.append((self.name, "before"))

    def after_schedule(self, out) -> None:
        self.log.append((self.name, out.num_scheduled_tokens))


def test_observers_share_one_hook_and_the_last_to_leave_restores_the_method():
    llm = LLM(dtype=torch.float32, num_blocks=32)
    scheduler = llm.engine.scheduler
    assert "schedule" not in vars(scheduler)  # nobody observes: the class's own method, no wrapper
    log: list = []
    detach_a = observe_schedule(scheduler, Log("a", log))
    detach_b = observe_schedule(scheduler, Log("b", log))
    assert isinstance(vars(scheduler)["schedule"], ObservedSchedule) and len(scheduler.schedule.observers) == 2
    prompt = llm.tokenizer.encode("Once upon a time")
    llm.engine.generate([prompt], SamplingParams(max_tokens=3))
    assert log[:4] == [("a", "before"), ("b", "before"), ("a", len(prompt)), ("b", len(prompt))]
    assert [x for name, x in log if name == "a" and x != "before"] == [len(prompt), 1, 1]
    detach_a()
    assert scheduler.schedule.observers[0].name == "b"
    detach_b()
    assert "schedule" not in vars(scheduler)


def test_the_metrics_and_the_tracer_observe_the_same_steps():
    llm = LLM(dtype=torch.float32, num_blocks=32)
    state = ServerState(llm, None, "tiny-qwen3", 8)
    metrics = Metrics(state)
    observer, tracer = StepObserver(llm.engine, metrics), StepTracer(llm.engine)
    prompts = [llm.tokenizer.encode(p) for p in ("Once upon a time", "The little dog ran")]
    llm.engine.generate(prompts, SamplingParams(max_tokens=4))
    steps = [s.tokens_scheduled for s in tracer.steps]

    def sample(name: str) -> float:
        return metrics.registry.get_sample_value("mini_llm:" + name, {"model_name": "tiny-qwen3"})

    assert sample("iteration_tokens_total_sum") == sum(steps) == sum(map(len, prompts)) + 2 * 3
    assert sample("iteration_tokens_total_count") == len(steps)
    assert sample("prompt_tokens_total") == sum(map(len, prompts)) and len(observer.first_scheduled) == 2
    tracer.close()
    assert len(scheduler_observers(llm)) == 1
    observer.detach()
    assert "schedule" not in vars(llm.engine.scheduler)


def scheduler_observers(llm) -> list:
    return vars(llm.engine.scheduler)["schedule"].observers
