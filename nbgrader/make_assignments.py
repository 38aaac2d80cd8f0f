"""Generate the nbgrader source notebooks of the course from the judge's exercise registry.

    python nbgrader/make_assignments.py                       # every registered exercise, into nbgrader/source/
    python nbgrader/make_assignments.py --course DIR          # into DIR/source/ (DIR gets nbgrader_config.py)
    python nbgrader/make_assignments.py --exercise 128 --exercise 130

One assignment per exercise, named `ex<id>-<slug>`, holding one notebook of the same name:
- the statement (practice/exercises/<id>-<slug>.md);
- the solution cell: the learner's stub (practice/...py) whose `raise NotImplementedError` bodies are replaced by
  the reference's bodies (solutions/...py) between `### BEGIN SOLUTION` / `### END SOLUTION`, so that
  `nbgrader generate_assignment` releases exactly the stub the practice/ folder has;
- a locked cell that grades the code of the solution cell with the judge (for a student: the public cases of the
  student edition), and one autograded cell of 1 point per test case.
`nbgrader autograde` never runs the student's code in the kernel: judge/nbgrading.py grades the solution cell,
isolated, outside it (see nbgrader_config.py). Nothing of the hidden tests is released. See docs/instructors.md.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import re
import shutil
import sys
from pathlib import Path

import nbformat

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
if str(REPO) not in sys.path:  # when run as `python nbgrader/make_assignments.py` without the course installed
    sys.path.insert(0, str(REPO))

import judge  # noqa: E402
from judge.registry import Exercise  # noqa: E402

BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
HELPER_DOC = '"""A helper of the reference solution: implement it, or delete it if your code does not use it."""'


def assignment_name(ex: Exercise) -> str:
    return f"ex{ex.id}-{ex.slug}"


# ------------------------------------------------------------------------------------------------------------
# The solution cell: the stub, with the reference's function bodies in solution regions


def _docstring_end(fn: ast.FunctionDef) -> int | None:
    first = fn.body[0]
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        return first.end_lineno
    return None


def _is_not_implemented(fn: ast.FunctionDef) -> ast.Raise | None:
    """The `raise NotImplementedError(...)` that is the whole body of a stub function (after its docstring)."""
    body = fn.body[1:] if _docstring_end(fn) else fn.body
    if len(body) == 1 and isinstance(body[0], ast.Raise) and "NotImplementedError" in ast.unparse(body[0]):
        return body[0]
    return None


def _functions(tree: ast.Module) -> dict[str, ast.FunctionDef]:
    """Module-level functions and methods of module-level classes, by qualified name ("Class.method")."""
    found: dict[str, ast.FunctionDef] = {}
    functions = (ast.FunctionDef, ast.AsyncFunctionDef)
    for node in tree.body:
        if isinstance(node, functions):
            found[node.name] = node
        elif isinstance(node, ast.ClassDef):
            found.update({f"{node.name}.{m.name}": m for m in node.body if isinstance(m, functions)})
    return found


def _param_names(fn: ast.FunctionDef) -> list[str]:
    a = fn.args
    return [p.arg for p in [*a.posonlyargs, *a.args, *([a.vararg] if a.vararg else []), *a.kwonlyargs,
                            *([a.kwarg] if a.kwarg else [])]]


def _absolute(module: str | None, level: int, package: str) -> str:
    if not level:
        return module or ""
    base = package.rsplit(".", level - 1)[0] if level > 1 else package
    return f"{base}.{module}" if module else base


def _module_bindings(tree: ast.Module, module: str) -> dict[str, str]:
    """Each module-level name of `module` -> the import statement that binds it in another namespace."""
    package = module.rsplit(".", 1)[0]
    out: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.Import):
            for a in node.names:
                name = a.asname or a.name.split(".")[0]
                out[name] = f"import {a.name} as {a.asname}" if a.asname else f"import {a.name.split('.')[0]}"
        elif isinstance(node, ast.ImportFrom) and node.module != "__future__":
            src = _absolute(node.module, node.level, package)
            for a in node.names:
                out[a.asname or a.name] = f"from {src} import {a.name}" + (f" as {a.asname}" if a.asname else "")
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            out[node.name] = f"from {module} import {node.name}"
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for t in node.targets if isinstance(node, ast.Assign) else [node.target]:
                for n in ast.walk(t):
                    if isinstance(n, ast.Name):
                        out[n.id] = f"from {module} import {n.id}"
    return out


def _body_lines(fn: ast.FunctionDef, lines: list[str], indent: str) -> list[str]:
    """The source lines of fn's body after its docstring (comments kept), re-indented to `indent`."""
    start = _docstring_end(fn) or fn.body[0].lineno - 1
    col = fn.body[-1].col_offset
    out = []
    for line in lines[start:fn.end_lineno]:
        if not line.strip():
            out.append("")
        elif line[:col].strip():
            raise ValueError(f"{fn.name}: a line less indented than its body: {line!r}")
        else:
            out.append(indent + line[col:])
    while out and not out[0]:
        out.pop(0)
    return out


