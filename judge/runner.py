"""Grading in a sandboxed subprocess (and, for function objects, in-process).

One subprocess runs all cases of an exercise (torch is imported once). It gets a clean environment, a fresh
temporary working directory, an address-space limit (RLIMIT_AS), no core dumps, a time limit per case, and an
output limit; its results travel on a private pipe as HMAC-signed messages. If it dies or hangs in a case, that
case gets the verdict (timeout, crash with signal, memory limit, exit, output flood) and a fresh process runs
the remaining cases (at most `max_restarts` times). This guards against accidents, not against a learner who
deliberately digs the key out of the grading process's memory.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

from .registry import ROOT, Exercise, get_exercise
from .report import CaseResult, Report

STARTUP_TIMEOUT = 120.0  # seconds for the grading process to import torch and the hidden tests
OUTPUT_LIMIT = 1_000_000  # bytes of learner output before the process is stopped
KEEP_OUTPUT = 1500  # bytes kept from the start and from the end of the learner's output

_BOOT = "import sys; sys.path.insert(0, sys.argv[1]); from judge._worker import main; main()"


@dataclass
class _Attempt:
    names: list[str] | None = None  # all case names, once the worker has announced them
    timeouts: dict[str, float] = field(default_factory=dict)
    results: list[CaseResult] = field(default_factory=list)
    fatal: str | None = None
    fatal_kind: str | None = None
    done: bool = False
    current: str | None = None  # the case running when the process stopped
    abnormal: CaseResult | None = None  # the verdict for `current` if the process stopped abnormally
    imported: bool = False  # the learner's module was imported (a case started)
    forged: int = 0


class _Output:
    def __init__(self) -> None:
        self.head, self.tail, self.total = bytearray(), bytearray(), 0

    def add(self, data: bytes) -> None:
        self.total += len(data)
        room = KEEP_OUTPUT - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail = (self.tail + data)[-KEEP_OUTPUT:]

    def text(self) -> str:
        head = self.head.decode("utf-8", "replace")
        if not self.tail:
            return head
        skipped = self.total - len(self.head) - len(self.tail)
        middle = f"\n[... {skipped} bytes not shown ...]\n" if skipped > 0 else ""
        return head + middle + self.tail.decode("utf-8", "replace")


def _clean_env(tmp: str, options: dict[str, Any]) -> dict[str, str]:
    env = {
        "PATH": os.environ.get("PATH", os.defpath), "HOME": tmp, "TMPDIR": tmp, "LANG": "C.UTF-8",
        "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1",
        "CUDA_VISIBLE_DEVICES": "", "MINI_LLM_DEVICE": "cpu", "TOKENIZERS_PARALLELISM": "false",
    }
    # One thread: the cases are small, and a busy 2-core machine makes more threads much slower.
    env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = "1"
    return env


def _signal_name(num: int) -> str:
    try:
        name = signal.Signals(num).name
    except ValueError:
        return f"signal {num}"
    extra = {"SIGSEGV": " (segmentation fault)", "SIGABRT": " (abort)", "SIGBUS": " (bus error)",
             "SIGFPE": " (arithmetic error)", "SIGILL": " (illegal instruction)"}.get(name, "")
    return name + extra


def _run_worker(ex: Exercise, target: dict[str, Any], case_names: list[str] | None, time_limit: float | None,
                memory_mb: int | None, options: dict[str, Any], output: _Output,
                output_limit: int) -> _Attempt:
    att = _Attempt()
    key = secrets.token_bytes(32)
    r, w = os.pipe()
    tmp = tempfile.mkdtemp(prefix="judge-")
    cfg = {"key": key.hex(), "fd": w, "exercise": ex.id, "cases": case_names, "options": options,
           "memory_mb": memory_mb, **target}
    proc = subprocess.Popen(
        [sys.executable, "-I", "-B", "-u", "-c", _BOOT, str(ROOT)], stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, pass_fds=(w,), cwd=tmp, env=_clean_env(tmp, options),
        start_new_session=True,
    )
    os.close(w)
    status: int | None = None
    rusage = None
    sel = selectors.DefaultSelector()
    try:
        try:
            proc.stdin.write((json.dumps(cfg) + "\n").encode())
            proc.stdin.close()
        except BrokenPipeError:
            pass
        out_fd = proc.stdout.fileno()
        os.set_blocking(r, False)
        os.set_blocking(out_fd, False)
        sel.register(r, selectors.EVENT_READ, "channel")
        sel.register(out_fd, selectors.EVENT_READ, "output")
        buf = b""
        started = time.monotonic()
        deadline = started + STARTUP_TIMEOUT
        phase_limit = STARTUP_TIMEOUT
        open_fds = 2

        def handle(msg: dict) -> None:
            nonlocal deadline, phase_limit
            t = msg.get("t")
            now = time.monotonic()
            if t == "cases":
                att.names = list(msg["names"])
                att.timeouts = dict(msg.get("timeouts") or {})
                phase_limit = time_limit or ex.case_timeout  # importing the learner's module
                deadline = now + phase_limit
                att.current = None
            elif t == "start":
                att.imported = True
                att.current = msg["case"]
                phase_limit = time_limit or att.timeouts.get(att.current) or ex.case_timeout
                deadline = now + phase_limit
            elif t == "result":
                att.results.append(CaseResult(msg["case"], bool(msg["passed"]), float(msg["seconds"]),
                                              msg["verdict"], msg["message"], msg.get("details") or {}))
                att.current = None
            elif t == "fatal":
                att.fatal, att.fatal_kind = msg["message"], msg["kind"]
            elif t == "done":
                att.done = True

        def read_channel() -> bool:
            nonlocal buf
            try:
                data = os.read(r, 65536)
            except BlockingIOError:
                return True
            if not data:
                return False
            buf += data
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                mac, _, body = line.partition(b" ")
                good = hmac.new(key, body, hashlib.sha256).hexdigest().encode()
                if not hmac.compare_digest(mac, good):
                    att.forged += 1
                    continue
                try:
                    handle(json.loads(body))
                except (ValueError, KeyError, TypeError):
                    att.forged += 1
            return True

        stop_reason: CaseResult | None = None
        while True:
            if status is None:
                pid, st, ru = os.wait4(proc.pid, os.WNOHANG)
                if pid:
                    status, rusage = st, ru
            timeout = max(0.0, min(deadline - time.monotonic(), 0.05 if status is None else 0.0))
            events = sel.select(timeout) if open_fds else []
            for sk, _ in events:
                if sk.data == "channel":
                    if not read_channel():
                        sel.unregister(r)
                        open_fds -= 1
                else:
                    try:
                        data = os.read(out_fd, 65536)
                    except BlockingIOError:
                        continue
                    if not data:
                        sel.unregister(out_fd)
                        open_fds -= 1
                    else:
                        output.add(data)
            if att.done or att.fatal:
                break
            if status is not None and not events:
                break  # exited and everything it wrote has been read
            if output.total > output_limit and stop_reason is None:
                stop_reason = CaseResult(att.current or "(import)", False, 0.0, "output",
                                         f"output limit exceeded: your code printed more than {output_limit} bytes"
                                         " (remove the prints in loops)")
                break
            if time.monotonic() > deadline and status is None:
                what = f"no result after {phase_limit:g}s"
                if att.names is None:
                    msg = f"the grading process did not start within {phase_limit:g}s"
                elif att.current is None:
                    msg = f"time limit exceeded while importing your module ({what}): code at module level loops?"
                else:
                    msg = f"time limit exceeded: {what} (an infinite loop? a very slow implementation?)"
                stop_reason = CaseResult(att.current or "(import)", False, phase_limit, "timeout", msg)
                break
    finally:
        if status is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            _, status, rusage = os.wait4(proc.pid, 0)
        else:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # leftovers the learner may have started
            except (ProcessLookupError, PermissionError):
                pass
        proc.returncode = os.waitstatus_to_exitcode(status)
        sel.close()
        os.close(r)
        proc.stdout.close()
        _rmtree(tmp)
    if att.done or att.fatal:
        return att
    if stop_reason is not None:
        att.abnormal = stop_reason
        return att
    # The process ended without finishing: say how.
    rc = proc.returncode
    maxrss_mb = (rusage.ru_maxrss / 1024) if rusage else 0
    where = f"during case {att.current!r}" if att.current else ("while importing your module" if att.names
                                                               else "before the tests started")
    if rc < 0:
        sig = -rc
        if memory_mb and maxrss_mb > 0.8 * memory_mb or (sig == signal.SIGKILL):
            verdict, msg = "memory", (f"killed by {_signal_name(sig)} {where}; it used {maxrss_mb:.0f} MB: "
                                      f"memory limit ({memory_mb} MB) exceeded?")
        else:
            verdict, msg = "crash", f"the grading process crashed with {_signal_name(sig)} {where}"
    elif rc == 0:
        verdict, msg = "exit", (f"the grading process exited (code 0) {where}: your code must return its result, "
                                "not call os._exit() or sys.exit()")
    else:
        verdict, msg = "exit", f"the grading process exited with code {rc} {where} (os._exit()? a crash in C code?)"
    att.abnormal = CaseResult(att.current or "(import)", False, 0.0, verdict, msg)
    return att


def _rmtree(path: str) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)


def _target_for(ex: Exercise, impl: Any, source: str | None, reference: bool) -> tuple[dict[str, Any], str, Any]:
    """(worker target, display name, temp dir to delete or None)."""
    if reference:
        return {"impl_module": ex.reference, "display": ex.reference}, f"{ex.reference} (reference)", None
    if source is not None:
        tmp = tempfile.mkdtemp(prefix="judge-src-")
        path = Path(tmp) / Path(ex.practice_file).name
        path.write_text(source)
        return {"impl": str(path), "display": "your code"}, "your code (source text)", tmp
    if impl is None:
        path = ex.practice_path
    elif isinstance(impl, ModuleType):
        if not getattr(impl, "__file__", None):
            raise TypeError("a module without a file cannot be graded in a subprocess; pass its functions")
        path = Path(impl.__file__)
    else:
        text = str(impl)
        if not text.endswith(".py") and "/" not in text and not Path(text).exists():
            import importlib.util

            try:
                found = importlib.util.find_spec(text) is not None
            except (ImportError, ValueError):
                found = False
            if found:  # a dotted module name, e.g. "solutions.batch"
                return {"impl_module": text, "display": text}, text, None
        path = Path(impl)
    path = path.resolve()
    try:
        display = str(path.relative_to(Path.cwd()))
    except ValueError:
        display = str(path)
    return {"impl": str(path), "display": display}, display, None


def grade(exercise: int | str | Exercise, impl: Any = None, *, source: str | None = None, reference: bool = False,
          time_limit: float | None = None, memory_limit_mb: int | None = None, cases: list[str] | None = None,
          options: dict[str, Any] | None = None, output_limit: int = OUTPUT_LIMIT,
          max_restarts: int = 2) -> Report:
    """Grade one exercise and return a Report (never raises for learner misbehaviour).

    impl: None (the learner's practice file), a path, a dotted module name, a module with a __file__, or a function / namespace /
    class (then the cases run in this process, without the sandbox: see `grade_inprocess`).
    source: the learner's code as text (graded from a temporary file).
    reference: grade the reference solution instead.
    time_limit: seconds per case (and for importing the learner's module), overriding the exercise's.
    cases: only these cases (exact names, or else case-insensitive parts of names).
    """
    ex = get_exercise(exercise)
    if impl is not None and not isinstance(impl, (str, os.PathLike, ModuleType)):
        return grade_inprocess(ex, impl, cases=cases, options=options)
    t0 = time.monotonic()
    target, display, tmp = _target_for(ex, impl, source, reference)
    report = Report(ex.id, ex.slug, ex.title, display)
    memory_mb = ex.memory_limit_mb if memory_limit_mb is None else memory_limit_mb
    options = dict(options or {})
    output = _Output()
    try:
        if "impl" in target and not Path(target["impl"]).is_file():
            report.fatal = f"{display} does not exist (exercise {ex.id} is edited in {ex.practice_file})"
            return report
        names: list[str] | None = cases
        all_names: list[str] | None = None
        results: dict[str, CaseResult] = {}
        restarts = 0
        while True:
            att = _run_worker(ex, target, names, time_limit, memory_mb, options, output, output_limit)
            if att.forged:
                report.notes.append(f"{att.forged} unsigned message(s) on the result channel were ignored")
            if att.names is not None and all_names is None:
                all_names = att.names
            for r in att.results:
                results[r.name] = r
            if att.fatal:
                report.fatal = att.fatal
                break
            if att.done or att.abnormal is None:
                break
            ab = att.abnormal
            if all_names is None:  # never got going
                report.fatal = ab.message
                break
            if att.current is None:  # while importing the learner's module: every case would do the same
                report.fatal = ab.message
                break
            results[ab.name] = ab
            left = [n for n in all_names if n not in results]
            if not left:
                break
            if restarts >= max_restarts:
                for n in left:
                    results[n] = CaseResult(n, False, 0.0, "not run",
                                            f"not run: the grading process stopped abnormally {restarts + 1} times")
                break
            restarts += 1
            names = left
        if all_names == [] and cases and not report.fatal:
            report.fatal = f"no case of exercise {ex.id} matches {cases}"
        if all_names is not None:
            fatal_msg = "not run: see above" if report.fatal else "not run"
            report.results = [results.get(n) or CaseResult(n, False, 0.0, "not run", fatal_msg) for n in all_names]
        report.output, report.output_bytes = output.text(), output.total
        return report
    finally:
        report.seconds = time.monotonic() - t0
        if tmp:
            _rmtree(tmp)


def grade_inprocess(exercise: int | str | Exercise, impl: Any, *, cases: list[str] | None = None,
                    options: dict[str, Any] | None = None) -> Report:
    """Run the cases in this process on `impl`: a module, a namespace, or (for one-function exercises) the
    function itself. No sandbox: no time limit and no isolation (for notebooks, whose kernel is the sandbox)."""
    import importlib

    from . import harness
    from .loader import SetupError, check_api

    ex = get_exercise(exercise)
    t0 = time.monotonic()
    if callable(impl) and not isinstance(impl, (ModuleType, SimpleNamespace)) and len(ex.api) == 1 \
            and not any(hasattr(impl, n) for n in ex.api):
        impl = SimpleNamespace(**{next(iter(ex.api)): impl})  # graded under the expected name
    display = getattr(impl, "__name__", None) or type(impl).__name__
    report = Report(ex.id, ex.slug, ex.title, f"{display} (in this process)")
    saved = dict(harness._STATE)
    try:
        tests = importlib.import_module(ex.tests)
        selected = [c for c in tests.CASES if cases is None or harness.selected(c.name, cases, tests.CASES.names())]
        try:
            check_api(impl, ex, "your code")
        except SetupError as err:
            report.fatal = err.message
            report.results = [CaseResult(c.name, False, 0.0, "not run", "not run: see above") for c in selected]
            return report
        first = getattr(impl, next(iter(ex.api)), None) if ex.api else None
        code = getattr(first, "__code__", None)
        harness._STATE.update(learner_file=code.co_filename if code else None, options=dict(options or {}))
        for c in selected:
            out = harness.run_case(c, impl)
            report.results.append(CaseResult(out.name, out.passed, out.seconds, out.verdict, out.message,
                                             out.details))
        return report
    finally:
        harness._STATE.clear()
        harness._STATE.update(saved)
        report.seconds = time.monotonic() - t0


def check(exercise: int | str | Exercise, impl: Any = None, **kwargs: Any) -> None:
    """Grade and raise AssertionError with the readable report unless every case passes (for nbgrader cells)."""
    report = grade(exercise, impl, **kwargs)
    if not report.ok:
        raise AssertionError("\n" + report.text())
