"""How the graded process is started and what it sees (judge/README.md, "How the sandbox works"). Isolated (class
grading): under bubblewrap, as nobody in its own namespaces, with read-only binds of the system, Python, the
site-packages and, in /course, only what a student receives (no reference), and a private /tmp; bubblewrap dies with
the grader. Unisolated (self-study): a plain subprocess with a clean environment, its own session and the same
limits, which guards against accidents only. Either way Python runs with `-I -B -S` (no `.pth` file runs)."""

from __future__ import annotations

import importlib.machinery
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from contextlib import suppress
from functools import lru_cache
from pathlib import Path

from .registry import ROOT, Exercise

COURSE = "/course"  # where the student edition appears inside the sandbox
SUBMISSION = "/submission"
BOOT = ("import sys; sys.path[:0] = [sys.argv[1]]; sys.path.extend(sys.argv[2:-2]); "
        "from judge.worker_main import main; main()")
NOT_ISOLATED = ("note: not isolated: your code runs in a plain subprocess with time and memory limits "
                "(fine for self-study; class grading uses bubblewrap)")

# What a student receives of the repository as it is: the student edition copies these, and the worker sees only
# these (`course_binds`). The edition also writes, filtered, the chapters (which the worker never sees) and the
# judge's `EDITION_JUDGE` folders (the released exercises' metadata and public cases, which hold no secret).
STUDENT_FILES = ("pyproject.toml", "environment.yml", "practice", "framework", "mini_llm", "course", "docs/glossary.md",
                 "scripts/train_tiny_model.py", "scripts/story_generator.py", "benchmarks/repetitive.py", "judge/*.py",
                 "judge/drivers")
EDITION_JUDGE = ("judge/exercises", "judge/public")


def student_files(root: Path = ROOT) -> list[Path]:
    """The files and folders of `root` (relative to it) a student receives as they are (STUDENT_FILES)."""
    return [p.relative_to(root) for pattern in STUDENT_FILES for p in sorted(root.glob(pattern))]


def visible_files(root: Path = ROOT) -> list[Path]:
    """What the worker sees of `root` whatever the exercise: the student's files and the edition's judge folders."""
    return student_files(root) + [Path(d) for d in EDITION_JUDGE if (root / d).exists()]


def site_packages() -> list[str]:
    paths = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    return sorted(p for p in paths if os.path.isdir(p))


