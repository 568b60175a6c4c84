"""Nothing lost: the report folder and the measured profile survive kills, failures
and concurrent writers; user files are never touched.

The kill tests SIGKILL a real `perfmodel report` and a process saving profiles in a loop at
random moments, then check that what is left loads and is complete (old or new, never a part).
"""

from __future__ import annotations

import json
import os
import random
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from perfmodel.profile import (
    Profile,
    Provenance,
    load_profile,
    save_profile,
    stale_temp_files,
)
from perfmodel.reports.writer import WriteError, is_manifest, manifest_name, staged_report

PY = sys.executable


def _png_ok(p: Path) -> bool:
    b = p.read_bytes()
    return b.startswith(b"\x89PNG\r\n\x1a\n") and b.endswith(b"IEND\xaeB`\x82")


def _complete(out: Path) -> None:
    """Every report file in `out` is whole: JSON parses, PNGs end, markdown is non-empty."""
    for p in out.iterdir():
        if p.suffix == ".json":
            json.loads(p.read_text())
        elif p.suffix == ".png":
            assert _png_ok(p), p
        elif p.suffix == ".md":
            assert p.stat().st_size > 0, p


# ------------------------------------------------------------------------------ report writer
def test_staged_report_keeps_user_files_and_removes_only_own_stale(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "mine.txt").write_text("user data")
    (out / ".perfmodel-write-probe").write_text("a user file with the old probe's name")
    with staged_report(out, "A") as st:
        (st / "A_notes.md").write_text("a")
        (st / "A_fig.png").write_bytes(b"png1")
    assert sorted(json.loads((out / manifest_name("A")).read_text())["files"]) == ["A_fig.png", "A_notes.md"]
    with staged_report(out, "A") as st:  # the second report no longer draws the figure
        (st / "A_notes.md").write_text("b")
    assert sorted(p.name for p in out.iterdir()) == [".A.perfmodel-report.json", ".perfmodel-write-probe", "A_notes.md",
                                                     "mine.txt"]
    assert (out / "mine.txt").read_text() == "user data"
    assert (out / ".perfmodel-write-probe").read_text() == "a user file with the old probe's name"
    assert not list(tmp_path.glob(".out.perfmodel-staging-*"))


def test_failed_report_leaves_out_as_it_was(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "A_notes.md").write_text("old")
    with pytest.raises(RuntimeError), staged_report(out, "A") as st:
        (st / "A_notes.md").write_text("new, half written")
        raise RuntimeError("figure failed")
    assert (out / "A_notes.md").read_text() == "old" and sorted(p.name for p in out.iterdir()) == ["A_notes.md"]
    new = tmp_path / "a" / "b" / "fresh"
    with pytest.raises(RuntimeError), staged_report(new, "A"):
        raise RuntimeError("boom")
    assert not (tmp_path / "a").exists()  # nothing created, not even the parents


def test_out_that_is_a_file_is_refused_untouched(tmp_path):
    f = tmp_path / "notes.md"
    f.write_text("user")
    with pytest.raises(WriteError, match="not a directory"), staged_report(f, "A"):
        pass
    assert f.read_text() == "user"


def test_concurrent_writers_do_not_interleave(tmp_path):
    out = tmp_path / "out"
    errors = []

    def writer(tag: bytes):
        try:
            for _ in range(5):
                with staged_report(out, "R") as st:
                    for i in range(3):
                        (st / f"R_f{i}.bin").write_bytes(tag * 20000)
                        time.sleep(0.002)
        except Exception as e:  # noqa: BLE001  # pragma: no cover
            errors.append(e)

    ts = [threading.Thread(target=writer, args=(t,)) for t in (b"A", b"B")]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors
    tags = {(out / f"R_f{i}.bin").read_bytes()[:1] for i in range(3)}
    assert all(len(set((out / f"R_f{i}.bin").read_bytes())) == 1 for i in range(3))  # no file is half one, half other
    assert len(tags) == 1  # the last writer's set, whole


def test_report_cli_keeps_user_files(tmp_path):
    out = tmp_path / "rep"
    out.mkdir()
    (out / "keep.csv").write_text("1,2,3\n")
    (out / ".perfmodel-write-probe").write_text("mine")
    r = subprocess.run([PY, "-m", "perfmodel", "report", "--target", "h200", "--gpus", "8", "--spec", "none",
                        "--concurrency", "1", "--out", str(out)], capture_output=True, text=True, timeout=300, check=False)
    assert r.returncode == 0, r.stderr
    assert (out / "keep.csv").read_text() == "1,2,3\n" and (out / ".perfmodel-write-probe").read_text() == "mine"
    manifests = [p for p in out.iterdir() if is_manifest(p.name)]
    assert len(manifests) == 1
    listed = json.loads(manifests[0].read_text())["files"]
    assert any(f.endswith("_NOTES.md") for f in listed) and all((out / f).exists() for f in listed)
    _complete(out)
    bad = subprocess.run([PY, "-m", "perfmodel", "report", "--target", "h200", "--gpus", "3", "--out", str(tmp_path / "new")],
                         capture_output=True, text=True, timeout=300, check=False)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr and not (tmp_path / "new").exists()


@pytest.mark.slow  # four `perfmodel report` processes, three killed at random moments
def test_sigkill_report_leaves_old_or_new_files(tmp_path):
    """SIGKILL `perfmodel report` at random moments: each file is the old one or the new one, whole."""
    out = tmp_path / "rep"
    args = [PY, "-m", "perfmodel", "report", "--target", "b300", "--gpus", "8", "--spec", "none", "--concurrency", "1,8",
            "--out", str(out)]
    subprocess.run(args, check=True, capture_output=True, timeout=300)
    (out / "user.txt").write_text("precious")
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    rng = random.Random(16)
    for _ in range(3):
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.3, 3.0))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert (out / "user.txt").read_text() == "precious"
        assert set(before) <= {p.name for p in out.iterdir()}  # nothing lost
        _complete(out)


