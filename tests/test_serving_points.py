"""Serving figures as calibration points: a point with isl, osl, concurrency and an engine gives
TTFT and/or TPOT as `vllm bench serve` defines them, priced through the serving simulation; the
fit recovers a known engine host cost from such points; bad ones are refused in one line."""

from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner

from perfmodel.calibrate import CalibrationError, CalibrationInput, ObservedPoint, fit, prepare
from perfmodel.cli import app
from perfmodel.model.calibration import HOST, Factors, calibrated
from perfmodel.model.serving import Workload, engine_defaults, simulate
from perfmodel.request import resolve_profile

PROFILE = resolve_profile(None)
runner = CliRunner()
BASE = dict(target="h100-sxm", gpus=1, model="llama-3.1-8b", isl=1024, osl=128)


def _pt(**kw) -> ObservedPoint:
    return ObservedPoint(**(BASE | kw))


def test_a_serving_point_is_the_simulation_mean_or_median():
    """The point's TTFT and TPOT are the simulation's, of the engine named, on the calibrated
    machine: the same numbers `serving.simulate` gives for that workload."""
    f = Factors(values={HOST: 250.0})
    for engine, stat in (("vllm", "mean"), ("sglang", "median")):
        p = _pt(concurrency=8, engine=engine, ttft_ms=50.0, tpot_ms=10.0, statistic=stat)
        s, t = (prepare(0, q, PROFILE) for q in p.singles())  # in the order of FIGURES
        assert (t.point.figure[0], s.point.figure[0]) == ("ttft_ms", "tpot_ms")
        mach = calibrated(t.machine, f)
        ref = simulate(t.model, mach, t.layout, Workload(isl=1024, osl=128, concurrency=8), engine_defaults(engine, mach.gpu))
        assert t.predict(f) == pytest.approx(getattr(ref.ttft_ms, stat), rel=1e-9)
        assert s.predict(f) == pytest.approx(getattr(ref.tpot_ms, stat), rel=1e-9)
    # the per-step host term adds to every step: TPOT by about that much
    s = prepare(0, _pt(concurrency=1, tpot_ms=100.0), PROFILE)
    assert s.predict(Factors(values={HOST: 400.0})) - s.predict(Factors()) == pytest.approx(0.4, rel=0.02)


def test_the_first_token_wait_moves_ttft_points_only():
    """`engine_ttft_steps` is a key of a point with a TTFT only: a TPOT point neither depends on
    it nor is moved by it. A TTFT point at C = 1 grows by k of its own decode steps (its TPOT)."""
    from perfmodel.model.calibration import TTFT_STEPS

    s, t = (prepare(0, q, PROFILE) for q in _pt(concurrency=1, ttft_ms=50.0, tpot_ms=10.0).singles())
    assert TTFT_STEPS in t.keys and TTFT_STEPS not in s.keys
    tpot = s.predict(Factors())
    assert s.predict(Factors(values={TTFT_STEPS: 4.0})) == pytest.approx(tpot, rel=1e-12)
    assert t.predict(Factors(values={TTFT_STEPS: 4.0})) - t.predict(Factors()) == pytest.approx(4 * tpot, rel=1e-6)
    assert t.prior[TTFT_STEPS] > 0


def test_drawn_lengths_reach_a_serving_point():
    """`min_length_ratio` on a point draws its requests' lengths as the benchmark did: the mean
    prompt shrinks (0.9 x isl) and so does the TTFT at C = 1."""
    fixed = prepare(0, _pt(isl=8000, concurrency=1, ttft_ms=100.0), PROFILE).predict(Factors())
    drawn = prepare(0, _pt(isl=8000, concurrency=1, ttft_ms=100.0, min_length_ratio=0.8), PROFILE).predict(Factors())
    assert 0.8 * fixed < drawn < 0.97 * fixed


def test_max_batched_tokens_is_the_schedulers_budget():
    """A smaller step budget chunks a prompt into more prefill steps: TTFT at C=1 grows."""
    big = prepare(0, _pt(isl=8000, concurrency=1, ttft_ms=100.0), PROFILE).predict(Factors())
    small = prepare(0, _pt(isl=8000, concurrency=1, ttft_ms=100.0, max_batched_tokens=512), PROFILE).predict(Factors())
    assert small > big * 1.05


