"""The grading subprocess. Started by judge.runner as `python -I -B -u -c ...`; never run it by hand.

It reads its configuration (with a per-run secret key) from stdin, then reports on a private pipe whose
messages are signed with that key: the learner's prints (stdout/stderr go elsewhere), exits and crashes can
therefore never produce a passing result.
"""

from __future__ import annotations

import hashlib
import hmac
import importlib
import json
import os
import random
import sys


def _sender(key: bytes, fd: int):
    def send(msg: dict) -> None:
        body = json.dumps(msg, default=str)
        mac = hmac.new(key, body.encode(), hashlib.sha256).hexdigest()
        data = f"{mac} {body}\n".encode()
        while data:
            data = data[os.write(fd, data):]

    return send


def _set_limits(memory_mb: int | None) -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # a segfault must not write a core file
    if memory_mb:
        limit = int(memory_mb) << 20
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        if hard != resource.RLIM_INFINITY:
            limit = min(limit, hard)
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


def main() -> None:
    cfg = json.loads(sys.stdin.readline())
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    # Move the channel to an unremarkable descriptor number and forget the original.
    fd = os.dup2(cfg["fd"], random.randint(300, 900))
    os.close(cfg["fd"])
    os.set_inheritable(fd, False)
    send = _sender(bytes.fromhex(cfg.pop("key")), fd)
    del fd
    _set_limits(cfg.get("memory_mb"))

    from judge import harness
    from judge.loader import SetupError, check_api, load_file
    from judge.registry import get_exercise

    ex = get_exercise(cfg["exercise"])
    harness._STATE["options"] = dict(cfg.get("options") or {})
    harness._STATE["memory_mb"] = cfg.get("memory_mb")
    try:
        tests = importlib.import_module(ex.tests)
        cases = list(tests.CASES)
    except Exception as exc:  # noqa: BLE001 - a judge bug, not the learner's
        send({"t": "fatal", "kind": "judge", "message": f"the hidden tests {ex.tests} failed to load: "
              f"{type(exc).__name__}: {exc}"})
        os._exit(3)
    wanted = cfg.get("cases")
    if wanted is not None:
        cases = [c for c in cases if harness.selected(c.name, wanted, [d.name for d in cases])]
    send({"t": "cases", "names": [c.name for c in cases],
          "timeouts": {c.name: c.timeout for c in cases if c.timeout is not None}})

    try:
        if cfg.get("impl_module"):
            impl = importlib.import_module(cfg["impl_module"])
        else:
            impl = load_file(cfg["impl"])
        harness._STATE["learner_file"] = getattr(impl, "__file__", None)
        check_api(impl, ex, cfg.get("display") or getattr(impl, "__file__", "your module"))
    except SetupError as err:
        send({"t": "fatal", "kind": err.kind, "message": err.message})
        os._exit(0)
    except Exception as exc:  # noqa: BLE001
        send({"t": "fatal", "kind": "import", "message": f"{type(exc).__name__}: {exc}"})
        os._exit(0)

    for c in cases:
        send({"t": "start", "case": c.name})
        out = harness.run_case(c, impl)
        send({"t": "result", "case": c.name, "passed": out.passed, "seconds": out.seconds,
              "verdict": out.verdict, "message": out.message, "details": out.details})
    send({"t": "done"})
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(0)  # learner threads must not keep the process alive


if __name__ == "__main__":
    main()
