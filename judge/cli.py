"""The command line of the judge; `python practice/judge.py --help` shows the usage."""

from __future__ import annotations

import argparse
import csv
import os
import signal
import sys
import traceback
from pathlib import Path
from typing import Collection

from . import cache, sandbox
from .drivers import model_problem
from .registry import Exercise, exercises_of, get_exercise, load_exercises, shipped, span
from .report import CaseResult, Report
from .runner import IsolationUnavailable, case_names_here, grade

USAGE = """\
python practice/judge.py 128                  grade exercise 128 on your practice file (also: test 128, batch-layout)
python practice/judge.py list [--grade]       every exercise, its file and whether it passed (last result)
python practice/judge.py all                  grade every exercise
python practice/judge.py 128 --impl FILE      grade another file
python practice/judge.py 128 --impl DIR --csv grades.csv   grade every submission in DIR into a CSV (isolated)
python practice/judge.py 128 --reference      grade the reference solution in solutions/, where this copy has it
--impl and --csv grade a class: the learner's code runs under bubblewrap, or not at all unless --unisolated."""


def holdings() -> str:
    """What this copy of the course grades with, for --help."""
    exercises = load_exercises().values()
    refs = [str(ex.id) for ex in exercises if shipped(ex.reference)]
    cases = ("the hidden test cases" if shipped("judge.hidden") else
             "the public cases of this copy (a worked example and a few basic cases per exercise; your instructor "
             "grades the hidden ones)")
    return (f"Grade the practice exercises ({', '.join(str(ex.id) for ex in exercises)}) with {cases}. References "
            f"in this copy: {', '.join(refs) if refs else 'none'}.")


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python practice/judge.py", usage=USAGE, description=holdings())
    ap.add_argument("words", nargs="*", help="an exercise id or slug, `test ID`, `list` or `all`")
    ap.add_argument("--impl", metavar="FILE_OR_DIR", help="grade this file, or every *.py and *.ipynb in this folder "
                                                          "(nbgrader's submitted/ folder too)")
    ap.add_argument("--reference", action="store_true", help="grade the reference solution")
    ap.add_argument("--csv", metavar="FILE", help="write one row per student and exercise: "
                                                  "student,exercise,passed,failed,score (score in percent)")
    ap.add_argument("--unisolated", action="store_true",
                    help="grade --impl/--csv submissions without bubblewrap (only for code you trust)")
    ap.add_argument("--total-timeout", type=float, metavar="S", help="seconds for one submission, all cases")
    ap.add_argument("--timeout", type=float, metavar="S", help="CPU seconds per case (default: the exercise's)")
    ap.add_argument("--memory", type=int, metavar="MB", help="memory limit of the grading process")
    ap.add_argument("--case", action="append", metavar="NAME", help="run only the cases whose name contains NAME")
    ap.add_argument("--model", metavar="DIR", help="checkpoint for end-to-end cases (default: the embedded model)")
    ap.add_argument("--trace", metavar="DIR", help="write the step traces of your run and the reference's of each "
                                                   "case that has them (129, 130, 131, 134) to DIR, for Perfetto")
    ap.add_argument("--grade", action="store_true", help="with list: grade exercises without a current result")
    ap.add_argument("-v", "--verbose", action="store_true", help="always show what your code printed")
    return ap


def _grade_one(ex: Exercise, args, impl: Path | None, isolated: bool = False) -> Report:
    options = {name: str(Path(value).resolve()) for name, value in (("model", args.model), ("trace", args.trace))
               if value}
    try:
        report = grade(ex, impl, reference=args.reference, time_limit=args.timeout, memory_limit_mb=args.memory,
                       cases=args.case, options=options, isolated=isolated, total_limit=args.total_timeout)
    except IsolationUnavailable:
        raise
    except Exception:  # noqa: BLE001 - a judge bug must not stop the grading of the others
        traceback.print_exc()  # for the instructor, on stderr; the report names no file of theirs
        report = Report(ex.id, ex.slug, ex.title, impl.name if impl else ex.practice_file)
        report.fatal = "the judge failed on this submission (a bug of the course, not of your code; it scores 0)"
        report.results = [CaseResult(name, False, 0.0, "not run", "not run: see above")
                          for name in case_names(ex, args.case)]
    if not args.reference and not args.case and report.results and not isolated:
        cache.save(ex, impl or ex.practice_path, report)
    return report


