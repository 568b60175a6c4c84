"""The acceptance options on the command line: the workload, the engine's own acceptance length,
the drafter and its draft tokens, and speculation turned off above a batch size."""

import json

import pytest
from typer.testing import CliRunner

from perfmodel.api import project
from perfmodel.cli import app
from perfmodel.errors import ProjectionError
from perfmodel.scenario import Request


def _p(**kw):
    return project(Request(target="b300", gpus=8, concurrency=[1], **kw)).points[0]


def test_no_workload_spans_the_workloads_and_says_so():
    anyw = _p(spec="ddtree", budget=16)
    code = _p(spec="ddtree", budget=16, workload="code")
    chat = _p(spec="ddtree", budget=16, workload="chat")
    assert chat.tau < anyw.tau < code.tau  # the spanning source sits between the classes
    assert anyw.tau_sigma > code.tau_sigma  # and carries their spread
    ar = _p()
    width = lambda p: (p.interval.tokens_per_s_per_stream[1] - p.interval.tokens_per_s_per_stream[0]) / p.tokens_per_s_per_stream  # noqa: E731
    assert width(anyw) > width(ar) and anyw.interval.tau_share > 0.5


def test_an_engine_acceptance_length_pins_tau_at_its_setting():
    p = _p(spec="ddtree", budget=8, acceptance_length=3.1)
    assert p.tau == pytest.approx(3.1, rel=1e-3) and p.tau_measured
    wider = _p(spec="ddtree", budget=8)
    assert p.interval.tau_share < wider.interval.tau_share
    far = project(Request(target="b300", gpus=8, concurrency=[1], spec="ddtree", budget=64, acceptance_length=3.1,
                          acceptance_at=8)).points[0]
    assert far.tau > p.tau and far.tau_sigma > p.tau_sigma  # carried to a bigger tree, less certain away from it


def test_chain_drafter_and_draft_tokens():
    e = _p(spec="chain", drafter="eagle3", draft_tokens=3, acceptance_length=2.3)
    assert e.budget == 3 and e.tau == pytest.approx(2.3, rel=1e-3)
    with pytest.raises(ProjectionError, match="--draft-tokens"):
        _p(spec="ddtree", draft_tokens=3)  # DFlash drafts its block: the budget says how much
    with pytest.raises(ProjectionError, match="--spec chain"):
        _p(spec="ddtree", drafter="eagle3")
    with pytest.raises(ProjectionError, match="--drafter"):
        _p(spec="chain", drafter="medusa")


def test_speculation_off_above_a_batch_size():
    pts = project(Request(target="b300", gpus=8, concurrency=[1, 64], spec="chain", spec_off_above=32)).points
    assert pts[0].budget > 0 and pts[1].budget == 0 and "speculation off" in pts[1].budget_note


@pytest.mark.parametrize("args, words", [
    (["--workload", "code"], ["--workload", "--spec"]),
    (["--spec", "ddtree", "--workload", "code", "--acceptance", "0.8"], ["--workload", "--acceptance"]),
    (["--spec", "ddtree", "--acceptance-length", "0.5"], ["--acceptance-length"]),
    (["--spec", "ddtree", "--acceptance-length", "nan"], ["--acceptance-length"]),
    (["--spec", "ddtree", "--budget", "4", "--acceptance-length", "9"], ["--acceptance-length", "above"]),
    (["--spec", "chain", "--workload", "poetry"], ["--workload"]),
])
def test_bad_acceptance_options_are_one_line(args, words):
    r = CliRunner().invoke(app, ["project", "--concurrency", "1", *args])
    assert r.exit_code == 2 and r.exception is None or isinstance(r.exception, SystemExit), r.output
    err = r.stderr if hasattr(r, "stderr") else r.output
    assert err.strip().count("\n") == 0 and all(w in err for w in words), err


@pytest.mark.parametrize("cmd", ["project", "compare"])
def test_options_reach_project_and_compare(cmd):
    r = CliRunner().invoke(app, [cmd, "--target", "b300", "--spec", "ddtree", "--budget", "8", "--acceptance-length", "3.1",
                                 "--concurrency", "1", "--format", "json"])
    assert r.exit_code == 0, r.output
    assert "3.1" in json.dumps(json.loads(r.stdout))


def test_calibration_point_with_an_acceptance_length_fits_no_tau(tmp_path):
    obs = tmp_path / "obs.yaml"
    obs.write_text("engine: e\npoints:\n"
                   "  - {target: rtx-pro-6000, gpus: 8, model: kimi-k2.6, concurrency: 1, tokens_per_s_per_stream: 98}\n"
                   "  - {target: rtx-pro-6000, gpus: 8, model: kimi-k2.6, concurrency: 1, spec: ddtree, budget: 8,\n"
                   "     acceptance_length: 3.1, tokens_per_s_per_stream: 190}\n")
    r = CliRunner().invoke(app, ["calibrate", str(obs), "--out", str(tmp_path / "c.json"), "--format", "json"])
    assert r.exit_code == 0, r.output
    names = [f["name"] for f in json.loads((tmp_path / "c.json").read_text())["factors"]]
    assert "tau" not in names


def test_a_drafter_option_of_a_model_without_a_default_drafter():
    p = project(Request(target="b200", gpus=8, model="llama-3.1-70b", spec="chain", drafter="eagle3", draft_tokens=3,
                        acceptance_length=2.4, concurrency=[1])).points[0]
    assert p.budget == 3 and p.tau == pytest.approx(2.4, rel=1e-3)
    with pytest.raises(ProjectionError, match="--drafter"):  # the error names the way out
        project(Request(target="b200", gpus=8, model="llama-3.1-70b", spec="chain", concurrency=[1]))


def test_draft_tokens_parse_from_the_command_line():
    r = CliRunner().invoke(app, ["project", "--target", "b200", "--model", "llama-3.1-70b", "--spec", "chain", "--drafter",
                                 "eagle3", "--draft-tokens", "3", "--concurrency", "1", "--format", "json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["points"][0]["budget"] == 3
