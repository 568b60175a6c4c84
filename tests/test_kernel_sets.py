"""Kernel sets (profile.KERNEL_SETS): a projection prices perfmodel's own kernels or torch's
native ops; and the unsplit-kernel law (a per-work-unit rate over waves of SMs) that SDPA's
masked backend needs. Expected values are worked out by hand here."""

import math

import numpy as np
import pytest

from perfmodel.model.lookup import Probe, SampleTable
from perfmodel.model.machine import in_kernel_set
from perfmodel.model.ops import KernelLaw, Op, estimate
from perfmodel.profile import BenchResult, Profile, Provenance, Sample, attention_units, check_kernel_set, fit_key, wave_bytes


# ------------------------------------------------------------------ which laws a set uses
def test_a_kernel_set_replaces_the_classes_it_remeasured_and_keeps_the_rest():
    own, sdpa, gemm = (KernelLaw(t, 1000.0, 100.0) for t in (1.0, 2.0, 3.0))
    laws = {"attention_gqa": own, fit_key("attention_gqa", "torch"): sdpa, "gemm_bf16": gemm}
    assert in_kernel_set(laws, "torch") == {"attention_gqa": sdpa, "gemm_bf16": gemm}
    assert in_kernel_set(laws, "perfmodel") == {"attention_gqa": own, "gemm_bf16": gemm}
    with pytest.raises(ValueError, match="no laws of kernel set 'torch'"):
        in_kernel_set({"gemm_bf16": gemm}, "torch")
    with pytest.raises(ValueError, match="unknown kernel set 'cutlass'"):
        check_kernel_set("cutlass")


def _table_profile():
    s = []
    for prov, ts in (("triton", (10.0, 20.0)), ("torch.sdpa", (30.0, 90.0))):
        for L, t in zip((1024, 4096), ts):
            s.append(Sample(shape={"kind": "gqa", "Hq": 32, "q": 1, "L": L}, median_ms=t / 1e3, provider=prov))
    s.append(Sample(shape={"kind": "mla", "Hq": 8, "q": 1, "L": 1024}, median_ms=5e-3, provider="triton"))
    s.append(Sample(shape={"kind": "mla", "Hq": 8, "q": 1, "L": 4096}, median_ms=6e-3, provider="triton"))
    return Profile(provenance=Provenance(kind="measured", gpu_name="g", timestamp="t"),
                   benches={"attention": BenchResult(status="ok", samples=s)})


def test_the_sample_table_prices_a_set_from_its_own_provider():
    """Under the torch set an op is priced from SDPA's samples where SDPA timed its shape
    family; a family SDPA never timed (MLA) keeps perfmodel's samples; a verify width SDPA did
    not time gives no sample (the set's law prices it), never the other provider's."""
    prof = _table_profile()
    own, torch_set = SampleTable(prof), SampleTable(prof, {"attention": "torch.sdpa"})
    gqa = lambda q, L: Probe("attention", (("Hq", 32), ("kind", "gqa"), ("q", q)), "L", L, "triton")  # noqa: E731
    mla = Probe("attention", (("Hq", 8), ("kind", "mla"), ("q", 1)), "L", 2048, "triton")
    assert own.lookup(gqa(1, 1024)) == pytest.approx(10.0)
    assert torch_set.lookup(gqa(1, 1024)) == pytest.approx(30.0)
    assert torch_set.lookup(gqa(1, 2048)) == pytest.approx(math.sqrt(30.0 * 90.0))  # log-log halfway
    assert torch_set.lookup(mla) == pytest.approx(math.sqrt(5.0 * 6.0))
    assert torch_set.lookup(gqa(4, 1024)) is None and own.lookup(gqa(4, 1024)) is None


# ------------------------------------------------------------------ the unsplit-kernel law
def test_attention_units_count_sequence_head_and_row_tiles():
    # Llama-3.1-8B (32 query heads over 8 KV heads): a group of 4 query rows per KV head per token
    assert attention_units(1, 4, 32, 8) == 8  # 16 rows: one 64-row tile per (sequence, KV head)
    assert attention_units(1, 17, 32, 8) == 16  # 68 rows: two tiles
    assert attention_units(3, 16, 32, 8) == 24  # 64 rows: one tile, 3 sequences
    assert attention_units(2, 1, 16, 2) == 4  # TP2 Qwen3 slice: 8 rows per KV head


def test_an_unsplit_kernel_takes_the_same_time_until_its_units_fill_the_sms_then_a_wave_more():
    """One SM walks each unit's 4 MB at 20 GB/s: 200 us, however many units run side by side,
    up to the 132 SMs; the 133rd unit is a second wave (400 us). The DRAM roof (4000 GB/s)
    binds only when the waves stream faster than it."""
    law = KernelLaw(t0_us=0.0, bw_GBps=4000.0, tflops=1e6, unit_GBps=20.0, slots=132)
    per_unit = 4e6

    def t(units):
        return estimate(Op("a", "attention", "attention_gqa", bytes=units * per_unit, flops=0.0, units=units), law).total_us

    assert t(1) == pytest.approx(200.0) and t(8) == pytest.approx(200.0) and t(132) == pytest.approx(200.0)
    assert t(133) == pytest.approx(400.0)
    # without the unit rate (perfmodel's split-KV kernel) the same op streams at the DRAM roof
    split = KernelLaw(t0_us=0.0, bw_GBps=4000.0, tflops=1e6)
    assert estimate(Op("a", "attention", "attention_gqa", bytes=8 * per_unit, flops=0.0, units=8), split).total_us \
        == pytest.approx(8 * per_unit / 4e6)
    assert wave_bytes(8 * per_unit, 8, 132) == pytest.approx(per_unit)
    assert wave_bytes(133 * per_unit, 133, 132) == pytest.approx(2 * per_unit)


def test_fit_unit_law_recovers_the_per_unit_rate_of_synthetic_timings():
    """Timings made from t0 = 20 us, 3000 GB/s and 25 GB/s per unit on 132 SMs (with 2% noise):
    the fit finds the unit rate within 5% and explains the data better than the plain law."""
    from perfmodel.measure.fits import fit_kernel_law, fit_unit_law

    rng = np.random.default_rng(1)
    rows = []
    for C in (1, 4, 16, 64):
        for L in (512, 2048, 16384):
            units = attention_units(C, 4, 32, 8)
            nbytes = C * L * 8 * 128 * 2 * 2.0
            w = wave_bytes(nbytes, units, 132)
            t = 20.0 + max(nbytes / 3000e3, w / 25e3)
            rows.append((nbytes, w, t * (1 + 0.02 * rng.standard_normal())))
    b, w, t = (list(x) for x in zip(*rows))
    fit = fit_unit_law(b, [0.0] * len(b), w, t, default_tflops=100.0)
    assert fit.unit_GBps == pytest.approx(25.0, rel=0.05)
    assert fit.rmse_rel < 0.05 < fit_kernel_law(b, [0.0] * len(b), t, default_tflops=100.0).rmse_rel
    # a kernel with no unit limit: the plain law comes back, no unit rate
    flat = [20.0 + x / 3000e3 for x in b]
    assert fit_unit_law(b, [0.0] * len(b), w, flat, default_tflops=100.0).unit_GBps is None


def test_a_profile_without_the_set_says_so():
    """The spec-derived profile has no kernels measured, so no kernel set "torch" either."""
    from perfmodel.api import projector
    from perfmodel.errors import ProjectionError
    from perfmodel.scenario import Request

    with pytest.raises(ProjectionError, match="no laws of kernel set 'torch'"):
        projector(Request(target="h200", gpus=1, concurrency=[1], kernels="torch", profile="spec"))
