"""Fixtures shared by the test modules."""

import importlib.util
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from mini_llm.settings import EMBEDDED_MODEL

# The tests check the hidden cases as written: never with an instructor's secret seed (judge/secret.py), which a
# machine that wrote a student edition has in ~/.config. Subprocesses inherit this.
os.environ["JUDGE_SECRET_SEED"] = ""

ROOT = Path(__file__).resolve().parent.parent
NBGRADER_ASSIGNMENTS = [128, 130]  # every exercise a test autogrades with nbgrader
# The files that take minutes on 2 cores (--durations), longest first. `-n 2 --dist loadfile` hands whole files to
# the two workers in collection order; xdist would otherwise order them by their number of tests, which put these
# last, and one worker ran the last of them alone.
SLOW_FILES = ("test_student_edition.py", "test_notebooks.py", "test_learner_journey.py", "test_judge_class_attacks.py",
              "test_judge_under_load.py", "test_nbgrader.py", "test_judge_attacks.py", "test_engine_fuzz.py",
              "test_engine.py", "test_serving.py", "test_exercises_129_131.py", "test_serving_benchmark.py")


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config.option, "loadscopereorder"):  # pytest-xdist's scheduler: keep the order SLOW_FILES gives
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """SLOW_FILES first, longest first; the other files after them, in their order (a stable sort)."""
    rank = {name: i for i, name in enumerate(SLOW_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(SLOW_FILES)))


@pytest.fixture(scope="module")
def one_torch_thread() -> Iterator[None]:
    """One torch thread for a module's tests, as the judge's sandbox runs (OMP_NUM_THREADS=1): tiny matrices gain
    nothing from threads, and lose much when the two cores are shared. A module asks for it with
    `pytestmark = pytest.mark.usefixtures("one_torch_thread")`."""
    import torch

    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(saved)


@pytest.fixture(scope="module")
def model_dir() -> str:
    """The embedded checkpoint the judge grades with."""
    return str(EMBEDDED_MODEL)


@pytest.fixture(scope="session")
def nbgrader_generator():
    """nbgrader/make_assignments.py as a module."""
    spec = importlib.util.spec_from_file_location("make_assignments", ROOT / "nbgrader" / "make_assignments.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def generated_course(tmp_path_factory, nbgrader_generator) -> Path:
    """A course with the assignments of NBGRADER_ASSIGNMENTS written and released by `nbgrader generate_assignment`
    (source/, release/, the gradebook), once for every test file that autogrades: each grades in its own copy."""
    course = tmp_path_factory.mktemp("generated_course")
    bin_dir = os.path.dirname(sys.executable)  # nbgrader runs `alembic` from the venv's bin
    env = dict(os.environ, PATH=bin_dir + os.pathsep + os.environ.get("PATH", ""),
               NBGRADER_EXCHANGE_ROOT=str(course / "exchange"))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    nbgrader_generator.write_course(course, NBGRADER_ASSIGNMENTS)
    run = subprocess.run([os.path.join(bin_dir, "nbgrader"), "generate_assignment", "*"], cwd=course, env=env,
                         capture_output=True, text=True, timeout=600)  # every assignment of the course, in one run
    assert run.returncode == 0, run.stdout + run.stderr
    return course


@pytest.fixture(scope="session")
def copy_generated_course(generated_course) -> Callable[[Path], Path]:
    """copy(folder): the generated course copied into `folder` (which may exist), for a test to grade in."""
    return lambda folder: Path(shutil.copytree(generated_course, folder, dirs_exist_ok=True))