@pytest.fixture(scope="module")
def synthetic_fit():
    """Figures the model makes with 600 us of engine host time per step: TTFT and TPOT at C = 1
    and 16 under vLLM's scheduler, for an 8B model on one GPU and a 70B one over TP4 (kernel
    floors scale with the layers, 32 against 80; the host time per step does not, which is what
    separates them)."""
    truth = Factors(values={HOST: 600.0})
    pts = []
    for c, kw in ((1, {}), (16, {}), (1, dict(model="llama-3.1-70b", gpus=4)), (16, dict(model="llama-3.1-70b", gpus=4))):
        p = _pt(concurrency=c, ttft_ms=1000.0, tpot_ms=100.0, rel_sigma=0.005, **kw)  # exact figures: the data, not the priors
        s, t = (prepare(0, q, PROFILE).predict(truth) for q in p.singles())
        pts.append(p.model_copy(update={"ttft_ms": t, "tpot_ms": s}))
    return fit(CalibrationInput(engine="synthetic", points=pts), PROFILE, "embedded")


def test_fit_recovers_a_known_host_cost_from_serving_points(synthetic_fit):
    res = synthetic_fit
    got = {f.name: f.value for f in res.factors}
    assert got[HOST] == pytest.approx(600.0, rel=0.2)
    assert [p.index for p in res.points] == [0, 0, 1, 1, 2, 2, 3, 3]  # one point, both figures
    assert {p.figure for p in res.points} == {"ttft_ms", "tpot_ms"}
    assert res.median_abs_err < 0.01 and res.loo_median_abs_err < 0.03
    tpot = [p for p in res.points if p.figure == "tpot_ms"]
    assert all(p.uncalibrated < p.observed for p in tpot)  # uncalibrated, TPOT misses the host time
    assert max(1 - p.uncalibrated / p.observed for p in tpot) > 0.05


@pytest.mark.parametrize("kw,needle", [
    (dict(concurrency=1, ttft_ms=10.0, isl=None, osl=None), "ttft_ms is for whole requests"),
    (dict(concurrency=1, tpot_ms=10.0, osl=None), "isl and osl go together"),
    (dict(concurrency=1, tpot_ms=10.0, osl=1), "osl >= 2"),
    (dict(concurrency=1, step_ms=10.0), "describe whole requests"),
    (dict(concurrency=1, tpot_ms=10.0, engine="tgi"), "engine"),
    (dict(concurrency=1, tpot_ms=10.0, statistic="p99"), "statistic"),
    (dict(concurrency=1, tpot_ms=10.0, max_batched_tokens=0), "max_batched_tokens"),
    (dict(concurrency=1, step_ms=10.0, tpot_ms=10.0), "exactly one of"),
])
def test_bad_serving_points_are_refused(kw, needle):
    with pytest.raises(ValueError, match=needle):
        _pt(**kw)


@pytest.mark.parametrize("kw,needle", [
    (dict(isl=2_000_000, osl=10, concurrency=1, ttft_ms=100.0), "does not fit in the KV cache"),
    (dict(isl=9000, osl=10, concurrency=1, ttft_ms=100.0, engine="trtllm"), "cannot run a prompt"),
    (dict(isl=1024, osl=128, concurrency=1, tpot_ms=0.01), "faster than physics"),
])
def test_cli_bad_serving_point_one_line_exit_2(tmp_path, kw, needle):
    f = tmp_path / "obs.yaml"
    f.write_text(yaml.safe_dump({"engine": "e", "points": [BASE | kw]}))
    r = runner.invoke(app, ["calibrate", str(f), "--out", str(tmp_path / "c.json")])
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert r.exit_code == 2 and len(lines) == 1 and needle in lines[0] and "point 0 (" in lines[0], r.output
    assert not (tmp_path / "c.json").exists()


def test_cli_serving_point_both_figures(tmp_path):
    f = tmp_path / "obs.yaml"
    f.write_text(yaml.safe_dump({"engine": "vllm", "points": [BASE | dict(concurrency=4, ttft_ms=60.0, tpot_ms=9.0)]}))
    r = runner.invoke(app, ["calibrate", str(f), "--out", str(tmp_path / "c.json")])
    assert r.exit_code == 0, r.output
    res = json.loads((tmp_path / "c.json").read_text())
    assert [p["figure"] for p in res["points"]] == ["tpot_ms", "ttft_ms"]
    with pytest.raises(CalibrationError):
        prepare(0, _pt(isl=2_000_000, osl=10, concurrency=1, ttft_ms=1e5), PROFILE)