def _used_names(nodes: list[ast.AST]) -> set[str]:
    return {n.id for node in nodes for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _needed_imports(fns: list[ast.FunctionDef], ref_bindings: dict[str, str], stub_names: set[str],
                    ref: tuple[ast.Module, list[str], str] | None = None) -> list[str]:
    """The lines a solution region needs before the reference's body: imports of the module-level names these
    functions use and the stub lacks; a name defined in the reference module itself (a helper, a dataclass) is
    copied in, not imported, because graded code cannot import the reference."""
    used = _used_names([stmt for fn in fns for stmt in fn.body])
    missing = sorted(n for n in used if n in ref_bindings and n not in stub_names)
    own = {n for n in missing if ref is not None and ref_bindings[n] == f"from {ref[2]} import {n}"}
    defs = [node for node in (ref[0].body if ref else []) if getattr(node, "name", None) in own]
    for node in defs:  # what the copied definitions use in turn
        missing += sorted(n for n in _used_names([node]) if n in ref_bindings and n not in stub_names
                          and n not in own and n not in missing)
    imports = sorted({ref_bindings[n] for n in missing if n not in own},
                     key=lambda line: (line.startswith("from "), line))
    copied = []
    for node in defs:
        first = min([d.lineno for d in getattr(node, "decorator_list", [])] + [node.lineno]) - 1
        copied += ["", *ref[1][first:node.end_lineno]] if copied else ref[1][first:node.end_lineno]
    return imports + ([""] if imports and copied else []) + copied + ([""] if copied else [])


def _self_attributes(fns: list[ast.FunctionDef]) -> set[str]:
    return {n.attr for fn in fns for n in ast.walk(fn)
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self"}


def _stub_class(ex: Exercise, name: str) -> type | None:
    """The stub's class object (to see what it inherits), or None if it cannot be imported."""
    module = ex.practice_file[:-3].replace("/", ".")
    try:
        return getattr(importlib.import_module(module), name, None)
    except Exception:  # noqa: BLE001 - a stub that does not import: then nothing is inherited
        return None


def solution_code(ex: Exercise) -> str:
    """The solution cell's code: the stub with each unimplemented body replaced by the reference's, in a solution
    region; reference helper methods the stub class lacks are appended to it (their bodies in regions too)."""
    stub_text = ex.practice_path.read_text()
    ref_text = ex.reference_path.read_text()
    stub, ref = ast.parse(stub_text), ast.parse(ref_text)
    stub_lines, ref_lines = stub_text.splitlines(), ref_text.splitlines()
    stub_package = ex.practice_file.rsplit("/", 1)[0].replace("/", ".")
    ref_fns, stub_fns = _functions(ref), _functions(stub)
    ref_bindings = _module_bindings(ref, ex.reference)
    stub_names = set(_module_bindings(stub, ex.practice_file[:-3].replace("/", ".")))

    edits: dict[int, tuple[int, list[str]]] = {}  # first line (0-based) -> (last line, replacement lines)
    filled: dict[str, list[ast.FunctionDef]] = {}  # class name -> reference methods put in it
    for qual, fn in stub_fns.items():
        raise_stmt = _is_not_implemented(fn)
        if raise_stmt is None:
            continue
        ref_fn = ref_fns.get(qual)
        if ref_fn is None:
            raise ValueError(f"exercise {ex.id}: {ex.reference} has no {qual} for the stub's {qual}")
        if _param_names(ref_fn) != _param_names(fn):
            raise ValueError(f"exercise {ex.id}: {qual} has parameters {_param_names(fn)} in the stub but "
                             f"{_param_names(ref_fn)} in {ex.reference}")
        indent = " " * raise_stmt.col_offset
        prelude = _needed_imports([ref_fn], ref_bindings, stub_names, (ref, ref_lines, ex.reference))
        region = [indent + BEGIN, *(indent + i if i else "" for i in prelude),
                  *_body_lines(ref_fn, ref_lines, indent), indent + END]
        edits[raise_stmt.lineno - 1] = (raise_stmt.end_lineno - 1, region)
        if "." in qual:
            filled.setdefault(qual.split(".")[0], []).append(ref_fn)

    for cls_name, fns in filled.items():
        helpers = _missing_helpers(ex, cls_name, fns, ref_fns, stub_fns)
        if helpers:
            cls = next(n for n in stub.body if isinstance(n, ast.ClassDef) and n.name == cls_name)
            extra = [line for h in helpers for line in ["", *_helper_lines(h, ref_lines, ref_bindings, stub_names)]]
            end = cls.end_lineno - 1  # append after the class's last line, or after the region that covers it
            start = next((k for k, (last, _) in edits.items() if k <= end <= last), end)
            last, region = edits.get(start, (end, [stub_lines[end]]))
            edits[start] = (last, region + extra)

    out: list[str] = []
    i = _code_start(stub)
    while i < len(stub_lines):
        if i in edits:
            last, region = edits[i]
            out += region
            i = last + 1
        else:
            out.append(_absolute_import(stub_lines[i], stub_package))
            i += 1
    return "\n".join(out).strip("\n") + "\n"


def _missing_helpers(ex: Exercise, cls_name: str, fns: list[ast.FunctionDef], ref_fns: dict[str, ast.FunctionDef],
                     stub_fns: dict[str, ast.FunctionDef]) -> list[ast.FunctionDef]:
    """Reference methods of `cls_name` that the filled-in methods call (transitively) but the stub class neither
    defines nor inherits."""
    cls = _stub_class(ex, cls_name)
    helpers: list[ast.FunctionDef] = []
    todo = list(fns)
    while todo:
        for attr in sorted(_self_attributes([todo.pop()])):
            qual = f"{cls_name}.{attr}"
            ref_fn = ref_fns.get(qual)
            if ref_fn is None or qual in stub_fns or ref_fn in helpers or (cls is not None and hasattr(cls, attr)):
                continue
            helpers.append(ref_fn)
            todo.append(ref_fn)
    return sorted(helpers, key=lambda f: f.lineno)


def _helper_lines(fn: ast.FunctionDef, ref_lines: list[str], ref_bindings: dict[str, str],
                  stub_names: set[str]) -> list[str]:
    first = min([d.lineno for d in fn.decorator_list] + [fn.lineno]) - 1
    indent = " " * fn.body[0].col_offset
    header = ref_lines[first:fn.body[0].lineno - 1]
    doc = [indent + HELPER_DOC]  # the reference's docstring, if any, after it: what the helper does there
    if _docstring_end(fn):
        doc = [indent + "# " + HELPER_DOC.strip('"'), *ref_lines[fn.body[0].lineno - 1:_docstring_end(fn)]]
    region = [indent + BEGIN, *(indent + i for i in _needed_imports([fn], ref_bindings, stub_names)),
              *_body_lines(fn, ref_lines, indent), indent + END]
    return [*header, *doc, *region]


def _code_start(tree: ast.Module) -> int:
    """The first line after the module docstring (the statement is in the notebook's markdown)."""
    first = tree.body[0]
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        return first.end_lineno
    return 0


def _absolute_import(line: str, package: str) -> str:
    """`from .x import y` -> `from practice.x import y`: the cell is graded as a file outside the package."""
    return re.sub(r"^(\s*)from \.(\S*) import ", lambda m: f"{m[1]}from {package}{'.' if m[2] else ''}{m[2]} import ",
                  line)


# ------------------------------------------------------------------------------------------------------------
# The notebook


def api_names(ex: Exercise) -> list[str]:
    return list(ex.api)


def case_names(ex: Exercise) -> list[str]:
    return ex.hidden_cases().names()


def judge_cell_limit(ex: Exercise) -> int:
    """Seconds the judge cell may take when a student runs it: the judge's total cap for one submission, a worker
    start-up, and a margin. nbgrader_config.py reads it (autograding reads a finished report instead)."""
    from judge.runner import STARTUP_TIMEOUT

    return int(ex.total_timeout + STARTUP_TIMEOUT) + 60


RUN_CELL = '''\
# Time limit of this cell (read by nbgrader_config.py): {limit} s for {num_cases} cases.
# Checks the code of the solution cell above with the course judge, in a separate process with a time limit per
# case and a memory limit. Here it runs the cases your copy of the course has (the worked example and a few basic
# ones); the hidden cases are run after you submit, outside this notebook, on the solution cell alone. Keep all
# your code in that one cell (no %magics): it is graded as a file. The cells below award 1 point per test case.
# Grading options (environment variables): JUDGE_TIMEOUT (seconds per case), JUDGE_MEMORY_MB, JUDGE_MODEL.
import linecache

import judge.nbgrading


def _cell_code(*objs) -> str:
    """The code of the notebook cells that defined objs (IPython keeps each cell's code in linecache)."""
    files = []
    for obj in objs:
        for member in vars(obj).values() if isinstance(obj, type) else [obj]:
            member = getattr(member, "fget", None) or getattr(member, "__func__", None) or member
            name = getattr(getattr(member, "__code__", None), "co_filename", None)
            entry = linecache.cache.get(name)
            if entry and entry[1] is None and name not in files:  # mtime None: a cell, not a file
                files.append(name)
    return "\\n".join("".join(linecache.cache[name][2]) for name in files)


_report = judge.nbgrading.notebook_report({id}, _cell_code(*[globals().get(name) for name in {names!r}]))
print(_report.text())


def _case(name: str) -> None:
    """Raise AssertionError (0 points) unless the test case `name` passed."""
    judge.nbgrading.case_check(_report, name)
'''


def _meta(grade_id: str, *, solution: bool = False, grade: bool = False, locked: bool = True,
          points: int | None = None) -> dict:
    meta = {"grade_id": grade_id, "grade": grade, "solution": solution, "locked": locked, "schema_version": 3}
    if points is not None:
        meta["points"] = points
    return {"nbgrader": meta}


def make_notebook(ex: Exercise) -> nbformat.NotebookNode:
    statement = (judge.ROOT / ex.statement).read_text().strip() if ex.statement else ""
    names = api_names(ex)
    intro = (f"# Exercise {ex.id}: {ex.title}\n\n*Difficulty: {ex.difficulty}.* Graded by the course judge: "
             f"1 point per test case.\n\n{statement}")
    how = (f"## Your code\n\nWrite {', '.join(f'`{n}`' for n in names)} in the next cell. Keep all your code in that "
           "cell (helpers and imports included, no `%magics`): the grader runs that cell's code, as a file, in a "
           f"separate process. Outside this notebook the same tests are `python practice/judge.py {ex.id}`.")
    grading = ("## Grading\n\nThe next cell runs the test cases on your code and prints the report; each cell "
               "after it is one test case (1 point). Your copy runs the public ones: run them to check your work "
               "before you submit. The hidden ones are graded after you submit.")
    cells = [
        nbformat.v4.new_markdown_cell(intro, metadata=_meta("statement")),
        nbformat.v4.new_markdown_cell(how, metadata=_meta("instructions")),
        nbformat.v4.new_code_cell(solution_code(ex), metadata=_meta("solution", solution=True, locked=False)),
        nbformat.v4.new_markdown_cell(grading, metadata=_meta("grading")),
        nbformat.v4.new_code_cell(RUN_CELL.format(id=ex.id, names=tuple(names), limit=judge_cell_limit(ex),
                                                num_cases=len(case_names(ex))), metadata=_meta("judge")),
    ]
    for i, name in enumerate(case_names(ex), 1):
        kind = "public" if name in ex.public_cases else "hidden"
        cells.append(nbformat.v4.new_code_cell(f"# {kind} test case {i}: {name}\n_case({name!r})",
                                               metadata=_meta(f"case_{i:02d}", grade=True, points=1)))
    nb = nbformat.v4.new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    for cell in nb.cells:  # stable ids, so that regenerating an unchanged exercise gives the same file
        cell["id"] = cell.metadata["nbgrader"]["grade_id"].replace("_", "-")
    return nb


def write_course(course: Path, ids: list[int] | None = None) -> list[Path]:
    """Write source/<assignment>/<assignment>.ipynb for the exercises (default: every registered one) under
    `course`, and the course's nbgrader_config.py if it has none. Returns the notebooks written."""
    course.mkdir(parents=True, exist_ok=True)
    config = course / "nbgrader_config.py"
    if not config.exists():
        shutil.copyfile(HERE / "nbgrader_config.py", config)
    exercises = judge.load_exercises()
    unknown = sorted(set(ids or []) - set(exercises))
    if unknown:
        raise SystemExit(f"no exercise {unknown}; registered: {sorted(exercises)}")
    written = []
    for ex in exercises.values():
        if ids and ex.id not in ids:
            continue
        path = course / "source" / assignment_name(ex) / f"{assignment_name(ex)}.ipynb"
        path.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(make_notebook(ex), path)
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--course", type=Path, default=HERE, help="the course folder (default: nbgrader/ in the repo)")
    ap.add_argument("--exercise", type=int, action="append", metavar="ID", help="only this exercise (repeatable)")
    args = ap.parse_args(argv)
    for path in write_course(args.course, args.exercise):
        print(path)


if __name__ == "__main__":
    main()