def case_names(ex: Exercise, cases: list[str] | None = None) -> list[str]:
    """The names of the exercise's cases here that `cases` choose (None: all; in a student's copy, the public ones),
    or one row for them all where they do not load."""
    try:
        return case_names_here(ex, cases)
    except Exception:  # noqa: BLE001 - the cases do not load: one row of one case
        return ["all cases"]


def submissions(ex: Exercise, folder: Path) -> list[tuple[str, Path]]:
    """(student, file) for a folder of submissions: its *.py and *.ipynb files (the student is the file's stem),
    and nbgrader's layout <student>/<assignment>/*.ipynb (the student is the folder's name)."""
    found = [(p.stem, p) for p in sorted(folder.iterdir())
             if p.is_file() and p.suffix in (".py", ".ipynb") and p.name != "__init__.py"]
    assignment = f"ex{ex.id}-{ex.slug}"
    for student in sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".")):
        nbs = sorted((student / assignment).glob("*.ipynb")) if (student / assignment).is_dir() else []
        found += [(student.name, nbs[0])] if nbs else []
    return found


def isolation_problem(args) -> str | None:
    """Why this command may not run: grading a class (--impl, --csv) unisolated needs --unisolated."""
    if not (args.impl or args.csv) or args.unisolated or args.reference:
        return None
    problem = sandbox.install_problem()
    if problem or sandbox.bwrap_problem() is None:
        return problem
    return (f"refusing to grade submissions unisolated: {sandbox.bwrap_problem()}.\n"
            "Graded code could then read the hidden tests and the references, change the course for the next "
            "student, or outlive the judge. Install bubblewrap, or pass --unisolated to grade code you trust.")


def _model_refused(path: str) -> str | None:
    problem = model_problem(str(Path(path).resolve()))
    return f"--model {path}: the end-to-end cases cannot load this checkpoint ({problem})" if problem else None


def no_case_matches(exercises: list[Exercise], cases: list[str]) -> str:
    """That --case matches no case of the exercises, and what their cases are."""
    which = f"exercise {exercises[0].id}" if len(exercises) == 1 else "the exercises chosen"
    names = "".join(f"\n{ex.id}:" + "".join(f"\n  {name}" for name in case_names_here(ex)) for ex in exercises)
    return (f"--case {' --case '.join(cases)} matches no case of {which} (--case takes a case's name or a part of "
            f"one, in any case). The cases:{names}")


def write_csv(path: str, rows: list[dict]) -> None:
    """Written once, whole, by a rename: a reader never sees half a file, and nothing changes it afterwards."""
    tmp = Path(path).with_name(f".{Path(path).name}.tmp")
    with open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["student", "exercise", "passed", "failed", "score"])
        w.writeheader()
        w.writerows(rows)
    os.replace(tmp, path)


def needs_cell(ex: Exercise, among: Collection[int] | None = None) -> str:
    """The statement's "Needs" line in short, e.g. "125–129 (131, 132)": in brackets, the ones only for cases that
    preempt or cache prefixes; "e2e:" where only its end-to-end case needs them. `among`: the exercises to name
    (a student edition's released ones; default: every registered one)."""
    needed, optional = exercises_of([Path(ex.practice_file).stem])
    named = {i for i in (*needed, *optional) if i != ex.id and (among is None or i in among)}
    needed, optional = [i for i in needed if i in named], [i for i in optional if i in named]
    cell = " ".join(part for part in (span(needed), f"({span(optional)})" if optional else "") if part)
    return "-" if not cell else f"e2e: {cell}" if ex.parts_run_by else cell


