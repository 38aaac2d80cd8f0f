"""The grader's handle on one worker (judge/worker_main.py), every wait bounded (judge/README.md, "How the sandbox
works"). A violation, a timeout, a death, too much output or the memory budget stop the worker and set `lost`
(verdict, message): the runner gives that verdict to the case, and a violation or the budget ends the submission."""

from __future__ import annotations

import math
import os
import selectors
import signal
import subprocess
import time
from contextlib import suppress
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

from . import crossing, sandbox, wire
from .registry import Exercise
from .remote import Session
from .wire import WorkerLost

STARTUP_TIMEOUT = 120.0  # seconds for the worker to start Python and import the course (none of the learner's code)
OUTPUT_LIMIT = 1_000_000  # bytes of learner output before the worker is stopped
KEEP_OUTPUT = 1500  # bytes kept from the start and from the end of the learner's output
GRADER_MEMORY_MB = 768  # growth of the grader's resident memory one submission may cause
ENDS_SUBMISSION = ("protocol", "grader memory")  # verdicts after which the submission's other cases are not run
WALL_FACTOR = 4  # a case's wall-clock bound, in multiples of its CPU limit (a loop that sleeps or blocks uses none)
MAX_LOAD = 8.0  # the most the load per core stretches that bound: code that floods the machine cannot stretch it more
_POLL = 0.05  # seconds between checks of the deadline and of the process while nothing arrives
_PAGE = os.sysconf("SC_PAGE_SIZE")
_TICK = os.sysconf("SC_CLK_TCK")


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


@lru_cache(maxsize=1)
def _statm(pid: int) -> int:
    """A descriptor of /proc/self/statm, opened once (it is read at every message); a forked grader opens its own."""
    return os.open("/proc/self/statm", os.O_RDONLY | os.O_CLOEXEC)


