"""The Python API (Request, Projection, perfmodel.project), `perfmodel compare`, what-if purity,
and CLI polish (version, formats, no truncation when piped, quiet broken pipe)."""

import dataclasses
import json
import math
import os
import shutil
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest
from typer.testing import CliRunner

import perfmodel
from perfmodel.api import projector
from perfmodel.cli import app
from perfmodel.model.whatif import MACHINE_WHATIFS, scale_laws
from perfmodel.specs import registry

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()


def run(*args):
    return runner.invoke(app, list(args))


# ------------------------------------------------------------------------------ Request
@pytest.mark.parametrize("field,value", [
    ("parallel", "banana"), ("spec", "bogus"), ("graphs", "no"), ("gpus", 0), ("gpus", "8"), ("concurrency", []),
    ("concurrency", [0, 8]), ("context", 0), ("budget", 0), ("budget", "many"), ("host_cpu_factor", 0.0),
    ("host_cpu_factor", float("nan")), ("host_cpu_factor", float("inf")), ("tree_build", "tpu"),
])
def test_bad_request_field_raises_value_error_naming_it(field, value):
    with pytest.raises(ValueError, match=field):
        perfmodel.Request(**{field: value})


def test_unknown_request_field_is_refused():
    with pytest.raises(ValueError, match="warp"):
        perfmodel.Request(warp=9)


def test_request_is_checked_again_on_replace():
    req = perfmodel.Request(target="h200")
    with pytest.raises(ValueError, match="parallel"):
        dataclasses.replace(req, parallel="banana")


def test_request_accepts_spec_objects():
    gpu, model = registry.load_gpu("b300"), registry.load_model("llama-3.1-70b")
    by_obj = perfmodel.project(perfmodel.Request(target=gpu, gpus=2, model=model, concurrency=[1, 8]))
    by_name = perfmodel.project(target="b300", gpus=2, model="llama-3.1-70b", concurrency=[1, 8])
    assert by_obj.to_dict() == by_name.to_dict()


# ------------------------------------------------------------------------------ Projection
def test_projection_dump_is_the_cli_json():
    args = ["--target", "b300", "--gpus", "8", "--spec", "ddtree", "--concurrency", "1,8,512"]
    r = run("project", *args, "--format", "json")
    assert r.exit_code == 0, r.output
    proj = perfmodel.project(target="b300", gpus=8, spec="ddtree", concurrency=[1, 8, 512])
    assert r.output == proj.to_json() + "\n"
    assert proj.model_dump(mode="json") == json.loads(r.output)


def test_point_keys_and_their_order():
    """Keys as `perfmodel project -f json` printed them before the typed result, new ones at the end."""
    proj = perfmodel.project(target="b300", gpus=8, spec="ddtree", concurrency=[1, 512])
    fit, unfit = (p.to_dict() for p in proj.points)
    assert list(fit) == ["concurrency", "step_ms", "tokens_per_s_per_stream", "tokens_per_s", "tau", "tau_sigma",
                         "tau_measured", "budget", "breakdown_ms", "bottleneck", "n_kernels", "interval", "spec_split",
                         "fits_in_memory", "memory_GB", "budget_curve", "budget_note", "speculation_fits",
                         "tokens_per_s_per_gpu", "tpot_ms", "itl_ms"]
    assert list(unfit) == ["concurrency", "fits_in_memory", "budget", "memory_GB", "note"]
    assert list(proj.to_dict())[:3] == ["target", "model", "parallel"]


def test_new_point_fields_follow_their_definitions():
    proj = perfmodel.project(target="h200", gpus=8, spec="ddtree", concurrency=[1, 32])
    for p in proj.points:
        assert p.tpot_ms == pytest.approx(p.step_ms / p.tau)
        assert p.itl_ms == p.step_ms
        assert p.tokens_per_s_per_gpu == pytest.approx(p.tokens_per_s / 8)
        assert p.tokens_per_s == pytest.approx(p.tokens_per_s_per_stream * p.concurrency)


