"""CLI smoke for every subcommand, and bad input → one line + exit code 2."""

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from perfmodel.cli import app

runner = CliRunner()


def run(*args):
    return runner.invoke(app, list(args))


def test_project_table():
    r = run("project", "--target", "b300", "--gpus", "8", "--model", "kimi-k2.6", "--parallel", "tp",
            "--concurrency", "1,8,32,128")
    assert r.exit_code == 0, r.output
    assert "bottleneck" in r.output and "model error on the measured GPU" in r.output


def test_project_json_fields():
    r = run("project", "--target", "b300", "--format", "json", "--spec", "ddtree", "--concurrency", "1,32")
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["profile"]["kind"] in ("measured", "spec-derived")
    for p in d["points"]:
        for k in ("concurrency", "step_ms", "tokens_per_s_per_stream", "tokens_per_s", "breakdown_ms",
                  "bottleneck", "fits_in_memory", "interval", "budget_curve"):
            assert k in p, k


def test_project_csv():
    r = run("project", "--target", "h100", "--gpus", "8", "--model", "llama-3.1-70b", "--format", "csv", "--concurrency", "1,2")
    assert r.exit_code == 0, r.output
    lines = r.output.strip().splitlines()
    assert lines[0].startswith("gpu,n_gpus,") and ",concurrency," in lines[0] and len(lines) == 3


def test_project_sensitivity():
    r = run("project", "--target", "b300", "--spec", "ddtree", "--concurrency", "1", "--sensitivity", "--format", "json")
    assert r.exit_code == 0, r.output
    s = json.loads(r.output)["sensitivity"]
    assert s and abs(s[0]["plus"]) >= abs(s[-1]["plus"])


@pytest.mark.parametrize("args,needle", [
    (["project", "--target", "b3000"], "did you mean"),
    (["project", "--model", "kimi-k9"], "unknown"),
    (["project", "--concurrency", "1,x"], "--concurrency"),
    (["project", "--concurrency", "0"], "positive"),
    (["project", "--budget", "-3", "--spec", "ddtree"], "--budget"),
    (["project", "--target", "rtx-pro-6000", "--gpus", "2"], "does not fit"),
    (["project", "--spec", "ddtree", "--model", "llama-3.1-8b", "--gpus", "1"], "drafter"),
    (["project", "--acceptance", "table:16=bad", "--spec", "ddtree"], "bad table entry '16=bad'"),
    (["project", "--profile", "/nonexistent.json"], "no such file"),
    (["project", "--observed", "garbage"], "--observed"),
    (["hw", "show", "h2000"], "did you mean"),
    (["models", "show", "nope"], "unknown"),
    (["schema", "nope"], "unknown schema"),
])
def test_bad_input_one_line_exit_2(args, needle):
    r = run(*args)
    assert r.exit_code == 2, (args, r.output)
    out = r.output.strip()
    assert "Traceback" not in out
    assert len(out.splitlines()) == 1, out
    assert needle.lower() in out.lower()


