"""The graded process, started by judge/worker_handle.py (under bubblewrap when grading a class). It holds the
learner's module and nothing secret, and answers each request (call this function of a public driver,
judge/drivers/) with plain data: the grader computes every verdict from that."""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import resource
import sys
from contextlib import suppress
from typing import Any, Callable

import judge
from judge import harness, wire
from judge.crossing import learner_error
from judge.loader import SetupError, check_api, load_file
from judge.practice_finder import PracticeFinder
from judge.registry import get_exercise


def _cannot_grade(exc: Exception) -> dict:
    return {"ok": False, "error": {"type": "TypeError", "module": "builtins",
                                   "message": f"your code returned a value that cannot be graded: {exc}"}}


def _set_limits(memory_mb: int | None) -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # a segfault must not write a core file
    if memory_mb:
        limit = int(memory_mb) << 20
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        if hard != resource.RLIM_INFINITY:
            limit = min(limit, hard)
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


class Worker:
    def __init__(self, cfg: dict, send: Callable[[dict], None], read: Callable[[], bytes]) -> None:
        self.cfg, self.send, self.read = cfg, send, read  # read(): the next request line, b"" at the end
        self.module: Any = None
        self.learner_file: str | None = None

    def load(self) -> None:
        ex = get_exercise(self.cfg["exercise"])
        try:
            if self.cfg.get("impl_module"):
                self.module = importlib.import_module(self.cfg["impl_module"])
            else:
                self.module = load_file(self.cfg["impl"], ex, self.cfg.get("display"))
            self.learner_file = getattr(self.module, "__file__", None)
            check_api(self.module, ex, self.cfg.get("display") or "your module")
        except SetupError as err:
            self.send({"t": "fatal", "kind": err.kind, "message": err.message})
        except Exception as exc:  # noqa: BLE001
            self.send({"t": "fatal", "kind": "import", "message": f"{type(exc).__name__}: {exc}"})
        else:
            self.send({"t": "ready"})

    def handle(self, req: dict) -> dict:
        """Answer one request: {"op": "call", "driver": name, "attr": function, "args": [...], "kwargs": {...}}."""
        driver, fn = req.get("driver"), req.get("attr")
        if req.get("op") != "call" or not isinstance(driver, str) or not driver.isidentifier() or \
                not isinstance(fn, str) or fn.startswith("_"):
            return {"ok": False, "error": {"type": "ProtocolError", "module": "judge",
                                           "message": f"not a driver call: {str(req)[:200]}"}}
        try:
            f = getattr(importlib.import_module(f"judge.drivers.{driver}"), fn)
            args = [wire.decode(a) for a in req.get("args", [])]
            kwargs = {str(k): wire.decode(v) for k, v in (req.get("kwargs") or {}).items()}
            value = f(self.module, *args, **kwargs)  # a driver gets the learner's module first
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # noqa: BLE001 - SystemExit and MemoryError too: the grader classifies them
            return {"ok": False, "error": learner_error(exc, self.learner_file)}
        try:
            return {"ok": True, "value": wire.encode(value)}
        except Exception as exc:  # noqa: BLE001 - not plain data (a learner object the driver let through)
            return _cannot_grade(exc)

    def serve(self) -> None:
        """Answer the grader's requests until it closes the pipe (a line that is not JSON is skipped)."""
        for line in iter(self.read, b""):
            try:
                req = json.loads(line)
            except ValueError:
                continue
            self.answer(req)

    def answer(self, req: dict) -> None:
        reply = self.handle(req)
        reply.update(t="reply", id=req.get("id"))
        try:
            self.send(reply)
        except (TypeError, ValueError) as exc:  # a value the encoder refused
            self.send({**_cannot_grade(exc), "t": "reply", "id": req.get("id")})


def main() -> None:
    req_fd, rep_fd = int(sys.argv[-2]), int(sys.argv[-1])
    requests = os.fdopen(req_fd, "rb")
    cfg = json.loads(requests.readline())

    def send(msg: dict) -> None:
        data = wire.dumps(msg)
        while data:
            data = data[os.write(rep_fd, data):]

    _set_limits(cfg.get("memory_mb"))
    sys.meta_path.append(PracticeFinder(os.path.dirname(os.path.dirname(os.path.abspath(judge.__file__)))))
    with suppress(ImportError):  # the course's dependency, loaded before the learner's code: the import limit is theirs
        import torch  # noqa: F401
    send({"t": "hello"})  # nothing of the learner's has run yet

    worker = Worker(cfg, send, requests.readline)
    ctx = harness.Context(options=cfg.get("options") or {}, memory_mb=cfg.get("memory_mb"))
    with harness.grading(ctx):
        worker.load()
    try:
        with harness.grading(dataclasses.replace(ctx, learner_file=worker.learner_file)):
            worker.serve()
    finally:
        with suppress(BaseException):  # the learner's code may have replaced or closed them
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(0)  # learner threads must not keep the process alive


if __name__ == "__main__":
    main()