def cmd_list(args) -> int:
    exercises = load_exercises()
    rows = []
    for ex in exercises.values():
        path = ex.practice_path
        if not path.is_file():
            status = "no file yet"
        else:
            hit = cache.lookup(ex, path)
            if (hit is None or hit["changed"]) and args.grade:
                r = _grade_one(ex, args, None)
                hit = {"passed": r.passed, "failed": r.failed, "changed": False}
            if hit is None or hit["changed"]:
                state = "not graded" if hit is None else "changed since it passed" if hit["failed"] == 0 and \
                    hit["passed"] else "changed since graded"
                status = f"{state} (run: python practice/judge.py {ex.id})"
            elif hit["failed"] == 0:
                public = ", public cases" if hit.get("public_only") else ""
                status = f"passed ({hit['passed']}/{hit['passed']}{public})"
            else:
                status = f"failed ({hit['passed']}/{hit['passed'] + hit['failed']} cases pass)"
        public, total = ex.case_counts()
        counts = f"{public} public" + (f" + {total - public} hidden" if total is not None else "")
        rows.append((str(ex.id), ex.slug, ex.title, ex.difficulty, ex.practice_file, counts, needs_cell(ex), status))
    head = ("id", "slug", "title", "difficulty", "file to edit", "cases", "runs the course's", "status")
    widths = [max(len(r[i]) for r in rows + [head]) for i in range(len(head) - 1)]
    for r in [head, *rows]:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[-1])
    return 0


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGTERM, _interrupt)  # a terminated grader still stops its worker and cleans up
    args = _parser().parse_args(argv)
    words = list(args.words)
    if not words:
        print(USAGE)
        return 2
    if words[0] == "list":
        return cmd_list(args)
    if words[0] == "test":
        words = words[1:]
    try:
        exercises = list(load_exercises().values()) if words in (["all"], []) else [get_exercise(w) for w in words]
    except KeyError as e:
        print(e.args[0], file=sys.stderr)
        return 2
    if args.impl and args.reference:
        print("--impl and --reference exclude each other", file=sys.stderr)
        return 2
    missing = [ex for ex in exercises if args.reference and not shipped(ex.reference)]
    if missing:
        print(f"this copy of the course has no reference of exercise {', '.join(str(ex.id) for ex in missing)} "
              f"({', '.join(ex.reference.replace('.', '/') + '.py' for ex in missing)}): --reference grades only the "
              "references it holds", file=sys.stderr)
        return 2
    chosen = [ex for ex in exercises if not args.case or case_names_here(ex, args.case)]
    problem = isolation_problem(args) or (None if chosen else no_case_matches(exercises, args.case)) or \
        (args.model and _model_refused(args.model))
    if problem:
        print(problem, file=sys.stderr)
        return 2
    isolated = bool(args.impl or args.csv) and not args.unisolated and not args.reference
    if not isolated:
        print(sandbox.NOT_ISOLATED)

    passed = failed = 0
    rows, table = [], []  # table: the closing summary, one line per graded file
    for ex in chosen:
        targets: list[tuple[str, Path | None]] = [(Path(ex.practice_file).stem, None)]
        if args.impl:
            impl = Path(args.impl)
            targets = submissions(ex, impl) if impl.is_dir() else [(impl.stem, impl)]
            if not targets:
                print(f"no submission (*.py, *.ipynb, <student>/ex{ex.id}-{ex.slug}/*.ipynb) in {impl}")
        for student, target in targets:
            report = _grade_one(ex, args, target, isolated)
            print(report.text(summary=False, verbose=args.verbose))
            print(f"-- {report.summary()} ({report.seconds:.1f}s)\n")
            passed, failed = passed + report.passed, failed + report.failed
            name = f"{ex.slug} ({student})" if target else ex.slug
            table.append(f"{ex.id:>4}  {name:<40}  {report.passed}/{report.passed + report.failed}")
            rows.append({"student": student, "exercise": ex.id, "passed": report.passed, "failed": report.failed,
                         "score": report.score})
    if args.csv:
        write_csv(args.csv, rows)
        print(f"wrote {len(rows)} rows to {args.csv}")
    if len(table) > 1:
        print("\n".join(table))
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 and passed > 0 else 1


def _interrupt(*_: object) -> None:
    raise KeyboardInterrupt  # the one exception the judge lets through a case (SystemExit would be a verdict)


def run(argv: list[str] | None = None) -> int:
    """main() that exits quietly when the output is closed early (e.g. `| head`) or the grader is interrupted."""
    try:
        return main(argv)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    sys.exit(run())
