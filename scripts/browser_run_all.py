"""Try the student edition as a new learner would: "Run All" in JupyterLab, in a real browser.

    python scripts/browser_run_all.py                       # chapters 00, 04 and 06
    python scripts/browser_run_all.py 00 09 --keep /tmp/ed  # other chapters; keep the edition and its venv
    python scripts/browser_run_all.py 10 --keep /tmp/ed     # again, in the kept edition (chapters as last saved)

A manual check, not part of the test suite (it needs chromium and playwright: `apt-get install -y chromium`,
`pip install playwright`; no browser download, the system chromium is launched). It

1. writes a fresh edition with every exercise released and no solution (`python -m judge.edition`);
2. makes its venv as the edition's README tells a student (`python3 -m venv .venv`, then `pip install torch==2.13.0
   -e .` in it). Offline (the default), nothing is downloaded: this Python's installed packages are linked into the
   new venv's site-packages (not this checkout's editable install, which would bring solutions/ back), so pip
   finds torch and the other requirements installed and only installs the edition itself (and JupyterLab's
   assets are linked into its share/jupyter). Links, not a .pth line: the judge's worker runs Python with -S and
   puts the venv's site-packages on sys.path itself;
3. starts JupyterLab in the edition with that venv, opens each chapter in headless chromium, runs the menu
   Run → Run All Cells, waits until every code cell has run and the kernel is idle, saves the notebook;
4. reads the saved notebook back and reports, per chapter, the cells whose output is an error, how many cells
   showed their stored output instead of running, and the chapter's banner. Exit status 1 if any cell erred.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
STORED = "(stored output: "


def write_edition(out: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT), XDG_CONFIG_HOME=str(out.parent / "config"))  # a throwaway seed
    env.pop("JUDGE_SECRET_SEED", None)
    ids = ",".join(str(i) for i in range(125, 136))
    subprocess.run([sys.executable, "-m", "judge.edition", str(out), "--released", ids], check=True, env=env)


def make_venv(edition: Path, offline: bool) -> None:
    """The student's venv in `edition`/.venv."""
    subprocess.run([sys.executable, "-m", "venv", ".venv"], cwd=edition, check=True)
    python = edition / ".venv" / "bin" / "python"
    if offline:
        site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                   capture_output=True, text=True, check=True).stdout.strip())
        for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
            editable = entry.name.startswith(("__editable__", "mini_llm_course"))  # this checkout's own install
            if not editable and not (site / entry.name).exists():
                (site / entry.name).symlink_to(entry)
        for data in ("share/jupyter", "etc/jupyter"):  # JupyterLab's assets and its server extension's settings
            for entry in (Path(sys.prefix) / data).glob("*"):
                target = edition / ".venv" / data / entry.name
                if entry.name != "kernels" and not target.exists():  # the kernel: the new venv's own python
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.symlink_to(entry)
    subprocess.run([str(python), "-m", "pip", "install", "-q", "torch==2.13.0", "-e", "."], cwd=edition, check=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_lab(edition: Path, python: Path, port: int, token: str) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "COURSE_IMPL", "VIRTUAL_ENV")}
    env.update(MINI_LLM_DEVICE=os.environ.get("MINI_LLM_DEVICE", "cpu"), JUPYTER_CONFIG_DIR=str(edition / ".jupyter"))
    lab = subprocess.Popen([str(python), "-m", "jupyterlab", "chapters/", "--no-browser", f"--port={port}",
                            f"--IdentityProvider.token={token}", "--ServerApp.allow_root=True"],
                           cwd=edition, env=env, stdout=subprocess.DEVNULL, stderr=open(edition / "lab.log", "w"))
    for _ in range(120):
        try:
            if httpx.get(f"http://127.0.0.1:{port}/api/status", params={"token": token}).status_code == 200:
                return lab
        except httpx.HTTPError:
            time.sleep(0.5)
        if lab.poll() is not None:
            break
    raise RuntimeError(f"JupyterLab did not start: see {edition / 'lab.log'}")


def kernels_idle(port: int, token: str) -> bool:
    kernels = httpx.get(f"http://127.0.0.1:{port}/api/kernels", params={"token": token}).json()
    return bool(kernels) and all(k["execution_state"] == "idle" for k in kernels)


def run_all(page, port: int, token: str, chapter: Path, timeout: float) -> dict:
    """Open `chapter` in JupyterLab, Run → Run All Cells, wait, save; what the saved notebook holds."""
    page.goto(f"http://127.0.0.1:{port}/lab/tree/{chapter.name}?reset&token={token}")  # reset: no other tab
    page.wait_for_selector(".jp-NotebookPanel .jp-Cell", timeout=120_000)
    deadline = time.monotonic() + 60
    while not kernels_idle(port, token) and time.monotonic() < deadline:  # the kernel starts
        time.sleep(0.5)
    page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
    page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()
    start, idle_since = time.monotonic(), None
    while time.monotonic() - start < timeout:
        time.sleep(2)
        page.keyboard.press("Control+s")
        time.sleep(0.5)
        cells = [c for c in json.loads(chapter.read_text())["cells"] if c["cell_type"] == "code"]
        erred = any(o.get("output_type") == "error" for c in cells for o in c.get("outputs", []))  # Run All stops
        done = (erred or all(c.get("execution_count") for c in cells)) and kernels_idle(port, token)
        idle_since = (idle_since or time.monotonic()) if done else None
        if idle_since and time.monotonic() - idle_since > 5:
            break
    else:
        raise TimeoutError(f"{chapter.name}: Run All did not finish in {timeout:.0f} s")
    page.screenshot(path=str(chapter.parent.parent.parent / f"{chapter.stem}.png"))  # beside the edition
    texts = ["".join("".join(o.get("text", "")) for o in c.get("outputs", [])) for c in cells]
    errors = [(i, o.get("ename"), o.get("evalue")) for i, c in enumerate(cells) for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    for kernel in httpx.get(f"http://127.0.0.1:{port}/api/kernels", params={"token": token}).json():
        httpx.delete(f"http://127.0.0.1:{port}/api/kernels/{kernel['id']}", params={"token": token})
    return {"chapter": chapter.stem, "code cells": len(cells), "errors": errors, "banner": texts[0].splitlines()[:1],
            "stored": sum(STORED in t for t in texts), "last line": (texts[-1].strip().splitlines() or [""])[-1]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("chapters", nargs="*", default=["00", "04", "06"], help="file-name prefixes")
    parser.add_argument("--keep", type=Path, help="write the edition here and keep it; if it exists, reuse it")
    parser.add_argument("--online", action="store_true", help="let pip download torch and the requirements")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per chapter (default 900)")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    edition = args.keep or Path(tempfile.mkdtemp(prefix="browser-run-all-")) / "edition"
    if not edition.exists():
        write_edition(edition)
    if not (edition / ".venv").exists():
        make_venv(edition, offline=not args.online)
    python = edition / ".venv" / "bin" / "python"
    port, token = free_port(), secrets.token_hex(16)
    lab = start_lab(edition, python, port, token)
    results = []
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            for prefix in args.chapters:
                chapter = next((edition / "chapters").glob(f"{prefix}*.ipynb"))
                page = browser.new_page(viewport={"width": 1400, "height": 1000})
                results.append(run_all(page, port, token, chapter, args.timeout))
                page.close()
                print(json.dumps(results[-1], ensure_ascii=False), flush=True)
            browser.close()
    finally:
        lab.terminate()
        lab.wait(30)
    print(f"edition: {edition} (a screenshot of each chapter's end beside it)")
    return 1 if any(r["errors"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
