"""What `python -m pytest` runs (tests/conftest.py), checked on a two-test project with this
repository's pytest settings: without paths it leaves out the tests marked slow, also when
pytest-xdist spreads the tests over workers (each worker reads the command line anew);
`-m slow` runs only those; a named file runs all of its tests in one process."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

TESTS = '''
import os
from pathlib import Path

import pytest


def _ran(name):
    (Path(os.environ["RAN_DIR"]) / name).write_text(os.environ.get("PYTEST_XDIST_WORKER", "main"))


def test_quick():
    _ran("quick")


@pytest.mark.slow
def test_slow():
    _ran("slow")
'''


def _run(tmp_path, *args, where="."):
    """The tests that ran and where ({name: xdist worker id or 'main'}), pytest started in proj/`where`."""
    ran = tmp_path / "ran"
    shutil.rmtree(ran, ignore_errors=True)
    ran.mkdir()
    # a clean pytest environment (this suite may itself run in an xdist worker), two workers where xdist is
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.update(RAN_DIR=str(ran), PYTEST_XDIST_AUTO_NUM_WORKERS="2")
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args], cwd=tmp_path / "proj" / where, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    return {p.name: p.read_text() for p in ran.iterdir()}


@pytest.fixture
def project(tmp_path):
    proj = tmp_path / "proj"
    (proj / "tests").mkdir(parents=True)
    shutil.copy(ROOT / "pyproject.toml", proj / "pyproject.toml")  # testpaths, addopts, markers
    shutil.copy(ROOT / "tests" / "conftest.py", proj / "tests" / "conftest.py")
    (proj / "tests" / "test_two.py").write_text(TESTS)
    return tmp_path


def test_without_paths_the_slow_tests_are_left_out_also_across_workers(project):
    assert set(_run(project, where="tests")) == {"quick"}  # started below the root: no paths either
    ran = _run(project)
    assert set(ran) == {"quick"}
    try:
        import xdist  # noqa: F401
    except ImportError:
        return
    assert ran["quick"].startswith("gw"), ran  # run by an xdist worker


def test_m_slow_runs_the_slow_tests_and_a_named_file_all_of_its_tests(project):
    assert set(_run(project, "-m", "slow")) == {"slow"}
    assert _run(project, "tests/test_two.py") == {"quick": "main", "slow": "main"}