@lru_cache(maxsize=1)
def bwrap_problem() -> str | None:
    """None if bubblewrap works here, else why not (missing, or not allowed to create namespaces)."""
    exe = shutil.which("bwrap")
    if exe is None:
        return "bubblewrap (bwrap) is not installed: `apt-get install bubblewrap` (Debian/Ubuntu)"
    try:
        p = subprocess.run([exe, "--ro-bind", "/", "/", "--unshare-all", "--die-with-parent", "--proc", "/proc",
                            "--dev", "/dev", "true"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bubblewrap does not run: {exc}"
    if p.returncode != 0:
        return f"bubblewrap cannot create a sandbox here: {p.stderr.strip()[:300]}"
    return None


def install_problem() -> str | None:
    """None if nothing secret is importable from the site-packages the sandbox mounts, else why class grading must
    not run (`pip install .` copies the references and the hidden cases there)."""
    found = []
    for sp in site_packages():
        if importlib.machinery.PathFinder.find_spec("solutions", [sp]) is not None:
            found.append(os.path.join(sp, "solutions"))
        judge_spec = importlib.machinery.PathFinder.find_spec("judge", [sp])
        locations = list(judge_spec.submodule_search_locations or []) if judge_spec else []
        if locations and importlib.machinery.PathFinder.find_spec("hidden", locations) is not None:
            found.append(os.path.join(sp, "judge", "hidden"))
    if not found:
        return None
    return ("refusing to grade a class: the graded code could import the references or the hidden cases from "
            f"{', '.join(found)}, which the sandbox mounts (the course was installed with `pip install .`, which "
            "copies them into site-packages). Reinstall it editable, `pip uninstall -y mini-llm-course && pip "
            "install -e .` in the checkout (docs/instructors.md, section 1).")


# The grader's temporary folders are named after its PID, so that a later grader removes those of a killed one.
_TMP_NAME = re.compile(r"judge-(\d+)-")


def private_tmp(kind: str) -> str:
    """A new folder only this user can read (mode 700); `remove_tmp` deletes it."""
    _sweep_once()
    return tempfile.mkdtemp(prefix=f"judge-{os.getpid()}-{kind}-")


def remove_tmp(path: str) -> None:
    shutil.rmtree(path, ignore_errors=True)


@lru_cache(maxsize=1)
def _sweep_once() -> None:
    """Delete the temporary folders and files of graders of this user that are no longer running."""
    root = tempfile.gettempdir()
    for name in os.listdir(root):
        m = _TMP_NAME.match(name)
        path = os.path.join(root, name)
        with suppress(OSError):  # PermissionError from os.kill: that PID runs, as another user
            if not m or os.lstat(path).st_uid != os.getuid() or _alive(int(m[1])):
                continue
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                os.unlink(path)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _system_binds() -> list[str]:
    args: list[str] = []
    for top in ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    for f in ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime"):
        if os.path.exists(f):
            args += ["--ro-bind", f, f]
    prefix = os.path.realpath(sys.base_prefix)
    if not prefix.startswith("/usr/"):
        args += ["--ro-bind", prefix, prefix]
    for sp in site_packages():
        real = os.path.realpath(sp)
        args += ["--ro-bind", real, real]
        if real != sp:
            args += ["--symlink", real, sp]
    return args


def course_binds(root: Path = ROOT) -> list[str]:
    """What a student receives, in /course: no reference, whatever the exercise (the parts it runs on run in the
    grader)."""
    args = ["--dir", COURSE]
    for rel in visible_files(root):
        args += ["--ro-bind", str(root / rel), f"{COURSE}/{rel}"]
    return args


def command(ex: Exercise, isolated: bool, submission: Path | None, extra_ro: list[str],
            fds: tuple[int, int]) -> tuple[list[str], str | None, int | None]:
    """(argv, path of the submission as the worker sees it, a file descriptor to pass and then close, or None);
    `fds`: the request and reply pipes it inherits. Isolated, bubblewrap reads its options from that descriptor
    (`--args`), so that its command line, which the sandbox's PID 1 shows in /proc/1/cmdline, names none of the
    host's folders it binds (only the interpreter and the site-packages, which the sandbox sees anyway)."""
    py = os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)  # not a venv's symlink
    fd_args = [str(fds[0]), str(fds[1])]
    if not isolated:
        argv = [py, "-I", "-B", "-S", "-u", "-c", BOOT, str(ROOT), *site_packages(), *fd_args]
        return argv, str(submission) if submission else None, None
    inner = f"{SUBMISSION}/{submission.name}" if submission else None
    args = ["--unshare-all", "--unshare-user", "--uid", "65534", "--gid", "65534", "--die-with-parent",
            "--new-session", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--chdir", "/tmp",
            "--clearenv", *(a for k, v in worker_env("/tmp").items() for a in ("--setenv", k, v)), *_system_binds(),
            *course_binds()]
    if submission:
        args += ["--ro-bind", str(submission), inner]
    for path in extra_ro:  # e.g. a model checkpoint given with --model
        args += ["--ro-bind", path, path]
    fd = os.memfd_create("bwrap-args")  # the options: bwrap wants the command itself on its command line
    os.write(fd, b"".join(a.encode() + b"\0" for a in args))
    os.lseek(fd, 0, os.SEEK_SET)
    return ["bwrap", "--args", str(fd), "--", py, "-I", "-B", "-S", "-u", "-c", BOOT, COURSE, *site_packages(),
            *fd_args], inner, fd


def worker_env(tmp: str) -> dict[str, str]:
    """The worker's whole environment (isolated, through bwrap's --setenv). One thread: the cases are small, and a
    busy machine makes more threads much slower."""
    return {"PATH": "/usr/bin:/bin", "HOME": tmp, "TMPDIR": tmp, "LANG": "C.UTF-8", "CUDA_VISIBLE_DEVICES": "",
            "MINI_LLM_DEVICE": "cpu", "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
