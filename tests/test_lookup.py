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


def test_measured_op_carried_by_law_ratio():
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

    for pj, want in ((pj_same, sample), (pj_b300, sample * law_t / law_s)):
        acc = _Acc()
        _price_ops(acc, pj.machine, [op])
        assert acc.ops[0].total_us == pytest.approx(want, rel=1e-9)
