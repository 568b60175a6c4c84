"""The output layer (perfmodel/outputs.py): never onto an input, atomic, locked, through symlinks,
the mode kept; a report's manifest; `compare --plot` targets; every CLI writer refuses its input."""

from __future__ import annotations

import errno
import json
import multiprocessing
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from perfmodel import outputs
from perfmodel.cli import app
from perfmodel.outputs import OutputError, write_file
from perfmodel.reports.writer import manifest_name, staged_report

ROOT = Path(__file__).resolve().parents[1]
OBSERVED = ROOT / "tests" / "fixtures" / "golden_observed.yaml"
HF = ROOT / "tests" / "fixtures" / "hf" / "deepseek-v3.json"
PY = sys.executable


def _leftovers(d: Path) -> list[str]:
    """Temp and lock files the writer left in `d`."""
    return sorted(p.name for p in d.iterdir() if outputs.TMP_TAG in p.name or p.name.endswith(outputs.LOCK_SUFFIX))


def _one_line(text: str) -> str:
    lines = [x for x in text.splitlines() if x.strip()]
    assert len(lines) == 1 and "Traceback" not in text, text
    return lines[0]


# ------------------------------------------------------------------------------ write_file
def test_refuses_an_input_by_inode(tmp_path, monkeypatch):
    inp = tmp_path / "in.yaml"
    inp.write_text("user: data\n")
    os.link(inp, tmp_path / "hard.yaml")
    (tmp_path / "soft.yaml").symlink_to("in.yaml")
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub")
    for target in (inp, tmp_path / "hard.yaml", tmp_path / "soft.yaml", Path("../in.yaml"), Path("../sub/../hard.yaml")):
        with pytest.raises(OutputError, match="a file this command reads") as e:
            write_file(target, "new", inputs=[Path("../in.yaml")])
        assert "\n" not in str(e.value)
    assert inp.read_text() == "user: data\n" and (tmp_path / "soft.yaml").is_symlink()
    assert _leftovers(tmp_path) == []
    write_file(tmp_path / "other.yaml", "new", inputs=[inp, None, tmp_path / "missing.yaml"])  # others are fine
    assert (tmp_path / "other.yaml").read_text() == "new"


def test_refuses_a_directory(tmp_path):
    with pytest.raises(OutputError, match="is a directory"):
        write_file(tmp_path, "x")


