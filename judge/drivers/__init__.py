"""What the public drivers (judge/drivers/<module>.py, shipped to students) share: each function of a driver takes
the learner's module first, then plain arguments, and returns plain data (what the learner's objects did), holding
no expected value. The parts the learner's code calls but does not write run in the grader: under 129 and 131 the
grader answers their calls one at a time, from what the references did (judge/drivers/scripted.py); under the
engines (130, 133) as hosts (`register_host`), which the stand-ins (judge/drivers/stand_ins.py) reach with
`host_call`. An object a driver's later calls reuse is kept in its process under a name the grader chooses (`keep`,
`kept`)."""

from __future__ import annotations

import functools
from typing import Any, Callable

from judge.crossing import known_class
from judge.practice_finder import PracticeFinder
from judge.harness import option


@functools.lru_cache(maxsize=2)
def _model_at(path: str):
    import torch

    from mini_llm import load_transformer

    return load_transformer(path, dtype=torch.float32, device="cpu")


def load_model(path: str | None = None):
    """The checkpoint at `path`, else the one given with --model, else the embedded model: fp32 on the CPU (the
    worker has no GPU), loaded once per process. The one loader of the judge, grader and worker alike."""
    from mini_llm.settings import EMBEDDED_MODEL

    return _model_at(str(path or option("model") or EMBEDDED_MODEL))


_kept: dict[str, Any] = {}  # name -> the object a driver keeps in this process (one per name)


def keep(name: str, obj: Any) -> Any:
    """Keep `obj` under `name` for the driver's next calls (dropping what that name held before); returns it."""
    _kept[name] = obj
    return obj


def kept(name: str) -> Any:
    """The object kept under `name`; LookupError if none is (the grader asked for one it never made)."""
    try:
        return _kept[name]
    except (KeyError, TypeError):
        raise LookupError(f"no object kept under the name {str(name)[:40]!r}") from None


# ---------------------------------------------------------------------------------------------------------------
# Callbacks: the stand-ins in the worker calling the parts the grader runs


def forget() -> None:
    """Drop the kept objects and the practice modules lent for missing references (after each submission)."""
    _kept.clear()
    PracticeFinder.withdraw()


OPENER = 0  # the host that makes the others (judge/drivers/hosts.py, Opener), for the drivers that ask


def no_channel(host: int, name: str, args: list) -> dict:
    raise RuntimeError("no channel to the grader's parts: the worker sets its pipes'; in the grader's process, "
                       "importing judge.drivers.hosts sets its own")


# The stand-ins' way to the grader's parts: the worker's pipes (judge/worker_main.py), or in the grader's own process
# the hosts called directly (judge.drivers.hosts.in_process, set when that module is imported).
channel: Callable[[int, str, list], dict] = no_channel


def host_call(host: int, name: str, *args: Any) -> Any:
    """A stand-in's call of operation `name` of the grader's host `host` (`args`: JSON-able): its result as JSON,
    or the exception it raised, raised here (a builtin or framework.errors class of the same name, else
    RuntimeError)."""
    answer = channel(host, name, list(args))
    if "error" in answer:
        exc = _rebuilt(answer["error"])
        if answer["error"].get("relayed"):
            exc._judge_record = {k: v for k, v in answer["error"].items() if k != "relayed"}
        raise exc
    return answer.get("value")


def _rebuilt(err: Any) -> Exception:
    err = err if isinstance(err, dict) else {}
    name, message = str(err.get("type")), str(err.get("message", ""))
    cls = known_class(str(err.get("module")), name)
    if cls is not None and issubclass(cls, Exception):
        try:
            return cls(message)
        except Exception:  # noqa: BLE001 - a class with another constructor
            pass
    return RuntimeError(f"{name}: {message}")
