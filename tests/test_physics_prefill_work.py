"""The engine's GPU time of a step that carries prompt tokens as a multiple of what its ops price
(`engine_prefill_work`), worked by hand: such a step's GPU components scale by it and its host
terms do not, a decode step does not move; a calibration carries it to the machine; the fit
prices each step's ops once for every value of it; a fit names it or leaves it out."""

from __future__ import annotations

from dataclasses import replace

import pytest

from perfmodel.api import projector as Projector
from perfmodel.calibrate import NOT_OPS, CalibrationInput, ObservedPoint, fit
from perfmodel.calibration_schema import PREFILL_WORK, factor_names
from perfmodel.model.calibration import Factors, calibrated
from perfmodel.model.layers import Batch, Decode, Prefill
from perfmodel.model.step import NOT_GPU_WORK, batch_estimate, batch_terms
from perfmodel.request import resolve_profile
from perfmodel.scenario import Request

PROFILE = resolve_profile(None)


@pytest.fixture(scope="module")
def llama():
    return Projector(Request(target="h200", gpus=1, model="llama-3.1-8b", parallel="tp", concurrency=[1]))


def _price(pj, batch, **overheads):
    mach = replace(pj.machine, overheads=replace(pj.machine.overheads, **overheads))
    return batch_estimate(pj.model, mach, pj.layout, batch)


def test_a_prompt_step_scales_its_gpu_work_and_not_its_host_terms(llama):
    prompt = Batch(groups=(Prefill(n=1, tokens=512, prefix=0),))
    mixed = Batch(groups=(Decode(n=4, context=1024), Prefill(n=1, tokens=256, prefix=0)))
    for batch in (prompt, mixed):
        base = _price(llama, batch, engine_host_us=300.0, engine_prefill_launch_us=20.0)
        scaled = _price(llama, batch, engine_host_us=300.0, engine_prefill_launch_us=20.0, engine_prefill_work=1.8)
        gpu = sum(v for k, v in base.breakdown_us.items() if k not in NOT_GPU_WORK)
        assert gpu > 0.5 * base.step_us
        assert scaled.step_us - base.step_us == pytest.approx(0.8 * gpu)
        for comp in NOT_GPU_WORK:
            assert scaled.breakdown_us.get(comp) == base.breakdown_us.get(comp)
        faster = _price(llama, batch, engine_prefill_work=0.5)
        assert faster.step_us == pytest.approx(_price(llama, batch).step_us - 0.5 * gpu)


def test_a_decode_step_does_not_move(llama):
    decode = Batch(groups=(Decode(n=4, context=1024),))
    assert _price(llama, decode, engine_prefill_work=2.5).step_us == _price(llama, decode).step_us


def test_its_uncertainty_joins_the_step_sigma(llama):
    prompt = Batch(groups=(Prefill(n=1, tokens=512, prefix=0),))
    plain = _price(llama, prompt, engine_prefill_work=1.5)
    sure = _price(llama, prompt, engine_prefill_work=1.5, engine_prefill_work_sigma=0.2)
    assert sure.sigma_us > plain.sigma_us


def test_the_priced_ops_serve_every_value(llama):
    """The serving simulation keeps a step's terms (`StepTerms`) and completes them per machine:
    the work scale is taken there, so a fit that tries values prices each step's ops once."""
    prompt = Batch(groups=(Prefill(n=1, tokens=512, prefix=0),))
    terms = batch_terms(llama.model, llama.machine, llama.layout, prompt)
    for v in (0.7, 1.0, 2.2):
        o = replace(llama.machine.overheads, engine_prefill_work=v)
        assert terms.with_engine_host(o).step_us == pytest.approx(_price(llama, prompt, engine_prefill_work=v).step_us)
    assert terms.with_engine_host(replace(llama.machine.overheads, engine_prefill_work=3.0)).step_us > \
        terms.with_engine_host(llama.machine.overheads).step_us
    assert PREFILL_WORK in NOT_OPS and PREFILL_WORK in factor_names()


def test_a_calibration_carries_it_to_the_machine(llama):
    mach = calibrated(llama.machine, Factors(values={PREFILL_WORK: 1.6}, sigma={PREFILL_WORK: 0.1}))
    assert mach.overheads.engine_prefill_work == 1.6
    assert mach.overheads.engine_prefill_work_sigma == 0.1
    assert "a prompt's step x 1.6 its ops' time" in mach.overheads.rule
    assert calibrated(llama.machine, Factors()).overheads.engine_prefill_work == 1.0


def _points():
    return [ObservedPoint(target="h200", gpus=1, model="llama-3.1-8b", engine="vllm", isl=isl, osl=32, concurrency=c,
                          ttft_ms=ttft, tpot_ms=tpot)
            for isl, c, ttft, tpot in ((1024, 1, 60.0, 7.0), (4096, 4, 200.0, 8.0))]


def test_the_default_fit_leaves_it_out_and_a_named_one_fits_it():
    default = fit(CalibrationInput(engine="vllm", points=_points(), factors=None), PROFILE, "test")
    assert PREFILL_WORK not in {f.name for f in default.factors}
    named = fit(CalibrationInput(engine="vllm", points=_points(), factors=[PREFILL_WORK]), PROFILE, "test")
    (f,) = named.factors
    assert f.name == PREFILL_WORK and f.value > 1.0  # the prompts run slower than their ops price