def test_bad_yaml_files(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\n  : - [\n")
    r = run("project", "--hw-file", str(bad))
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1
    from perfmodel.specs import registry

    text = registry._hw_root().joinpath("gpus", "h200-sxm.yaml").read_text()
    neg = tmp_path / "neg.yaml"
    neg.write_text(text.replace("bandwidth_GBps: {value: 4800", "bandwidth_GBps: {value: -4800"))
    r = run("project", "--hw-file", str(neg))
    assert r.exit_code == 2 and "bandwidth" in r.output, r.output
    extra = tmp_path / "extra.yaml"
    extra.write_text(text + "\nwarp_drive: 1\n")
    r = run("project", "--hw-file", str(extra))
    assert r.exit_code == 2 and "warp_drive" in r.output, r.output


def test_own_files_work(tmp_path):
    from perfmodel.specs import registry

    text = registry._hw_root().joinpath("gpus", "h200-sxm.yaml").read_text()
    f = tmp_path / "h200-sxm.yaml"
    f.write_text(text)
    r = run("project", "--hw-file", str(f), "--gpus", "8", "--concurrency", "1")
    assert r.exit_code == 0, r.output


def test_hw_and_models_and_schema():
    for args in (["hw", "list"], ["hw", "show", "b300"], ["hw", "show", "nvlink5-nvswitch"], ["models", "list"],
                 ["models", "show", "kimi-k2.6"], ["schema", "gpu"], ["schema", "profile"]):
        r = run(*args)
        assert r.exit_code == 0, (args, r.output)
    assert "properties" in json.loads(run("schema", "model").output)


def test_validate_runs():
    """At the default tolerance, and the end-to-end kinds within the project's bars (README
    table): e2e 1 GPU <= 5%, e2e 2 GPUs <= 10% (the published bar is not met yet: README)."""
    r = run("validate", "--format", "json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    kinds = d["summary"]["by_kind"]
    assert kinds["e2e-1gpu"]["median_abs_err"] <= 0.05 and kinds["e2e-2gpu"]["median_abs_err"] <= 0.10
    assert kinds["published"]["n"] == 10
    for row in d["rows"]:
        if row["err"] is not None and row["predicted"] is not None and row["predicted"] == row["predicted"]:
            assert row["err"] == pytest.approx(row["predicted"] / row["measured"] - 1)  # + when over-predicting


def test_measure_without_gpu_is_one_line_exit_2(tmp_path):
    r = subprocess.run([sys.executable, "-m", "perfmodel", "measure", "--out", str(tmp_path / "p.json")],
                       capture_output=True, text=True)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "Traceback" not in r.stderr + r.stdout


def test_validate_checks_a_partial_profile_against_the_embedded_one():
    """A `--only collectives` run has no kernel fits: its e2e points (TP2 and TP-attention +
    EP2) are predicted from the embedded profile, not a traceback; each kind is reported."""
    from pathlib import Path

    smoke = Path(__file__).parent / "fixtures" / "smoke_ep.json"
    r = run("validate", "--profile", str(smoke), "--no-published", "--format", "json")
    assert r.exit_code == 0, r.output
    kinds = json.loads(r.output)["summary"]["by_kind"]
    assert kinds["e2e-2gpu"]["n"] == 2 and kinds["e2e-2gpu-ep"]["n"] == 2


def test_validate_unknown_base_is_one_line_exit_2(tmp_path):
    r = run("validate", "--base", str(tmp_path / "nope.json"), "--no-published")
    assert r.exit_code == 2 and "Traceback" not in r.output


def test_profile_by_shipped_name(tmp_path, monkeypatch):
    """--profile takes a shipped profile's name (with or without .json): the 2-GPU one prices
    2 H200s' collectives from its measured NVLink4 fits, the embedded 1-GPU one from the link
    spec, so the two differ; a file of that name in the working directory wins; an unknown name
    is one line and exit code 2."""
    from perfmodel.request import TWO_GPU_PROFILE, profile_path, shipped_profile_path

    args = ("project", "--target", "h200", "--gpus", "2", "--model", "qwen3-30b-a3b", "--concurrency", "1",
            "--format", "json")
    by_name = json.loads(run(*args, "--profile", TWO_GPU_PROFILE[:-5]).output)
    by_path = json.loads(run(*args, "--profile", str(shipped_profile_path(TWO_GPU_PROFILE))).output)
    default = json.loads(run(*args).output)
    coll = [d["points"][0]["breakdown_ms"]["collectives"] for d in (by_name, by_path, default)]
    assert coll[0] == coll[1] != coll[2]
    assert profile_path(TWO_GPU_PROFILE) == shipped_profile_path(TWO_GPU_PROFILE)
    monkeypatch.chdir(tmp_path)
    (tmp_path / TWO_GPU_PROFILE).write_text("{}")
    assert profile_path(TWO_GPU_PROFILE).resolve() == tmp_path / TWO_GPU_PROFILE
    r = run("project", "--target", "h200", "--profile", "no-such-profile")
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1 and "no-such-profile" in r.output
