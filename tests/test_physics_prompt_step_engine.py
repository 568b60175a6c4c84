"""The engine's terms on a step that carries prompt tokens, worked by hand: its host time per
kernel launched (`engine_prefill_launch_us`: the step costs its kernels times that much more) and
its GPU work as a multiple of what the step's ops price (`engine_prefill_work`: the GPU components
scale, the host terms do not); a decode step moves with neither; a calibration carries each to the
machine; the fit prices each step's ops once for every value of them; a fit names them or leaves
them out."""

from __future__ import annotations

from dataclasses import replace

import pytest

from perfmodel.api import projector as Projector
from perfmodel.calibrate import NAMED_ONLY, NOT_OPS, CalibrationInput, ObservedPoint, fit
from perfmodel.calibration_schema import PREFILL_LAUNCH, PREFILL_WORK, factor_names
from perfmodel.model.calibration import Factors, calibrated
from perfmodel.model.layers import Batch, Decode, Prefill
from perfmodel.model.step import NOT_GPU_WORK, batch_estimate, batch_terms
from perfmodel.request import resolve_profile
from perfmodel.scenario import Request

PROFILE = resolve_profile(None)
PROMPT = Batch(groups=(Prefill(n=1, tokens=512, prefix=0),))
MIXED = Batch(groups=(Decode(n=4, context=1024), Prefill(n=1, tokens=256, prefix=0)))
DECODE = Batch(groups=(Decode(n=4, context=1024),))


@pytest.fixture(scope="module")
def llama():
    return Projector(Request(target="h200", gpus=1, model="llama-3.1-8b", parallel="tp", concurrency=[1]))


def _price(pj, batch, **overheads):
    mach = replace(pj.machine, overheads=replace(pj.machine.overheads, **overheads))
    return batch_estimate(pj.model, mach, pj.layout, batch)


def test_a_prompt_step_pays_its_kernels_times_the_launch_and_a_decode_step_nothing(llama):
    for batch in (PROMPT, MIXED):
        base = _price(llama, batch)
        with_launch = _price(llama, batch, engine_prefill_launch_us=40.0)
        assert base.n_kernels > 100
        assert with_launch.step_us - base.step_us == pytest.approx(40.0 * base.n_kernels)
        assert with_launch.breakdown_us["engine_host"] == pytest.approx(40.0 * base.n_kernels)
    assert _price(llama, DECODE, engine_prefill_launch_us=40.0).step_us == _price(llama, DECODE).step_us


def test_a_prompt_step_scales_its_gpu_work_and_not_its_host_terms(llama):
    for batch in (PROMPT, MIXED):
        base = _price(llama, batch, engine_host_us=300.0, engine_prefill_launch_us=20.0)
        scaled = _price(llama, batch, engine_host_us=300.0, engine_prefill_launch_us=20.0, engine_prefill_work=1.8)
        gpu = sum(v for k, v in base.breakdown_us.items() if k not in NOT_GPU_WORK)
        assert gpu > 0.5 * base.step_us
        assert scaled.step_us - base.step_us == pytest.approx(0.8 * gpu)
        for comp in NOT_GPU_WORK:
            assert scaled.breakdown_us.get(comp) == base.breakdown_us.get(comp)
        faster = _price(llama, batch, engine_prefill_work=0.5)
        assert faster.step_us == pytest.approx(_price(llama, batch).step_us - 0.5 * gpu)
    assert _price(llama, DECODE, engine_prefill_work=2.5).step_us == _price(llama, DECODE).step_us


def test_the_work_scale_carries_the_work_sigma_and_adds_its_own(llama):
    """Every priced term of a prompt step without host time is GPU work: its 1σ scales with it."""
    base = _price(llama, PROMPT, host_step_us=0.0, graph_launch_us=0.0, graph_node_us=0.0)
    scaled = _price(llama, PROMPT, host_step_us=0.0, graph_launch_us=0.0, graph_node_us=0.0, engine_prefill_work=1.5)
    assert scaled.sigma_us == pytest.approx(1.5 * base.sigma_us)
    sure = _price(llama, PROMPT, engine_prefill_work=1.5, engine_prefill_work_sigma=0.2)
    assert sure.sigma_us > _price(llama, PROMPT, engine_prefill_work=1.5).sigma_us


@pytest.mark.parametrize("field", ["engine_prefill_launch_us", "engine_prefill_work"])
def test_the_priced_ops_serve_every_value(llama, field):
    """The serving simulation keeps a step's terms (`StepTerms`) and completes them per machine:
    both terms are taken there, so a fit that tries values prices each step's ops once."""
    terms = batch_terms(llama.model, llama.machine, llama.layout, PROMPT)
    for v in (0.7, 1.0, 2.2):
        o = replace(llama.machine.overheads, **{field: v})
        assert terms.with_engine_host(o).step_us == pytest.approx(_price(llama, PROMPT, **{field: v}).step_us)
    assert terms.with_engine_host(replace(llama.machine.overheads, **{field: 3.0})).step_us > \
        terms.with_engine_host(llama.machine.overheads).step_us


@pytest.mark.parametrize("name, value, sigma, field, rule, default", [
    (PREFILL_LAUNCH, 35.0, 5.0, "engine_prefill_launch", "35 us per kernel of a prompt's step", 0.0),
    (PREFILL_WORK, 1.6, 0.1, "engine_prefill_work", "a prompt's step x 1.6 its ops' time", 1.0)])
def test_a_calibration_carries_each_to_the_machine(llama, name, value, sigma, field, rule, default):
    o = calibrated(llama.machine, Factors(values={name: value}, sigma={name: sigma})).overheads
    unit = "_us" if name.endswith("_us") else ""
    assert getattr(o, f"{field}{unit}") == value
    assert getattr(o, f"{field}_sigma{unit}") == sigma
    assert rule in o.rule
    assert getattr(calibrated(llama.machine, Factors()).overheads, f"{field}{unit}") == default
    assert name in NOT_OPS and name in NAMED_ONLY and name in factor_names()


def _points():
    return [ObservedPoint(target="h200", gpus=1, model="llama-3.1-8b", engine="vllm", isl=isl, osl=32, concurrency=c,
                          ttft_ms=ttft, tpot_ms=tpot)
            for isl, c, ttft, tpot in ((1024, 1, 60.0, 7.0), (4096, 4, 200.0, 8.0))]


@pytest.mark.parametrize("name, neutral", [(PREFILL_LAUNCH, 0.0), (PREFILL_WORK, 1.0)])
def test_the_default_fit_leaves_each_out_and_a_named_one_fits_it(name, neutral):
    default = fit(CalibrationInput(engine="vllm", points=_points(), factors=None), PROFILE, "test")
    assert name not in {f.name for f in default.factors}
    named = fit(CalibrationInput(engine="vllm", points=_points(), factors=[name]), PROFILE, "test")
    (f,) = named.factors
    assert f.name == name and f.value > neutral  # the prompts run slower than their kernels price