def test_rows_are_flat_and_one_per_point():
    proj = perfmodel.project(target="b300", gpus=8, concurrency=[1, 8, 4096])
    rows = proj.rows()
    assert [r["concurrency"] for r in rows] == [1, 8, 4096]
    for r in rows:
        assert all(v is None or isinstance(v, (int, float, str, bool)) for v in r.values()), r
        assert r["gpu"] == "b300-sxm" and r["n_gpus"] == 8
    assert rows[0]["fits_in_memory"] and not rows[2]["fits_in_memory"] and rows[2]["tokens_per_s"] is None
    assert any(k.endswith("_ms") and k not in ("step_ms", "tpot_ms", "itl_ms") for k in rows[0])


def test_schema_projection_and_request():
    r = run("schema", "projection")
    assert r.exit_code == 0, r.output
    s = json.loads(r.output)
    assert "points" in s["properties"] and "Point" in s["$defs"]
    assert "tpot_ms" in s["$defs"]["Point"]["properties"]
    r = run("schema", "request")
    assert r.exit_code == 0 and "parallel" in json.loads(r.output)["properties"]


def test_readme_python_example_runs():
    """The README's notebook example, extracted and run as written."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## Python API", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    assert "perfmodel.project(" in code and len(code.strip().splitlines()) <= 12
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert "tok/s total" in out.stdout


def test_import_perfmodel_and_projecting_are_light():
    """`import perfmodel` loads no model code; the CLI and a projection never import torch & co."""
    code = ("import sys, perfmodel; assert 'perfmodel.model.project' not in sys.modules; "
            "import perfmodel.cli; perfmodel.project(target='b300'); "
            "print([m for m in ('torch', 'triton', 'scipy', 'matplotlib') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]"


# ------------------------------------------------------------------------------ what-if
def test_whatif_functions_are_pure():
    pj = projector(perfmodel.Request(target="b300", gpus=8, concurrency=[1]))
    before = pj.machine
    laws_before = dict(before.laws)
    faster = scale_laws(2.0, "bw_GBps")(before)
    assert faster is not before and pj.machine is before and before.laws == laws_before
    for c, law in faster.laws.items():
        assert law.bw_GBps == pytest.approx(2 * laws_before[c].bw_GBps)
    for name, fn in MACHINE_WHATIFS.items():
        assert fn(1.0)(before) == before, name
    base = pj.point(1).tokens_per_s_per_stream
    assert pj.variant(machine=faster).point(1).tokens_per_s_per_stream > base
    assert pj.point(1).tokens_per_s_per_stream == base  # the original projector is unchanged


# ------------------------------------------------------------------------------ compare
SWEEP = ["--target", "h200,b300", "--gpus", "4,8", "--parallel", "tp,tp-attn-ep-moe", "--concurrency", "1,8,128"]


def test_compare_json_rows_cover_the_cross_product():
    r = run("compare", *SWEEP, "--format", "json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert len(d["configs"]) == 8 and d["configs"][0] == "4× h200 tp"
    by = {}
    for row in d["rows"]:
        by.setdefault(row["config"], []).append(row)
    assert set(by) == set(d["configs"])
    # 4x H200 cannot hold Kimi's weights: one row with the reason; the rest one row per concurrency
    assert len(by["4× h200 tp"]) == 1 and "does not fit" in by["4× h200 tp"][0]["error"]
    assert [x["concurrency"] for x in by["8× b300 tp"]] == [1, 8, 128]
    proj = perfmodel.project(target="b300", gpus=8, concurrency=[1, 8, 128])
    got = by["8× b300 tp"][1]
    assert got["tokens_per_s_per_gpu"] == pytest.approx(proj.points[1].tokens_per_s_per_gpu)
    assert got["bottleneck"] == proj.points[1].bottleneck


def test_compare_table_csv_and_plot(tmp_path):
    r = run("compare", *SWEEP)
    assert r.exit_code == 0, r.output
    assert "does not fit" in r.output and "8× b300 tp-attn-ep-moe" in r.output
    r = run("compare", *SWEEP, "--format", "csv")
    lines = r.output.strip().splitlines()
    assert lines[0].startswith("gpu,n_gpus,link,model,parallel,context,spec,graphs,concurrency,fits_in_memory,"
                               "tokens_per_s_per_stream")
    png = tmp_path / "pareto.png"
    r = run("compare", *SWEEP, "--format", "csv", "--plot", str(png))
    assert r.exit_code == 0, r.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_pareto_frontier():
    from perfmodel.compare import pareto_frontier

    pts = [(10, 100), (20, 80), (15, 70), (30, 10), (5, 90)]
    assert pareto_frontier(pts) == [(10, 100), (20, 80), (30, 10)]


@pytest.mark.parametrize("args,needle", [
    (["compare", "--target", "h200,b3000"], "did you mean"),
    (["compare", "--gpus", "4,x"], "--gpus"),
    (["compare", "--parallel", "tp,banana"], "parallel"),
    (["project", "--target", "h200,b300"], "compare"),
])
def test_compare_and_project_bad_input_one_line_exit_2(args, needle):
    r = run(*args)
    assert r.exit_code == 2, r.output
    assert len(r.output.strip().splitlines()) == 1 and needle in r.output


# ------------------------------------------------------------------------------ CLI polish
def test_version_comes_from_the_package_metadata():
    r = run("--version")
    assert r.exit_code == 0 and r.output.strip() == f"perfmodel {version('perfmodel')}"
    assert perfmodel.__version__ == version("perfmodel")


@pytest.mark.parametrize("args", [["project", "--target", "b300", "--sensitivity", "--spec", "ddtree", "-c", "1,8"],
                                  ["validate", "--tolerance", "100"], ["hw", "list"], ["models", "list"],
                                  ["hw", "show", "rtx-pro-6000"]])
def test_tables_never_truncate_at_80_columns_piped(args):
    env = dict(os.environ, COLUMNS="80", TERM="xterm")
    out = subprocess.run([sys.executable, "-m", "perfmodel", *args], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert "…" not in out.stdout
    if args[:2] == ["hw", "list"]:
        for name in registry.list_gpus():
            assert f" {name} " in out.stdout, name
    if args[0] == "project":
        assert "latency_floor" in out.stdout and "[h200-sxm.json]" in out.stdout


@pytest.mark.parametrize("args", [["hw", "list"], ["models", "list"], ["hw", "show", "b300"],
                                  ["hw", "show", "nvlink5-nvswitch"], ["models", "show", "kimi-k2.6"]])
def test_spec_commands_take_formats(args):
    d = json.loads(run(*args, "--format", "json").output)
    assert d
    r = run(*args, "--format", "csv")
    assert r.exit_code == 0 and "," in r.output.splitlines()[0]
    if args[1] == "show":
        table = run(*args).output
        assert "source" in table and "{" not in table  # a table, not a Python dict


@pytest.mark.skipif(shutil.which("head") is None or os.name != "posix", reason="needs a POSIX shell")
@pytest.mark.parametrize("cmd", ["project", "project -f json", "hw list", "validate --tolerance 100"])
def test_broken_pipe_exits_quietly_with_0(cmd):
    sh = f"set -o pipefail; {sys.executable} -m perfmodel {cmd} | head -2 > /dev/null"
    out = subprocess.run(["bash", "-c", sh], capture_output=True, text=True)
    assert out.returncode == 0 and out.stderr == "", out.stderr


def test_report_and_project_share_defaults():
    """One declaration: `--spec` defaults to none for both (and `compare`), as in `Request`."""
    from perfmodel.scenario import Request, fields

    for cmd in ("project", "report", "compare"):
        r = run(cmd, "--help")
        assert "--spec" in r.output and "--calibration" in r.output, cmd
    assert fields()["spec"][1] == Request().spec == "none"
    assert math.isclose(fields()["host_cpu_factor"][1], 1.0)


def test_measure_progress_bars_run_with_fake_benches(tmp_path):
    """Per-bench progress (time budgets) runs without a GPU; --no-progress is a CLI option."""
    from perfmodel.measure.common import BenchOutput
    from perfmodel.measure.runner import run_measure
    from perfmodel.profile import BenchResult

    def fake(ctx):
        return BenchOutput(BenchResult(status="ok"))

    assert run_measure(tmp_path / "p.json", registry={"ceilings": fake, "dispatch": fake}, require_cuda=False,
                       quick=True, progress=True) == 0
    assert "--no-progress" in run("measure", "--help").output