def resident_bytes() -> int | None:
    """This process's resident memory now (None where /proc is not there)."""
    try:
        return int(os.pread(_statm(os.getpid()), 100, 0).split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return None


def memory_ceiling() -> int | None:
    """The resident memory past which the submission starting now has exceeded its budget."""
    now = resident_bytes()
    return None if now is None else now + (GRADER_MEMORY_MB << 20)


def cpu_seconds(pid: int) -> float:
    """CPU time (user and system) used so far by process `pid` and its descendants, those still running and those
    already waited for (bubblewrap, then the worker under it); 0 where /proc is not there."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/stat", "rb") as f:
                fields = f.read().rpartition(b")")[2].split()
            total += sum(int(x) for x in fields[11:15])  # utime, stime, cutime, cstime, in clock ticks
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children", "rb") as f:
                    todo += [int(c) for c in f.read().split()]
        except (OSError, ValueError):
            continue  # it ended meanwhile (its time is then in its parent's cutime once waited for)
    return total / _TICK


def _signal_name(num: int) -> str:
    try:
        name = signal.Signals(num).name
    except ValueError:
        return f"signal {num}"
    extra = {"SIGSEGV": " (segmentation fault)", "SIGABRT": " (abort)", "SIGBUS": " (bus error)",
             "SIGFPE": " (arithmetic error)", "SIGILL": " (illegal instruction)"}.get(name, "")
    return name + extra


class WorkerHandle(Session):
    """One worker: started, asked, and stopped by the grader. `lost` says why it stopped, if it did."""

    limit = STARTUP_TIMEOUT

    def __init__(self, ex: Exercise, target: dict[str, Any], isolated: bool, memory_mb: int | None,
                 options: dict[str, Any], output: _Output, output_limit: int, ceiling: int | None = None) -> None:
        self.args = (ex, target, isolated, memory_mb, options, output, output_limit, ceiling)
        self.output, self.output_limit, self.memory_mb, self.ceiling = output, output_limit, memory_mb, ceiling
        self.output_start = output.total  # the limit is per worker, hence per case
        self.wall, self.waited = STARTUP_TIMEOUT, 0.0  # seconds the grader may wait for the worker, and has waited
        self.cap = math.inf  # the submission's time cap (time.monotonic())
        self.load = 1.0
        self.cpu_deadline: float | None = None  # the worker's CPU time at which the import or the case times out
        self.cpu_checked = 0.0
        self.phase = "start"  # start (until "hello") | import (until "ready") | case
        self.lost: tuple[str, str] | None = None  # (verdict, message)
        self.status: int | None = None
        self.rusage = None
        self.buf = bytearray()
        self.next_id = 0
        self.pending: dict[int, dict | None] = {}  # ids sent -> their reply, None while not there
        self.tmp = sandbox.private_tmp("worker")
        try:
            self._start(ex, target, isolated, memory_mb, options)
        except BaseException:  # a SIGTERM to the grader (KeyboardInterrupt) while it starts: leave nothing behind
            proc = getattr(self, "proc", None)  # the worker, if it began
            if proc is not None:
                with suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            sandbox.remove_tmp(self.tmp)
            raise

    def _start(self, ex: Exercise, target: dict[str, Any], isolated: bool, memory_mb: int | None,
               options: dict[str, Any]) -> None:
        req_r, self.req_w = os.pipe()
        self.rep_r, rep_w = os.pipe()
        submission = Path(target["impl"]) if target.get("impl") else None
        extra = [p for p in (options.get("model"),) if p and os.path.exists(p)]
        argv, inner, args_fd = sandbox.command(ex, isolated, submission, extra, (req_r, rep_w))
        cfg = {"exercise": ex.id, "options": options, "memory_mb": memory_mb, "display": target.get("display"),
               "impl_module": target.get("impl_module"), "impl": inner}
        passed = (req_r, rep_w) if args_fd is None else (req_r, rep_w, args_fd)
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     pass_fds=passed, cwd=self.tmp, env=sandbox.worker_env(self.tmp),
                                     start_new_session=True)
        for fd in passed:
            os.close(fd)
        self.out_fd = self.proc.stdout.fileno()
        for fd in (self.rep_r, self.out_fd, self.req_w):
            os.set_blocking(fd, False)
        self.sel = selectors.DefaultSelector()
        self.sel.register(self.rep_r, selectors.EVENT_READ, "reply")
        self.sel.register(self.out_fd, selectors.EVENT_READ, "output")
        self._write(cfg)

    # -- the protocol

    def request(self, msg: dict) -> dict:
        """Send one request and return its reply (plain data); WorkerLost if the worker is gone."""
        return self.send(msg)()

    def send(self, msg: dict) -> Callable[[], dict]:
        """Send one request now; the function returned waits for its reply (the grader works meanwhile)."""
        if self.lost:
            raise WorkerLost(self.lost[1])
        self.next_id += 1
        wanted = self.next_id
        self.pending[wanted] = None
        self._write({**msg, "id": wanted})

        def reply() -> dict:
            while self.pending.get(wanted) is None:
                self._take_reply()
            return self.pending.pop(wanted)

        return reply

    def _take_reply(self) -> None:
        msg = self._read_message()
        rid = msg.get("id")
        awaited = type(rid) is int and rid in self.pending and self.pending[rid] is None
        if msg.get("t") != "reply" or not awaited:
            raise self.violation(f"a message the grader did not ask for ({_describe(msg)})")
        if not isinstance(msg.get("ok"), bool):
            raise self.violation("a reply without ok: true or false")
        if not msg["ok"]:
            if not isinstance(msg.get("error"), dict):
                raise self.violation("a failed reply without an error record")
            msg["error"] = crossing.received_error(msg["error"])
        self.pending[rid] = msg

    def ready(self, import_limit: float, cap: float = math.inf) -> "WorkerHandle":
        """This worker once the learner's module is imported (within `import_limit` seconds of the worker's own
        start-up), in its case phase; WorkerLost, with the reason, if the module does not load or it is lost."""
        if self.phase == "start":
            self.cap = min(self.cap, cap)
            msg = self._read_message()
            if msg.get("t") != "hello":
                raise self.violation(f"a message before the grading process had started ({_describe(msg)})")
            self.phase = "import"
            self.set_deadline(import_limit, cap)
        msg = self._read_message()
        if msg.get("t") not in ("ready", "fatal"):
            raise self.violation(f"a message while your module was being imported ({_describe(msg)})")
        if msg["t"] == "fatal":
            self.close()
            raise WorkerLost(wire.cut(msg.get("message")))
        self.phase = "case"
        return self

    def violation(self, what: str) -> WorkerLost:
        """Stop the worker for breaking the protocol; the exception to raise."""
        if not self.lost:
            self._stop("protocol", f"the process running your code broke the judge's protocol: {what}. Your code "
                                   "wrote on the judge's descriptors? (the rest of this submission is not run)")
        return WorkerLost(self.lost[1])

    def set_deadline(self, seconds: float, cap: float = math.inf) -> None:
        """From now on: at most `seconds` of the worker's CPU time, and of waiting for it WALL_FACTOR times that,
        times the machine's load per core up to MAX_LOAD (never past `cap`). Only the grader's waits count, not its
        own work in between, so that neither the grader nor a loaded machine counts against the learner; code that
        sleeps is still stopped."""
        self.limit, self.load = seconds, min(max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1)), MAX_LOAD)
        self.cpu_deadline = cpu_seconds(self.proc.pid) + seconds
        self.wall, self.waited, self.cap = WALL_FACTOR * seconds * self.load, 0.0, cap

    def _left(self) -> float:
        """Seconds the grader may still wait for the worker (0 or less: the deadline has passed)."""
        return min(self.wall - self.waited, self.cap - time.monotonic())

    def sibling(self) -> "WorkerHandle":
        """Another worker for the same code, ready (a fresh process: e.g. another hash seed)."""
        w = WorkerHandle(*self.args).ready(self.limit)
        w.set_deadline(self.limit)
        return w

    # -- bytes

    def _write(self, msg: dict) -> None:
        data = memoryview(wire.dumps(msg))
        while data:
            if self.lost:
                raise WorkerLost(self.lost[1])
            try:
                data = data[os.write(self.req_w, data):]
            except BlockingIOError:  # the worker is not reading: read what it writes meanwhile, up to the deadline
                self._pump(writing=True)
            except OSError:
                return  # it died: the next read says how

    def _read_message(self) -> dict:
        """The next message of the worker; WorkerLost when it dies, hangs past the deadline or floods output."""
        while True:
            if not self.lost and self._left() <= 0:
                self._stop("timeout", self._timeout_message())
            if self.lost:
                raise WorkerLost(self.lost[1])
            end = self.buf.find(b"\n")
            if end < 0:
                if len(self.buf) > wire.MAX_MESSAGE:
                    raise self.violation(f"a message longer than {wire.MAX_MESSAGE} bytes")
                self._pump()
                continue
            line = bytes(self.buf[:end])
            del self.buf[:end + 1]
            try:
                msg = wire.loads(line)
            except wire.WireError as err:
                raise self.violation(str(err)) from None
            except ValueError:  # not JSON: written by the learner's code on the reply pipe; skipped, in time
                continue
            self._check_memory()
            return msg

    def _check_memory(self) -> None:
        if self.ceiling is not None and (resident_bytes() or 0) > self.ceiling:
            self._stop("grader memory", f"what your code sent made the grader hold more than {GRADER_MEMORY_MB} MB "
                                        "(the budget of one submission): the rest of this submission is not run")
            raise WorkerLost(self.lost[1])

    def _pump(self, writing: bool = False) -> None:
        """Wait up to _POLL seconds for the worker and take what it wrote; stop it on the deadline, its death, too
        much output or too many unread bytes."""
        if self.status is None:
            pid, st, ru = os.wait4(self.proc.pid, os.WNOHANG)
            if pid:
                self.status, self.rusage = st, ru
        wait = self._left()  # past the deadline: only what has already arrived
        if writing:
            self.sel.register(self.req_w, selectors.EVENT_WRITE, "request")
        t0 = time.monotonic()
        try:
            events = self.sel.select(max(0.0, min(wait, _POLL if self.status is None else 0.0)))
        finally:
            self.waited += time.monotonic() - t0
            if writing:
                self.sel.unregister(self.req_w)
        got = False
        for key, _ in events:
            if key.data == "request":
                continue
            try:
                data = os.read(key.fd, 1 << 16)
            except BlockingIOError:
                continue
            got = True
            if not data:
                self.sel.unregister(key.fd)
            elif key.data == "reply":
                self.buf += data
            else:
                self.output.add(data)
        if self.output.total - self.output_start > self.output_limit:
            self._stop("output", f"output limit exceeded: your code printed more than {self.output_limit} bytes "
                                 "(remove the prints in loops)")
        elif len(self.buf) > 2 * wire.MAX_MESSAGE:
            self.violation(f"more than {2 * wire.MAX_MESSAGE} bytes the grader did not ask for")
        elif self.status is not None and not got:
            self._stop(*self._death())
        elif wait <= 0 and b"\n" not in self.buf:
            self._stop("timeout", self._timeout_message())
        elif self.cpu_deadline is not None and b"\n" not in self.buf and time.monotonic() >= self.cpu_checked + _POLL:
            self.cpu_checked = time.monotonic()
            if cpu_seconds(self.proc.pid) >= self.cpu_deadline:
                self._stop("timeout", self._timeout_message(cpu=True))

    def _timeout_message(self, cpu: bool = False) -> str:
        if self.phase == "start":
            return f"the grading process did not start within {STARTUP_TIMEOUT:g}s"
        if cpu:
            used = f"more than {self.limit:g}s of CPU time"
        else:
            spent = cpu_seconds(self.proc.pid) - (self.cpu_deadline or 0) + self.limit
            load = f" times {self.load:.1f}, this machine's load per core," if self.load > 1 else ","
            used = (f"no result after {min(self.wall, self.waited):.3g}s of wall-clock time (at most {WALL_FACTOR}x "
                    f"the limit of {self.limit:g}s of CPU time{load} or the submission's time left), of which it "
                    f"used {max(spent, 0):.1f}s")
        if self.phase == "import":
            return f"time limit exceeded while importing your module ({used}): code at module level loops or waits?"
        why = ("an infinite loop? a very slow implementation?" if cpu else
               "does your code sleep, wait or block? or is this machine very busy?")
        return f"time limit exceeded: {used} ({why})"

    def _death(self) -> tuple[str, str]:
        rc = os.waitstatus_to_exitcode(self.status)
        maxrss_mb = (self.rusage.ru_maxrss / 1024) if self.rusage else 0
        where = {"start": "before the tests started", "import": "while importing your module"}.get(
            self.phase, "during this case")
        if rc == 0:
            return "exit", (f"the process running your code exited (code 0) {where}: your code must return its "
                            "result, not call os._exit() or sys.exit()")
        # bubblewrap reports a signal of its child as 128 + signal (and its own memory use, not the child's)
        sig = -rc if rc < 0 else rc - 128 if 128 < rc < 128 + 65 else None
        if sig is None:
            return "exit", (f"the process running your code exited with code {rc} {where} (os._exit()? a crash in C "
                            "code?)")
        if sig == signal.SIGKILL or rc < 0 and self.memory_mb and maxrss_mb > 0.8 * self.memory_mb:
            used = f"; it used {maxrss_mb:.0f} MB" if rc < 0 else ""
            return "memory", (f"killed by {_signal_name(sig)} {where}{used}: memory limit ({self.memory_mb} MB) "
                              "exceeded, or your code killed its own process?")
        return "crash", f"the process running your code crashed with {_signal_name(sig)} {where}"

    def _stop(self, verdict: str, message: str) -> None:
        self.lost = (verdict, message)
        self.close()

    def close(self) -> None:
        if getattr(self, "closed", False):
            return
        self.closed = True
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)  # bubblewrap and what it started; or the plain worker's group
        if self.status is None:
            _, self.status, self.rusage = os.wait4(self.proc.pid, 0)
        self.proc.returncode = os.waitstatus_to_exitcode(self.status)
        with suppress(OSError):  # the output of its last moments (what a pipe holds), without waiting
            for _ in range(4):
                data = os.read(self.out_fd, 1 << 16)
                if not data:
                    break
                self.output.add(data)
        self.sel.close()
        for fd in (self.rep_r, self.req_w):
            with suppress(OSError):
                os.close(fd)
        self.proc.stdout.close()
        self.buf = bytearray()
        self.pending.clear()
        sandbox.remove_tmp(self.tmp)


def _describe(msg: dict) -> str:
    """A short, safe description of an unexpected message (its kind and id only)."""
    kind, rid = msg.get("t"), msg.get("id")
    return f"kind {str(kind)[:30]!r}" + (f", id {str(rid)[:20]}" if rid is not None else "")
