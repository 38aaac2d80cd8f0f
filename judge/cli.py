"""The command line of the judge; `python practice/judge.py --help` shows the usage."""

from __future__ import annotations

import argparse
import csv
import os
import sys
from pathlib import Path

from . import cache
from .registry import Exercise, get_exercise, load_exercises
from .report import Report
from .runner import grade

USAGE = """\
python practice/judge.py 128                  grade exercise 128 on your practice file (also: test 128, batch-layout)
python practice/judge.py list [--grade]       every exercise, its file and whether it passed (last result)
python practice/judge.py all                  grade every exercise
python practice/judge.py 128 --impl FILE      grade another file
python practice/judge.py 128 --impl DIR --csv grades.csv   grade every *.py in DIR into a CSV
python practice/judge.py 128 --reference      grade the reference solution in solutions/"""


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python practice/judge.py", usage=USAGE,
                                 description="Grade practice exercises against hidden tests.")
    ap.add_argument("words", nargs="*", help="an exercise id or slug, `test ID`, `list` or `all`")
    ap.add_argument("--impl", metavar="FILE_OR_DIR", help="grade this file (or every *.py in this folder)")
    ap.add_argument("--reference", action="store_true", help="grade the reference solution")
    ap.add_argument("--csv", metavar="FILE", help="write one row per graded file: file,exercise,passed,failed,score")
    ap.add_argument("--timeout", type=float, metavar="S", help="seconds per case (default: the exercise's)")
    ap.add_argument("--memory", type=int, metavar="MB", help="memory limit of the grading process")
    ap.add_argument("--case", action="append", metavar="NAME", help="run only the cases whose name contains NAME")
    ap.add_argument("--model", metavar="DIR", help="checkpoint for end-to-end cases (default: the embedded model)")
    ap.add_argument("--grade", action="store_true", help="with list: grade exercises without a current result")
    ap.add_argument("-v", "--verbose", action="store_true", help="always show what your code printed")
    return ap


def _rel(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _grade_one(ex: Exercise, args, impl: Path | None) -> Report:
    cases = list(args.case) if args.case else None  # the worker picks the cases whose names contain these
    options = {"model": str(Path(args.model).resolve())} if args.model else {}
    report = grade(ex, impl, reference=args.reference, time_limit=args.timeout, memory_limit_mb=args.memory,
                   cases=cases, options=options)
    if not args.reference and not args.case and report.results:
        cache.save(ex, impl or ex.practice_path, report)
    return report


def cmd_list(args) -> int:
    exercises = load_exercises()
    rows = []
    for ex in exercises.values():
        path = ex.practice_path
        if not path.is_file():
            status = "no file yet"
        else:
            hit = cache.lookup(ex, path)
            if hit is None and args.grade:
                r = _grade_one(ex, args, None)
                hit = {"passed": r.passed, "failed": r.failed}
            if hit is None:
                status = "not graded (run: python practice/judge.py %d)" % ex.id
            elif hit["failed"] == 0:
                status = f"passed ({hit['passed']}/{hit['passed']})"
            else:
                status = f"failed ({hit['passed']}/{hit['passed'] + hit['failed']} cases pass)"
        rows.append((str(ex.id), ex.slug, ex.title, ex.difficulty, ex.practice_file, status))
    head = ("id", "slug", "title", "difficulty", "file to edit", "status")
    widths = [max(len(r[i]) for r in rows + [head]) for i in range(len(head) - 1)]
    for r in [head, *rows]:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[-1])
    return 0


def main(argv: list[str] | None = None) -> int:
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
        exercises = (list(load_exercises().values()) if words in (["all"], [])
                     else [get_exercise(w) for w in words])
    except KeyError as e:
        print(e.args[0], file=sys.stderr)
        print("0 passed, 1 failed")
        return 2
    if args.impl and args.reference:
        print("--impl and --reference exclude each other", file=sys.stderr)
        return 2

    passed = failed = 0
    rows, table = [], []  # table: the closing summary, one line per graded file
    for ex in exercises:
        targets: list[Path | None] = [None]
        if args.impl:
            impl = Path(args.impl)
            targets = sorted(p for p in impl.glob("*.py") if p.name != "__init__.py") if impl.is_dir() else [impl]
            if not targets:
                print(f"no *.py file in {impl}")
        for target in targets:
            report = _grade_one(ex, args, target)
            print(report.text(summary=False, verbose=args.verbose))
            print(f"-- {report.summary()} ({report.seconds:.1f}s)\n")
            passed, failed = passed + report.passed, failed + report.failed
            name = f"{ex.slug} ({_rel(target)})" if target else ex.slug
            table.append(f"{ex.id:>4}  {name:<40}  {report.passed}/{report.passed + report.failed}")
            rows.append({"file": _rel(target) if target else ex.practice_file, "exercise": ex.id,
                         "passed": report.passed, "failed": report.failed, "score": report.score})
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=["file", "exercise", "passed", "failed", "score"])
            w.writeheader()
            w.writerows(rows)
        print(f"wrote {len(rows)} rows to {args.csv}")
    if len(table) > 1:
        print("\n".join(table))
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 and passed > 0 else 1


def run(argv: list[str] | None = None) -> int:
    """main() that exits quietly when the output is closed early (e.g. `| head`)."""
    try:
        return main(argv)
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    sys.exit(run())
