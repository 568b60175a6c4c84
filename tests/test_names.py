"""Names users use: layouts as the engines name them (old names kept), a one-line hint for
'ep8'-style typos, -h on every command, one set of CSV columns for project, compare and
`Projection.rows()`, `compare --plot` without matplotlib in one line, shared files written 0644,
no lock file left beside a report's --out."""

import json
import os
import stat

import pytest
from typer.main import get_command
from typer.testing import CliRunner

import perfmodel
from perfmodel.cli import app
from perfmodel.scenario import LAYOUTS, Request, make_request

runner = CliRunner()


def run(*args):
    return runner.invoke(app, list(args))


@pytest.mark.parametrize("name,key", [("tp", "tp"), ("tp+ep", "tp-attn-ep-moe"), ("ep-moe", "tp-attn-ep-moe"),
                                      ("TP+EP", "tp-attn-ep-moe"), ("tp-attn-ep-moe", "tp-attn-ep-moe"),
                                      ("dp-attn+ep", "ep"), ("ep", "ep")])
def test_engine_layout_names_and_old_ones(name, key):
    assert Request(parallel=name).parallel == key


def test_an_engine_name_projects_as_its_old_name():
    new = perfmodel.project(target="h200", gpus=8, parallel="tp+ep", concurrency=[1, 8])
    old = perfmodel.project(target="h200", gpus=8, parallel="tp-attn-ep-moe", concurrency=[1, 8])
    assert new.to_dict() == old.to_dict()


def test_every_layout_name_is_declared_once():
    names = [n for lay in LAYOUTS for n in (lay.name, *lay.aliases)]
    assert len(names) == len(set(names))
    assert {lay.key for lay in LAYOUTS} == {"tp", "ep", "tp-attn-ep-moe"}


@pytest.mark.parametrize("typo,want", [("ep8", "--parallel tp+ep --gpus 8"), ("tp8", "--parallel tp --gpus 8"),
                                       ("EP4", "--parallel tp+ep --gpus 4"), ("dp8", "--parallel dp-attn+ep --gpus 8")])
def test_a_gpu_count_in_the_layout_name_gets_a_hint(typo, want):
    with pytest.raises(ValueError, match="GPU count goes in --gpus"):
        make_request(parallel=typo)
    r = run("project", "--parallel", typo, "-c", "1")
    assert r.exit_code == 2, r.output
    assert len(r.output.strip().splitlines()) == 1 and want in r.output and "memory" not in r.output


def test_observed_takes_engine_layout_names():
    from perfmodel.request import parse_observed

    assert parse_observed("rtx-pro-6000,tp+ep8,c=1,65tok/s")["parallel"] == "tp-attn-ep-moe"
    assert parse_observed("rtx-pro-6000,dp-attn+ep8,c=1,65tok/s")["parallel"] == "ep"
    assert parse_observed("rtx-pro-6000,tp-attn-ep-moe8,c=1,65tok/s")["parallel"] == "tp-attn-ep-moe"  # the old name


def test_the_data_parallel_memory_error_names_the_engine_layout():
    r = run("project", "--target", "rtx-pro-6000", "--gpus", "4", "--parallel", "ep", "-c", "1")
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1
    assert "does not fit" in r.output and "--parallel tp+ep" in r.output


def _commands(cmd, path=()):
    yield path, cmd
    if hasattr(cmd, "commands"):  # a group
        for name, sub in cmd.commands.items():
            yield from _commands(sub, path + (name,))


def test_dash_h_is_help_on_every_command():
    seen = 0
    for path, _ in _commands(get_command(app)):
        r = run(*path, "-h")
        assert r.exit_code == 0, (path, r.output)
        assert "Usage:" in r.output, path
        seen += 1
    assert seen >= 14


def test_csv_columns_are_the_same_for_project_compare_and_rows():
    args = ["--target", "b300", "--gpus", "8", "--concurrency", "1,8", "--format", "csv"]
    p = run("project", *args)
    c = run("compare", *args)
    assert p.exit_code == 0 and c.exit_code == 0, (p.output, c.output)
    head_p, head_c = p.output.splitlines()[0], c.output.splitlines()[0]
    assert head_p == head_c
    rows = perfmodel.project(target="b300", gpus=8, concurrency=[1, 8]).rows()
    from perfmodel.model.result import row_columns

    assert head_p.split(",") == row_columns(rows)
    assert set(rows[0]) <= set(head_p.split(","))
    assert p.output == c.output  # one configuration: the same rows


def test_compare_csv_says_why_a_configuration_did_not_run():
    r = run("compare", "--target", "h200", "--gpus", "4,8", "--concurrency", "1", "--format", "csv")
    assert r.exit_code == 0, r.output
    lines = r.output.strip().splitlines()
    head = lines[0].split(",")
    four = next(ln for ln in lines[1:] if ln.split(",")[head.index("n_gpus")] == "4")
    assert "does not fit" in four


def test_compare_plot_without_matplotlib_is_one_line(monkeypatch, tmp_path):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else real(name, *a))
    r = run("compare", "--target", "b300", "--concurrency", "1", "--plot", str(tmp_path / "p.png"))
    assert r.exit_code == 2
    assert len(r.output.strip().splitlines()) == 1 and "matplotlib" in r.output
    assert not (tmp_path / "p.png").exists()


@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    yield
    os.umask(old)


def test_calibration_file_is_written_0644(tmp_path, umask_022):
    obs = tmp_path / "obs.yaml"
    obs.write_text("engine: e\npoints:\n  - {target: h200, gpus: 8, model: kimi-k2.6, concurrency: 1, "
                   "tokens_per_s_per_stream: 60}\n")
    out = tmp_path / "calib.json"
    r = run("calibrate", str(obs), "--out", str(out), "--format", "json")
    assert r.exit_code == 0, r.output
    assert stat.S_IMODE(out.stat().st_mode) == 0o644
    assert json.loads(out.read_text())["points"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["calib.json", "obs.yaml"]  # no temporary file left


def test_report_files_0644_and_no_lock_file_beside_out(tmp_path, umask_022):
    from perfmodel.reports.writer import staged_report

    out = tmp_path / "notes"
    for _ in range(2):
        with staged_report(out, "A") as st:
            (st / "A_notes.md").write_text("x")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes"]
    assert stat.S_IMODE((out / "A_notes.md").stat().st_mode) == 0o644
