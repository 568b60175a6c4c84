"""Output that survives the environment: a stdout that cannot encode the tables' characters gets
them in ASCII; a closed or full stdout is one line on stderr and exit 1; a reader that stops early
ends the command quietly. Real processes (`python -m perfmodel`), as a shell runs them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

PY = sys.executable
PROJECT = [PY, "-m", "perfmodel", "project", "--target", "b300", "--gpus", "8", "--model", "kimi-k2.6", "--concurrency", "1"]
posix = pytest.mark.skipif(os.name != "posix" or shutil.which("bash") is None, reason="needs a POSIX shell")


def _env(**kw) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LC_", "PYTHONIOENCODING", "PYTHONUTF8"))}
    env.pop("LANG", None)
    return env | kw


def _sh(cmd: str, **env) -> subprocess.CompletedProcess:
    args = " ".join(PROJECT)
    return subprocess.run(["bash", "-c", cmd.replace("{project}", args)], capture_output=True, env=_env(**env), timeout=120,
                          check=False)


@pytest.mark.parametrize("env", [{"PYTHONIOENCODING": "ascii", "LC_ALL": "C"}, {"PYTHONIOENCODING": "ascii"},
                                 {"LC_ALL": "C", "PYTHONUTF8": "0"}], ids=["ascii+C", "ascii", "C-no-utf8-mode"])
@pytest.mark.parametrize("fmt", ["table", "json"])
def test_ascii_stdout_gets_ascii(env, fmt):
    r = subprocess.run(PROJECT + ["--format", fmt], capture_output=True, env=_env(**env), timeout=120, check=False)
    assert r.returncode == 0 and b"Traceback" not in r.stderr, r.stderr.decode(errors="replace")
    text = r.stdout.decode("ascii")  # raises on any byte above 127
    if fmt == "table":
        assert "8x NVIDIA B300" in text and "tok/s/stream" in text and "tau" in text
        rows = [x for x in text.splitlines() if x.startswith("|")]
        assert len({len(x) for x in rows[:3]}) == 1, rows[:3]  # columns still line up in ASCII
    else:
        assert '"points"' in text


@pytest.mark.parametrize("args", [["hw", "show", "b300", "--format", "csv"], ["hw", "show", "b300"], ["models", "show", "kimi-k2.6"],
                                  ["step", "--target", "b300", "--gpus", "8", "--decode", "8@4096"]])
def test_ascii_stdout_other_commands(args):
    """Text echoed outside the tables (CSV cells, sources with '—' and '×') is transliterated too."""
    r = subprocess.run([PY, "-m", "perfmodel", *args], capture_output=True, env=_env(PYTHONIOENCODING="ascii", LC_ALL="C"),
                       timeout=120, check=False)
    assert r.returncode == 0 and b"Traceback" not in r.stderr, r.stderr.decode(errors="replace")
    assert r.stdout.decode("ascii").strip()


def test_utf8_stdout_keeps_the_symbols():
    r = subprocess.run(PROJECT, capture_output=True, env=_env(PYTHONIOENCODING="utf-8"), timeout=120, check=False)
    assert r.returncode == 0 and "8× NVIDIA B300" in r.stdout.decode("utf-8")


@posix
def test_closed_stdout_is_one_line_and_exit_1():
    r = _sh("{project} >&-")
    assert r.returncode == 1, r.stderr
    assert r.stderr.decode().strip() == "perfmodel: standard output is closed; redirect it (to a file or /dev/null)"


@posix
@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("fmt", ["table", "json", "csv"])
def test_full_stdout_is_one_line_and_exit_1(fmt):
    r = _sh(f"{{project}} --format {fmt} > /dev/full")
    assert r.returncode == 1, r.stderr
    assert r.stderr.decode().strip() == "perfmodel: cannot write to standard output: No space left on device"


@posix
@pytest.mark.skipif(shutil.which("head") is None, reason="needs head")
def test_broken_pipe_in_ascii_mode_is_quiet():
    r = _sh("set -o pipefail; {project} | head -1", PYTHONIOENCODING="ascii")
    assert r.returncode == 0 and r.stderr == b"" and r.stdout.decode("ascii").startswith("kimi-k2.6 on 8x")