# ------------------------------------------------------------------------------ profile writer
def _profile(n: int) -> Profile:
    prov = Provenance(kind="measured", gpu_name="test", timestamp=f"t{n}", note="x" * (50_000 * (n % 3 + 1)))
    return Profile(provenance=prov)


SAVER = """
import sys
from perfmodel.profile import Profile, Provenance, save_profile
path = sys.argv[1]
i = 0
while True:
    prov = Provenance(kind="measured", gpu_name="test", timestamp=f"t{i}", note="x" * (50_000 * (i % 3 + 1)))
    save_profile(Profile(provenance=prov), path)
    i += 1
"""


def test_sigkill_profile_writer_leaves_whole_profile(tmp_path):
    path = tmp_path / "p.json"
    save_profile(_profile(0), path)
    os.chmod(path, 0o640)
    rng = random.Random(7)
    for _ in range(6):
        proc = subprocess.Popen([PY, "-c", SAVER, str(path)])
        time.sleep(rng.uniform(0.2, 0.8))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        p = load_profile(path)  # whole: loads and validates
        assert p.provenance.timestamp.startswith("t") and len(p.provenance.note) % 50_000 == 0
        assert stat.S_IMODE(path.stat().st_mode) == 0o640  # the mode is kept
        for t in stale_temp_files(path):  # what SIGKILL left; the next measure removes these
            t.unlink()
    # the writers' lock file (`.p.json.perfmodel-lock`, empty, reused by the next writer) may stay
    assert sorted(x.name for x in tmp_path.iterdir() if not x.name.endswith(".perfmodel-lock")) == ["p.json"]


def test_save_profile_refuses_nan(tmp_path):
    path = tmp_path / "p.json"
    save_profile(_profile(1), path)
    before = path.read_bytes()
    data = _profile(2).model_dump(mode="json")
    data["ceilings"]["read_GBps"] = float("nan")
    with pytest.raises(ValueError):
        save_profile(data, path)
    assert path.read_bytes() == before and sorted(x.name for x in tmp_path.iterdir()) == ["p.json"]


# ------------------------------------------------------------------------------ measure runner
torch = pytest.importorskip("torch")


def _bench(calls, name, action=None):
    from perfmodel.measure.common import BenchOutput
    from perfmodel.profile import BenchResult

    def run(ctx):
        calls.append(name)
        if action:
            action()
        return BenchOutput(BenchResult(status="ok"))

    return run


def test_measure_never_destroys_existing_profile(tmp_path, capsys):
    from perfmodel.measure.runner import run_measure

    out = tmp_path / "p.json"
    save_profile(_profile(1), out)
    os.chmod(out, 0o644)
    before = out.read_bytes()
    calls = []
    assert run_measure(out, registry={"a": _bench(calls, "a")}, require_cuda=False, progress=False) == 2
    err = capsys.readouterr().err
    assert "--resume" in err and "--force" in err and out.read_bytes() == before and not calls
    # --force: the old profile stays until the first bench has finished; an interrupt before that keeps it
    reg = {"a": _bench(calls, "a", action=lambda: os.kill(os.getpid(), signal.SIGTERM))}
    assert run_measure(out, registry=reg, require_cuda=False, progress=False, force=True) == 130
    assert out.read_bytes() == before
    assert run_measure(out, registry={"a": _bench(calls, "a")}, require_cuda=False, progress=False, force=True) == 0
    assert set(load_profile(out).benches) == {"a"} and stat.S_IMODE(out.stat().st_mode) == 0o644
    assert not [p for p in tmp_path.iterdir() if p.suffix == ".tmp"]


def test_sigterm_keeps_finished_benches_and_no_temp_files(tmp_path):
    from perfmodel.measure.runner import run_measure

    out = tmp_path / "p.json"
    calls = []
    reg = {"a": _bench(calls, "a"), "b": _bench(calls, "b", action=lambda: os.kill(os.getpid(), signal.SIGTERM)),
           "c": _bench(calls, "c")}
    assert run_measure(out, registry=reg, require_cuda=False, progress=False) == 130
    assert calls == ["a", "b"] and set(load_profile(out).benches) == {"a"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.json", "p.log"]
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # restored


def test_resume_refuses_another_gpu_unless_forced(tmp_path, capsys):
    from perfmodel.measure.runner import run_measure

    out = tmp_path / "p.json"
    other = Profile(provenance=Provenance(kind="measured", gpu_name="NVIDIA B200", timestamp="t", torch="9.9"))
    save_profile(other, out)
    before = out.read_bytes()
    calls = []
    assert run_measure(out, registry={"a": _bench(calls, "a")}, require_cuda=False, progress=False, resume=True) == 2
    assert "gpu_name" in capsys.readouterr().err and out.read_bytes() == before and not calls
    assert run_measure(out, registry={"a": _bench(calls, "a")}, require_cuda=False, progress=False, resume=True,
                       force=True) == 0
    assert calls == ["a"] and load_profile(out).provenance.gpu_name == "NVIDIA B200"


def test_measure_out_checks_before_cuda(tmp_path, capsys):
    from perfmodel.measure.runner import run_measure

    assert run_measure(tmp_path, only=["ceilings"]) == 2
    assert "is a directory" in capsys.readouterr().err
    assert run_measure(tmp_path / "p.json", only=["nosuch"]) == 2
    assert "nosuch" in capsys.readouterr().err
