"""The engine's host time per kernel of a step that carries prompt tokens (`engine_prefill_launch_us`),
worked by hand: such a step costs its kernels times that much more, a decode step nothing more; a
calibration carries the value to the machine; a fit names it or leaves it out."""

from __future__ import annotations

from dataclasses import replace

import pytest

from perfmodel.api import projector as Projector
from perfmodel.calibrate import CalibrationInput, ObservedPoint, fit
from perfmodel.calibration_schema import PREFILL_LAUNCH
from perfmodel.model.calibration import Factors, calibrated
from perfmodel.model.layers import Batch, Decode, Prefill
from perfmodel.model.step import batch_estimate
from perfmodel.request import resolve_profile
from perfmodel.scenario import Request

PROFILE = resolve_profile(None)


@pytest.fixture(scope="module")
def llama():
    return Projector(Request(target="h200", gpus=1, model="llama-3.1-8b", parallel="tp", concurrency=[1]))


def _price(pj, batch, **overheads):
    mach = replace(pj.machine, overheads=replace(pj.machine.overheads, **overheads))
    return batch_estimate(pj.model, mach, pj.layout, batch)


def test_a_prompt_step_pays_its_kernels_times_the_launch_and_a_decode_step_nothing(llama):
    prompt = Batch(groups=(Prefill(n=1, tokens=512, prefix=0),))
    mixed = Batch(groups=(Decode(n=4, context=1024), Prefill(n=1, tokens=256, prefix=0)))
    decode = Batch(groups=(Decode(n=4, context=1024),))
    for batch in (prompt, mixed):
        base = _price(llama, batch)
        with_launch = _price(llama, batch, engine_prefill_launch_us=40.0)
        assert base.n_kernels > 100
        assert with_launch.step_us - base.step_us == pytest.approx(40.0 * base.n_kernels)
        assert with_launch.breakdown_us["engine_host"] == pytest.approx(40.0 * base.n_kernels)
    assert _price(llama, decode, engine_prefill_launch_us=40.0).step_us == _price(llama, decode).step_us


def test_a_calibration_carries_the_launch_to_the_machine(llama):
    mach = calibrated(llama.machine, Factors(values={PREFILL_LAUNCH: 35.0}, sigma={PREFILL_LAUNCH: 5.0}))
    assert mach.overheads.engine_prefill_launch_us == 35.0
    assert mach.overheads.engine_prefill_launch_sigma_us == 5.0
    assert "35 us per kernel of a prompt's step" in mach.overheads.rule
    assert calibrated(llama.machine, Factors()).overheads.engine_prefill_launch_us == 0.0


def _points():
    return [ObservedPoint(target="h200", gpus=1, model="llama-3.1-8b", engine="vllm", isl=isl, osl=32, concurrency=c,
                          ttft_ms=ttft, tpot_ms=tpot)
            for isl, c, ttft, tpot in ((1024, 1, 60.0, 7.0), (4096, 4, 200.0, 8.0))]


def test_the_default_fit_leaves_it_out_and_a_named_one_fits_it():
    default = fit(CalibrationInput(engine="vllm", points=_points(), factors=None), PROFILE, "test")
    assert PREFILL_LAUNCH not in {f.name for f in default.factors}
    named = fit(CalibrationInput(engine="vllm", points=_points(), factors=[PREFILL_LAUNCH]), PROFILE, "test")
    (f,) = named.factors
    assert f.name == PREFILL_LAUNCH and f.value > 0
