"""Measured-sample lookup: exact hits, log-log interpolation, no extrapolation, law-ratio transfer."""

import math

import pytest

from perfmodel.model.lookup import Probe, SampleTable
from perfmodel.model.ops import Op, estimate
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
    GPU gets the transferred law, so the op's time grows with its size there too."""
    from perfmodel.model.project import Projector, Request

    pj_same = Projector(Request(target="h200", gpus=1, concurrency=[1]))
    pj_b300 = Projector(Request(target="b300", gpus=1, concurrency=[1]))
    op = Op("q_a", "dense", "gemm_bf16", bytes=7168 * 1536 * 2.0, flops=2.0 * 7168 * 1536, count=1,
            probe=Probe("gemm", (("K", 7168), ("N", 1536)), "M", 1, "torch.matmul"))
    sample = pj_same.machine.table.lookup(op.probe)
    assert sample is not None
    law_s = estimate(op, pj_same.machine.source_law(op)).total_us
    law_t = estimate(op, pj_b300.machine.law(op)).total_us
    from perfmodel.model.step import _Acc, _price_ops

    for pj, want in ((pj_same, sample), (pj_b300, law_t + op.n_kernels * pj_b300.machine.overheads.graph_node_us)):
        acc = _Acc()
        _price_ops(acc, pj.machine, [op])
        assert sum(acc.by_comp.values()) == pytest.approx(want, rel=1e-9)
    assert law_s > 0


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
    assert tab.lower_bound(pr(8, 16)) == pytest.approx(40.0) and tab.lower_bound(pr(4, 16)) is None
