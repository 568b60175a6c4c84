"""The engine's wait before a prompt's first token in ms (`engine_ttft_ms`), worked by hand: how a
calibration carries it to a machine and the serving figures apply it, beside the wait in decode
steps (`engine_ttft_steps`), which a calibration file may still hold and which is read as before."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from pydantic import ValidationError

from perfmodel.api import projector as Projector
from perfmodel.calibrate import ObservedPoint, load_result, prepare
from perfmodel.calibration_schema import TTFT_MS, TTFT_MS_MAX, TTFT_STEPS, FactorResult
from perfmodel.model.calibration import Factors, calibrated, factors_of
from perfmodel.model.serving import Engine, StepPricer, Workload, simulate
from perfmodel.request import resolve_profile
from perfmodel.scenario import Request

PROFILE = resolve_profile(None)
ROOT = Path(__file__).resolve().parents[1]
VLLM = Engine(name="vllm", max_batched_tokens=8192, chunked=True, mixed=True)
SGLANG = Engine(name="sglang", max_batched_tokens=8192, chunked=True, mixed=False)


class StubPricer(StepPricer):
    """10 ms a decode-only step, 30 ms a step with prefill tokens (as tests/test_physics_serving.py)."""

    def __init__(self):
        self.assumptions, self.interpolate = set(), True

    def exact(self, n_dec, ctx, prefills):
        return (30e3 if prefills else 10e3), 0.0


@pytest.fixture(scope="module")
def llama():
    return Projector(Request(target="h200", gpus=1, model="llama-3.1-8b", parallel="tp", concurrency=[1]))


def _with(pj, **overheads):
    return replace(pj.machine, overheads=replace(pj.machine.overheads, **overheads))


def test_a_wait_in_ms_moves_ttft_and_e2e_by_exactly_that_and_nothing_else(llama):
    """120 ms of `engine_ttft_ms`: every request's TTFT and e2e latency 120 ms later, at any load;
    its TPOT, ITL, throughput and schedule as simulated (the wait moves the figures, not the steps)."""
    for engine, C in ((VLLM, 1), (SGLANG, 2), (VLLM, 2)):
        wl = Workload(isl=100, osl=5, concurrency=C, n_requests=4)
        base = simulate(llama.model, llama.machine, llama.layout, wl, engine, pricer=StubPricer(), kv_tokens=10**6)
        p = simulate(llama.model, _with(llama, engine_ttft_ms=120.0), llama.layout, wl, engine, pricer=StubPricer(),
                     kv_tokens=10**6)
        for stat in ("mean", "median", "p90", "p99"):
            assert getattr(p.ttft_ms, stat) == pytest.approx(getattr(base.ttft_ms, stat) + 120.0)
            assert getattr(p.e2e_latency_ms, stat) == pytest.approx(getattr(base.e2e_latency_ms, stat) + 120.0)
            assert getattr(p.tpot_ms, stat) == getattr(base.tpot_ms, stat)
        assert p.itl_ms == base.itl_ms
        assert (p.tokens_per_s, p.steps, p.prefill_steps, p.duration_s) == (base.tokens_per_s, base.steps,
                                                                              base.prefill_steps, base.duration_s)


def test_a_wait_in_ms_does_not_grow_with_the_step_where_one_in_steps_does(llama):
    """The same 50 ms on a machine whose steps take twice as long adds 50 ms still; a wait of 5
    decode steps adds 5 x 10 ms on the stub and would double with the step."""
    wl = Workload(isl=100, osl=5, concurrency=1, n_requests=2)
    base = simulate(llama.model, llama.machine, llama.layout, wl, VLLM, pricer=StubPricer(), kv_tokens=10**6)
    ms = simulate(llama.model, _with(llama, engine_ttft_ms=50.0), llama.layout, wl, VLLM, pricer=StubPricer(),
                  kv_tokens=10**6)
    steps = simulate(llama.model, _with(llama, engine_ttft_steps=5.0), llama.layout, wl, VLLM, pricer=StubPricer(),
                     kv_tokens=10**6)
    both = simulate(llama.model, _with(llama, engine_ttft_steps=5.0, engine_ttft_ms=50.0), llama.layout, wl, VLLM,
                    pricer=StubPricer(), kv_tokens=10**6)
    assert ms.ttft_ms.mean - base.ttft_ms.mean == pytest.approx(50.0)
    assert steps.ttft_ms.mean - base.ttft_ms.mean == pytest.approx(50.0)  # 5 steps of 10 ms
    assert both.ttft_ms.mean - base.ttft_ms.mean == pytest.approx(100.0)  # the two add

    class Slow(StubPricer):
        def exact(self, n_dec, ctx, prefills):
            return (60e3 if prefills else 20e3), 0.0

    slow = simulate(llama.model, llama.machine, llama.layout, wl, VLLM, pricer=Slow(), kv_tokens=10**6)
    slow_ms = simulate(llama.model, _with(llama, engine_ttft_ms=50.0), llama.layout, wl, VLLM, pricer=Slow(), kv_tokens=10**6)
    slow_steps = simulate(llama.model, _with(llama, engine_ttft_steps=5.0), llama.layout, wl, VLLM, pricer=Slow(),
                          kv_tokens=10**6)
    assert slow_ms.ttft_ms.mean - slow.ttft_ms.mean == pytest.approx(50.0)
    assert slow_steps.ttft_ms.mean - slow.ttft_ms.mean == pytest.approx(100.0)


def test_the_wait_in_ms_is_a_calibration_factor_of_ttft_points_only_non_negative_and_bounded():
    """`engine_ttft_ms` is a key of a TTFT point only; a TTFT point's prediction grows by exactly
    the wait, a TPOT point's not at all; the calibration carries it to the machine; a value below 0
    or above TTFT_MS_MAX is refused (the fit's bounds), with its unit."""
    pt = ObservedPoint(target="h100-sxm", gpus=1, model="llama-3.1-8b", isl=1024, osl=128, concurrency=4,
                       ttft_ms=80.0, tpot_ms=10.0)
    s, t = (prepare(0, q, PROFILE) for q in pt.singles())
    assert TTFT_MS in t.keys and TTFT_MS not in s.keys and t.prior[TTFT_MS] > 0
    assert t.predict(Factors(values={TTFT_MS: 75.0})) - t.predict(Factors()) == pytest.approx(75.0, rel=1e-9)
    assert s.predict(Factors(values={TTFT_MS: 75.0})) == s.predict(Factors())
    o = calibrated(t.machine, Factors(values={TTFT_MS: 75.0})).overheads
    assert (o.engine_ttft_ms, o.engine_ttft_steps) == (75.0, 0.0)
    assert "first token 75 ms later" in o.rule
    assert calibrated(t.machine, Factors()).overheads.engine_ttft_ms == 0.0
    FactorResult(name=TTFT_MS, value=TTFT_MS_MAX, sigma_post=1.0, sigma_prior=300.0, determined=True)
    for bad in (-1.0, TTFT_MS_MAX * 1.01):
        with pytest.raises(ValidationError, match="engine_ttft_ms.* ms"):
            FactorResult(name=TTFT_MS, value=bad, sigma_post=1.0, sigma_prior=300.0, determined=True)


def test_a_calibration_file_with_the_wait_in_steps_is_read_as_before(tmp_path):
    """A calib.json written when the wait was fitted in decode steps (`engine_ttft_steps`) loads and
    applies that wait as it did: TTFT `k` decode steps later, and no wait in ms."""
    cal = json.loads((ROOT / "perfmodel/data/engines/sglang.json").read_text())
    cal["factors"] = [f for f in cal["factors"] if f["name"] not in (TTFT_STEPS, TTFT_MS)]
    cal["factors"].append({"name": TTFT_STEPS, "value": 3.0, "sigma_post": 0.5, "sigma_prior": 10.0,
                           "determined": True, "outside_range": False})
    path = tmp_path / "old.json"
    path.write_text(json.dumps(cal))
    f = factors_of(load_result(str(path)))
    pt = ObservedPoint(target="h100-sxm", gpus=1, model="llama-3.1-8b", isl=1024, osl=128, concurrency=1,
                       ttft_ms=80.0, tpot_ms=10.0)
    s, t = (prepare(0, q, PROFILE) for q in pt.singles())
    o = calibrated(t.machine, f).overheads
    assert (o.engine_ttft_steps, o.engine_ttft_ms) == (3.0, 0.0)
    # at C = 1 each request's decode steps are its TPOT: 3 of them on its TTFT
    assert t.predict(f) - t.predict(replace(f, values={k: v for k, v in f.values.items() if k != TTFT_STEPS})) == \
        pytest.approx(3 * s.predict(f), rel=1e-6)