@pytest.mark.parametrize("exc", [OSError(errno.ENOSPC, "No space left on device"), KeyboardInterrupt()])
def test_a_failure_mid_write_leaves_the_old_file(tmp_path, monkeypatch, exc):
    path = tmp_path / "calib.json"
    path.write_text('{"old": true}\n')

    def half(f, data):
        f.write(data[: len(data) // 2])
        f.flush()
        raise exc

    monkeypatch.setattr(outputs, "_write_all", half)
    with pytest.raises(OutputError if isinstance(exc, OSError) else KeyboardInterrupt) as e:
        write_file(path, '{"new": true, "padding": "' + "x" * 100_000 + '"}\n')
    if isinstance(exc, OSError):
        assert str(e.value) == f"cannot write --out {path}: No space left on device"
    assert path.read_text() == '{"old": true}\n' and _leftovers(tmp_path) == []


def test_symlink_written_through_and_mode_kept(tmp_path):
    real = tmp_path / "real" / "calib.json"
    real.parent.mkdir()
    real.write_text("old")
    os.chmod(real, 0o640)
    link = tmp_path / "calib.json"
    link.symlink_to(real)
    assert write_file(link, "new") == link
    assert link.is_symlink() and os.readlink(link) == str(real) and real.read_text() == "new"
    assert stat.S_IMODE(real.stat().st_mode) == 0o640
    dangling = tmp_path / "later.json"
    dangling.symlink_to(tmp_path / "real" / "later-target.json")
    write_file(dangling, "made")
    assert dangling.is_symlink() and (tmp_path / "real" / "later-target.json").read_text() == "made"
    fresh = tmp_path / "a" / "b" / "fresh.json"  # parents made; the mode open() would give
    write_file(fresh, b"\x00bytes")
    assert fresh.read_bytes() == b"\x00bytes" and stat.S_IMODE(fresh.stat().st_mode) == outputs.default_mode()
    assert _leftovers(tmp_path) == [] and _leftovers(tmp_path / "real") == []


@pytest.mark.skipif(not os.access("/dev/null", os.W_OK), reason="needs a writable /dev/null")
def test_a_device_is_written_in_place():
    write_file("/dev/null", "discarded")
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_stale_temp_of_a_killed_writer_is_removed(tmp_path):
    path = tmp_path / "p.json"
    dead = subprocess.run([PY, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True)
    stale = tmp_path / f".p.json.{outputs.TMP_TAG}{dead.stdout.strip()}-abc.tmp"
    stale.write_text("half")
    write_file(path, "whole")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.json"]


def _race(path: str, tag: int, n: int) -> None:
    for _ in range(n):
        write_file(path, bytes([65 + tag]) * 300_000)


def test_two_processes_racing_on_one_path_leave_a_whole_file(tmp_path):
    path = tmp_path / "out.bin"
    ctx = multiprocessing.get_context("fork" if sys.platform.startswith("linux") else "spawn")
    procs = [ctx.Process(target=_race, args=(str(path), t, 15)) for t in (0, 1)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0]
    data = path.read_bytes()
    assert len(data) == 300_000 and len(set(data)) == 1 and data[:1] in (b"A", b"B")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.bin"]


def test_atomic_text_publishes_whole_and_appends(tmp_path):
    log = tmp_path / "p.log"
    log.write_text("run 1\n")
    t = outputs.AtomicText(log, every_s=3600)
    t.write("run 2: ")
    t.publish()  # the first publish is never held back
    t.write("more\n")
    t.publish()  # within every_s: held back, the file stays whole as published
    assert log.read_text() == "run 1\nrun 2: "
    t.close()
    assert log.read_text() == "run 1\nrun 2: more\n" and _leftovers(tmp_path) == []


# ------------------------------------------------------------------------------ reports
def test_two_reports_in_one_folder_keep_each_others_files(tmp_path):
    out = tmp_path / "out"
    with staged_report(out, "H200") as st:
        (st / "H200_NOTES.md").write_text("h")
        (st / "H200_budget.png").write_bytes(b"h-fig")
    with staged_report(out, "B300") as st:
        (st / "B300_NOTES.md").write_text("b")
    with staged_report(out, "B300") as st:  # the same report again: still none of H200's files touched
        (st / "B300_NOTES.md").write_text("b2")
    names = sorted(p.name for p in out.iterdir())
    assert names == [manifest_name("B300"), manifest_name("H200"), "B300_NOTES.md", "H200_NOTES.md", "H200_budget.png"]
    assert json.loads((out / manifest_name("B300")).read_text())["files"].keys() == {"B300_NOTES.md"}
    with staged_report(out, "H200") as st:  # H200 no longer draws its budget figure: its own file goes
        (st / "H200_NOTES.md").write_text("h2")
    assert not (out / "H200_budget.png").exists() and (out / "B300_NOTES.md").read_text() == "b2"


def test_a_manifest_naming_a_users_file_never_deletes_it(tmp_path):
    out = tmp_path / "out"
    with staged_report(out, "A") as st:
        (st / "A_NOTES.md").write_text("a")
        (st / "A_fig.png").write_bytes(b"ours")
    outside = tmp_path / "outside.txt"
    outside.write_text("precious")
    (out / "A_user.txt").write_text("user's, named like ours")
    (out / "notes.txt").write_text("user's")
    m = out / manifest_name("A")
    doc = json.loads(m.read_text())
    sha_fig = doc["files"]["A_fig.png"]
    doc["files"] |= {"../outside.txt": sha_fig, str(outside): sha_fig, "A_user.txt": sha_fig, "notes.txt": sha_fig,
                     "A_/../outside.txt": sha_fig}
    m.write_text(json.dumps(doc))  # hand-edited
    (out / "A_fig.png").write_bytes(b"the user saved over our figure")
    with staged_report(out, "A") as st:  # draws no figure now
        (st / "A_NOTES.md").write_text("a2")
    assert outside.read_text() == "precious" and (out / "A_user.txt").exists() and (out / "notes.txt").exists()
    assert (out / "A_fig.png").read_bytes() == b"the user saved over our figure"  # changed since: not ours to delete


def test_report_cli_two_targets_and_a_refused_input(tmp_path):
    out = tmp_path / "rep"
    base = [PY, "-m", "perfmodel", "report", "--gpus", "8", "--spec", "none", "--concurrency", "1", "--out", str(out)]
    for target in ("h200", "b300"):
        r = subprocess.run(base + ["--target", target], capture_output=True, text=True, timeout=300, check=False)
        assert r.returncode == 0, r.stderr
    names = {p.name for p in out.iterdir()}
    assert {"H200_HBM3E_NVLINK4_NOTES.md", "B300_HBM3E_NVLINK5_NOTES.md", "H200_HBM3E_NVLINK4_breakdown.png"} <= names
    # a calibration saved under the name of the report's JSON is an input: the report writes nothing
    calib = out / "B300_HBM3E_NVLINK5_NOTES.json"
    r = CliRunner().invoke(app, ["calibrate", str(OBSERVED), "--out", str(calib), "--format", "json"])
    assert r.exit_code == 0, r.output
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    r = subprocess.run(base + ["--target", "b300", "--calibration", str(calib)], capture_output=True, text=True, timeout=300,
                       check=False)
    assert r.returncode == 2 and "a file this command reads" in _one_line(r.stderr)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


# ------------------------------------------------------------------------------ the CLI's writers
def test_calibrate_out_onto_its_input_is_refused(tmp_path):
    obs = tmp_path / "observed.yaml"
    shutil.copy(OBSERVED, obs)
    os.link(obs, tmp_path / "same.yaml")
    before = obs.read_bytes()
    for target in (obs, tmp_path / "same.yaml"):
        r = CliRunner().invoke(app, ["calibrate", str(obs), "--out", str(target)])
        assert r.exit_code == 2 and "a file this command reads" in _one_line(r.stderr), r.output
    assert obs.read_bytes() == before


def test_models_import_out_onto_its_config_is_refused(tmp_path):
    cfg = tmp_path / "config.json"
    shutil.copy(HF, cfg)
    (tmp_path / "model.yaml").symlink_to(cfg)
    r = CliRunner().invoke(app, ["models", "import", str(cfg), "--out", str(tmp_path / "model.yaml")])
    assert r.exit_code == 2 and "a file this command reads" in _one_line(r.stderr)
    assert cfg.read_bytes() == HF.read_bytes()
    r = CliRunner().invoke(app, ["models", "import", str(cfg), "--out", str(tmp_path / "ok.yaml")])
    assert r.exit_code == 0 and yaml.safe_load((tmp_path / "ok.yaml").read_text())["name"], r.output


def test_compare_plot_into_a_folder_and_an_unknown_format(tmp_path):
    args = ["compare", "--target", "h200", "--gpus", "8", "--concurrency", "1,8", "--format", "json"]
    folder = tmp_path / "plots"
    folder.mkdir()
    r = CliRunner().invoke(app, args + ["--plot", str(folder)])
    assert r.exit_code == 0, r.output
    assert r.stderr.strip() == f"Pareto plot: {folder / 'compare.png'}"
    assert (folder / "compare.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    r = CliRunner().invoke(app, args + ["--plot", f"{tmp_path}/new/"])  # a path ending in /: a folder
    assert r.exit_code == 0 and (tmp_path / "new" / "compare.png").is_file(), r.output
    r = CliRunner().invoke(app, args + ["--plot", str(tmp_path / "x.xyz")])
    assert r.exit_code == 2 and "unsupported format '.xyz'" in _one_line(r.stderr) and r.stdout == ""
    assert not (tmp_path / "x.xyz").exists()
    r = CliRunner().invoke(app, args + ["--plot", str(tmp_path / "p.svg")])
    assert r.exit_code == 0 and (tmp_path / "p.svg").read_text().lstrip().startswith("<?xml")
