"""Shared fixtures of the physics tests, and what `python -m pytest` runs.

`python -m pytest` with no test paths (the README's command) runs the quick suite: the tests
marked `slow` (the Triton CPU interpreter at its larger shapes, offline sm_90 compiles) are left
out, and the rest is spread over the CPU cores with pytest-xdist (the dev extra) where that is
installed. `python -m pytest -m slow` runs the slow ones (CI runs both). Naming test files or
tests (`python -m pytest tests/test_x.py`, `python -m pytest tests`) runs every test they hold, in
one process, as pytest does by default; `-m`, `-n`, `-s`, `--pdb` and `-p no:xdist` keep their
meaning.
"""

import pytest

QUICK_SUITE = "not slow"  # the marker expression of `python -m pytest` without paths
NO_PATHS = (pytest.Config.ArgsSource.TESTPATHS, pytest.Config.ArgsSource.INVOCATION_DIR)  # run in the root or below
MAX_WORKERS = 8  # each worker imports torch and triton; past a few workers their start-up dominates


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config):
    if config.args_source not in NO_PATHS:
        return
    if not config.option.markexpr:  # here and in each xdist worker (a worker reads the same command line)
        config.option.markexpr = QUICK_SUITE
    if hasattr(config, "workerinput") or not config.pluginmanager.hasplugin("xdist"):
        return
    if config.option.collectonly or config.option.usepdb:
        return
    if config.option.numprocesses is not None or config.option.tx or config.option.dist != "no":
        return  # the user chose how to distribute
    if config.option.capture == "no":
        return  # -s: the output of the tests is wanted on this terminal
    workers = min(config.hook.pytest_xdist_auto_num_workers(config=config), MAX_WORKERS)
    if workers > 1:
        config.option.numprocesses = workers
        config.option.dist = "worksteal"  # idle workers take queued tests from busy ones (tests of 0.01 s to 12 s)
        config.option.tx = ["popen"] * workers


def pytest_terminal_summary(terminalreporter, config):
    if config.option.markexpr == QUICK_SUITE and config.args_source in NO_PATHS:
        terminalreporter.write_line("the tests marked slow were left out: `python -m pytest -m slow` runs them")


@pytest.fixture(scope="module")
def hand_path(tmp_path_factory):
    """The hand-made profile of test_physics_step, saved as a profile file (for Request(profile=...))."""
    from test_physics_step import hand_profile

    from perfmodel.profile import save_profile

    path = tmp_path_factory.mktemp("hand") / "hand.json"
    save_profile(hand_profile(), path)
    return str(path)
