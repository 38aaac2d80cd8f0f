"""Check docs/upstream.json against the sources of the pinned releases, when refreshing it by hand.

    python scripts/check_upstream_pins.py --vllm SRC --sglang SRC [--vllm-v0 SRC]

Each SRC is an unpacked wheel or a checkout of that release (for SGLang, the folder that holds `sglang/`, i.e. the
repository's `python/`). Reports every listed file that is missing and every listed symbol whose parts do not all
occur as words in its file; exit status 1 if any. A symbol found is not a claim checked: reread the sentences that
cite it. No network.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def occurs(symbol: str, text: str) -> bool:
    """Whether `symbol` is in a file's text: `Class.member` needs the class and a def, assignment or annotation of
    the member; another dotted name (`np.repeat`, `self.running.pop`) must occur as written; a plain name as a word."""
    head, _, member = symbol.partition(".")
    if member and head[:1].isupper():
        return bool(re.search(rf"\bclass {re.escape(head)}\b", text)) and all(
            re.search(rf"(def |self\.|^\s*){re.escape(part)}\b\s*[(:=]?", text, re.M) for part in member.split("."))
    if member:
        return re.search(rf"\b{re.escape(symbol)}\b", text) is not None
    return re.search(rf"\b{re.escape(symbol)}\b", text) is not None


def missing(pin: dict, source: Path, strip: str = "") -> list[str]:
    found = []
    for path, symbols in pin["files"].items():
        local = source / path.removeprefix(strip)
        if not local.is_file():
            found.append(f"{path}: no such file")
            continue
        text = local.read_text(encoding="utf-8")
        found += [f"{path}: {s} not found" for s in symbols if not occurs(s, text)]
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vllm", type=Path, required=True)
    parser.add_argument("--sglang", type=Path, required=True)
    parser.add_argument("--vllm-v0", type=Path)
    args = parser.parse_args()
    pins = json.loads((ROOT / "docs" / "upstream.json").read_text())["pins"]
    report = missing(pins["vllm"], args.vllm) + missing(pins["sglang"], args.sglang, strip="python/")
    if args.vllm_v0:
        report += missing(pins["vllm-v0"], args.vllm_v0)
    print("\n".join(report) or "every listed file and symbol was found")
    return 1 if report else 0


if __name__ == "__main__":
    sys.exit(main())
