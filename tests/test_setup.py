"""The setup promises of the README: one dependency list in two formats, and CI running the README's tests."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~\[ ]", requirement.strip(), maxsplit=1)[0].lower()


def test_pyproject_and_environment_name_the_same_dependencies():
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    env_lines = (ROOT / "environment.yml").read_text().split("- pip:")[1].splitlines()
    conda_pip = [ln.strip()[2:] for ln in env_lines if ln.strip().startswith("- ") and "-e ." not in ln]
    assert sorted(map(_name, pyproject)) == sorted(map(_name, conda_pip))


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    commands = re.findall(r"```bash\n(.*?)\n```", readme, flags=re.S)
    test_command = next(c for c in commands if "pytest" in c)
    assert test_command in (ROOT / ".ci" / "run").read_text()


def test_ci_installs_the_cpu_build_of_torch():
    assert "torch==2.13.0" in (ROOT / ".ci" / "run").read_text()
