"""Measured-sample lookup: exact hits, log-log interpolation, no extrapolation, law-ratio transfer."""

import math

import pytest

from perfmodel.model.lookup import Probe, SampleTable
from perfmodel.model.ops import Op
from perfmodel.profile import BenchResult, Profile, Provenance, Sample


def _profile():
    samples = [Sample(shape={"name": "x", "M": m, "N": 64, "K": 32}, median_ms=t / 1e3, provider="torch.matmul")
               for m, t in ((1, 10.0), (4, 10.0), (16, 40.0))]
    return Profile(provenance=Provenance(kind="measured", gpu_name="g", timestamp="t"),
                   benches={"gemm": BenchResult(status="ok", samples=samples)})


def test_exact_and_interpolated_and_out_of_range():
    tab = SampleTable(_profile())
    pr = lambda m: Probe("gemm", (("K", 32), ("N", 64)), "M", m, "torch.matmul")  # noqa: E731
    assert tab.lookup(pr(4)) == pytest.approx(10.0)
    assert tab.lookup(pr(8)) == pytest.approx(math.sqrt(10.0 * 40.0))  # halfway in log-log
    assert tab.lookup(pr(32)) is None and tab.lookup(pr(0.5)) is None
    assert tab.lookup(Probe("gemm", (("K", 33), ("N", 64)), "M", 4, "torch.matmul")) is None
    assert tab.lookup(None) is None


def test_measured_op_on_profile_gpu_only():
    """The sample prices the op on the profile's GPU (its graph node shown as dispatch); another
    GPU gets the transferred law, so the op's time grows with its size there too. The expected
    values come from the raw bench sample and from the gemm fit carried by the datasheet ratios
    worked out here (bandwidth: the read ceiling carried by peak x achievable streaming fraction,
    in series with the fit's in-flight rate carried by the SM count; compute: bf16 dense peak)."""
    from perfmodel.api import projector
    from perfmodel.scenario import Request
    from perfmodel.specs import registry

    pj_same = projector(Request(target="h200", gpus=1, concurrency=[1]))
    pj_b300 = projector(Request(target="b300", gpus=1, concurrency=[1]))
    op = Op("q_a", "dense", "gemm_bf16", bytes=7168 * 1536 * 2.0, flops=2.0 * 7168 * 1536, count=1,
            probe=Probe("gemm", (("K", 7168), ("N", 1536)), "M", 1, "torch.matmul"))
    prof = pj_same.profile
    sample = next(s.median_ms * 1e3 for s in prof.benches["gemm"].samples
                  if s.provider == "torch.matmul" and (s.shape.get("K"), s.shape.get("N"), s.shape.get("M")) == (7168, 1536, 1))
    f = prof.fits["gemm_bf16"]
    mk = registry.load_memory_kinds()
    h, b = registry.load_gpu("h200"), registry.load_gpu("b300")
    bw_ratio = (b.memory.bandwidth_GBps.value * b.memory.streaming_fraction(mk)) / (
        h.memory.bandwidth_GBps.value * h.memory.streaming_fraction(mk))
    f_ratio = b.compute.bf16_dense_TFLOPS.value / h.compute.bf16_dense_TFLOPS.value
    # Little's law: 1/bw_fit = 1/read + 1/in_flight; the read ceiling scales with the memory,
    # the in-flight rate with the SMs; capped at the target's DRAM roof (peak x achievable fraction)
    read = prof.ceilings.read_GBps
    in_flight = 1 / (1 / f.bw_GBps - 1 / read)
    slots = b.sm_count.value / h.sm_count.value
    bw_t = min(1 / (1 / (read * bw_ratio) + 1 / (in_flight * slots)),
               b.memory.bandwidth_GBps.value * b.memory.streaming_fraction(mk))
    # the fit's floor holds the op's graph node (shown apart as dispatch)
    mem_t, comp_t = op.bytes / (bw_t * 1e3), op.flops / (f.tflops * f_ratio * 1e6)
    law_t = f.t0_us + max(mem_t, comp_t)
    from perfmodel.model.step import _Acc, _price_ops

    def price(pj):
        acc = _Acc()
        _price_ops(acc, pj.machine, [op])
        return sum(acc.by_comp.values())

    assert price(pj_same) == pytest.approx(sample, rel=1e-9)
    # on the B300 the law, plus at most the whole shorter roof term (the share the H200 sample
    # did not overlap: tests/test_physics_streaming_transfer.py)
    assert law_t * (1 - 1e-9) <= price(pj_b300) <= (law_t + min(mem_t, comp_t)) * (1 + 1e-9)


def test_second_swept_field_interpolated_and_bounded():
    samples = [Sample(shape={"C": c, "L": L, "kind": "x"}, median_ms=t / 1e3, provider="triton")
               for c, L, t in ((1, 8, 10.0), (1, 16, 12.0), (4, 8, 40.0), (4, 16, 30.0))]
    prof = Profile(provenance=Provenance(kind="measured", gpu_name="g", timestamp="t"),
                   benches={"attention": BenchResult(status="ok", samples=samples)})
    tab = SampleTable(prof)
    pr = lambda c, L: Probe("attention", (("kind", "x"),), "L", L, "triton", "C", c)  # noqa: E731
    assert tab.lookup(pr(1, 8)) == pytest.approx(10.0)
    assert tab.lookup(pr(2, 8)) == pytest.approx(20.0)  # halfway in log C between 10 and 40
    assert tab.lookup(pr(4, 16)) == pytest.approx(40.0)  # the C=4 curve made non-decreasing in L
    assert tab.lookup(pr(8, 8)) is None
    assert tab.edge(pr(8, 16))[1] == pytest.approx(40.0) and tab.edge(pr(4, 16)) is None
