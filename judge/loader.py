"""Loading a learner's module from a file (never writing it, nor its __pycache__) and checking its API."""

from __future__ import annotations

import importlib.util
import inspect
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from .harness import is_memory_error, trimmed_traceback
from .registry import ROOT, Exercise


class SetupError(Exception):
    """The learner's module cannot be graded at all (missing file, import error, missing name, bad signature)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind, self.message = kind, message


def module_name_for(path: Path, exercise: Exercise | None = None) -> str:
    """The name the learner's file is imported under: the practice module it replaces (`practice.scheduler` for
    129, wherever the file lies), so that the stub's relative imports work in a submitted copy too."""
    return exercise.practice_file[:-3].replace("/", ".") if exercise is not None else f"_judged_{path.stem}"


def load_file(path: str | Path, exercise: Exercise | None = None, shown: str | None = None) -> ModuleType:
    """The learner's file imported as the practice module it replaces; SetupError naming it as `shown` (default:
    its file name) when it does not import."""
    path = Path(path).resolve()
    shown = shown or path.name
    if not path.is_file():
        raise SetupError("missing file", f"{path} does not exist")
    sys.dont_write_bytecode = True
    name = module_name_for(path, exercise)
    if "." in name:
        importlib.import_module(name.rsplit(".", 1)[0])  # the parent package, for relative imports
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # noqa: BLE001 - SyntaxError, ImportError, SystemExit at import time, ...
        sys.modules.pop(name, None)
        if isinstance(exc, SystemExit):
            raise SetupError("import", f"{shown} called sys.exit({exc.code!r}) while being imported") from None
        if is_memory_error(exc):
            raise SetupError("memory", f"memory limit exceeded while importing {shown}") from None
        if isinstance(exc, SyntaxError):
            line = (exc.text or "").rstrip()
            magic = "\n    (the judge runs your code as plain Python: remove IPython's %magics and !commands)" \
                if line.lstrip().startswith(("%", "!")) else ""
            where = _syntax_error_file(exc, path, shown)
            raise SetupError("import", f"{where} has a syntax error, line {exc.lineno}: {exc.msg}\n    {line}{magic}") \
                from None
        raise SetupError("import", f"importing {shown} failed:\n{trimmed_traceback(exc, str(path))}") from None
    return module


def _syntax_error_file(exc: SyntaxError, path: Path, shown: str) -> str:
    """The file the syntax error is in, as a learner names it: `shown`, or another file it imports (its path in the
    course, e.g. practice/block_pool.py) and who imports it."""
    other = Path(exc.filename).resolve() if exc.filename and not exc.filename.startswith("<") else path
    if other == path:
        return shown
    named = other.relative_to(ROOT) if other.is_relative_to(ROOT) else other
    return f"{named} (which {shown} imports)"


def check_api(module: Any, exercise: Exercise, where: str) -> None:
    """Raise SetupError unless `module` defines every name of `exercise.api` accepting its parameters."""
    for name, params in exercise.api.items():
        obj = getattr(module, name, None)
        want = f"{name}({', '.join(params)})"
        if obj is None:
            raise SetupError("missing", f"{where} does not define {name}: expected {want}")
        if not callable(obj):
            raise SetupError("signature", f"{where}: {name} is a {type(obj).__name__}, expected {want}")
        try:
            sig = inspect.signature(obj)
        except (TypeError, ValueError):
            continue  # builtins and C functions: nothing to check
        try:
            sig.bind(*params)
        except TypeError as exc:
            raise SetupError("signature", f"{where}: {name}{sig} cannot be called as {want} ({exc})") from None
