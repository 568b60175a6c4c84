"""Engine calibrations: a fit of chosen factors, leave-one-GPU-out and leave-one-model-out errors,
and the shipped per-engine calibrations (`--calibration engine:<name>`), each output naming the
calibration it used."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from perfmodel.calibrate import CalibrationError, CalibrationInput, ObservedPoint, fit, prepare
from perfmodel.cli import app
from perfmodel.model.calibration import HOST, factors_of
from perfmodel.request import calibration_path, resolve_profile, shipped_engine_calibrations

PROFILE = resolve_profile(None)
runner = CliRunner()


def _pt(target: str, c: int, **kw) -> ObservedPoint:
    return ObservedPoint(**(dict(target=target, gpus=1, model="llama-3.1-8b", concurrency=c, context=2048, tpot_ms=100.0) | kw))


def _made(points: list[ObservedPoint], host_us: float) -> list[ObservedPoint]:
    """The points' figures as the model gives them with `host_us` of engine host time per step."""
    from perfmodel.model.calibration import Factors

    f = Factors(values={HOST: host_us})
    return [p.model_copy(update={"tpot_ms": prepare(0, p, PROFILE).predict(f)}) for p in points]


def test_only_the_factors_named_are_fitted():
    pts = _made([_pt("h100-sxm", 1), _pt("h100-sxm", 32)], 500.0)
    res = fit(CalibrationInput(engine="e", points=pts, factors=[HOST]), PROFILE, "x")
    assert [f.name for f in res.factors] == [HOST]
    assert res.factors[0].value == pytest.approx(500.0, rel=0.05)  # the only free term takes the whole gap
    with pytest.raises(CalibrationError, match="factors: bw.nosuch is not a factor of these points"):
        fit(CalibrationInput(engine="e", points=pts, factors=[HOST, "bw.nosuch"]), PROFILE, "x")


def test_leave_one_gpu_out_predicts_each_gpu_from_the_others():
    """held_out gpu: each point's held-out error is that of a fit on the other GPU's points alone."""
    a = _made([_pt("h100-sxm", 1), _pt("h100-sxm", 16)], 700.0)
    b = [p.model_copy(update={"tpot_ms": p.tpot_ms * 1.1}) for p in _made([_pt("h200", 1), _pt("h200", 16)], 700.0)]
    res = fit(CalibrationInput(engine="e", points=a + b, factors=[HOST], held_out="gpu"), PROFILE, "x")
    assert res.held_out == "gpu"
    only_b = fit(CalibrationInput(engine="e", points=b, factors=[HOST]), PROFILE, "x")
    f = factors_of(only_b)
    for i, p in enumerate(a):
        assert res.points[i].loo_err == pytest.approx(prepare(i, p, PROFILE).predict(f) / p.tpot_ms - 1, rel=1e-3, abs=1e-4)
    by_model = fit(CalibrationInput(engine="e", points=a + b, factors=[HOST], held_out="model"), PROFILE, "x")
    assert all(p.loo_err is None for p in by_model.points)  # one model: nothing is left to fit on


def test_unknown_engine_calibration_is_one_line_exit_2():
    r = runner.invoke(app, ["project", "--target", "h200", "--model", "llama-3.1-8b", "--gpus", "1", "-c", "1",
                            "--calibration", "engine:nosuch"])
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert r.exit_code == 2 and len(lines) == 1 and "engine:nosuch" in lines[0] and "Traceback" not in r.output


@pytest.mark.parametrize("name", shipped_engine_calibrations())
def test_shipped_engine_calibration_is_used_and_named(name):
    """Every shipped engine calibration loads, was fitted with each GPU held out, and a projection of
    whole requests through it names it (describes, calibration.engine)."""
    from perfmodel.calibrate import load_result

    res = load_result(str(calibration_path(f"engine:{name}")))
    assert name in res.engine and res.held_out == "gpu" and len(res.gpus) >= 2
    r = runner.invoke(app, ["project", "--target", "h200", "--model", "llama-3.1-8b", "--gpus", "1", "-c", "8",
                            "--isl", "1024", "--osl", "128", "--engine", name, "--calibration", f"engine:{name}",
                            "--format", "json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert name in out["calibration"]["engine"] and name in out["describes"]
    assert out["points"][0]["serving"]["tpot_ms"]["mean"] > 0


def test_engine_calibrations_are_shipped():
    assert set(shipped_engine_calibrations()) >= {"vllm", "sglang", "trtllm"}
