"""All-reduces at a prompt's message sizes, priced by a law fitted on those sizes.

An imported profile fitted its all-reduce law on the database's decode-size messages (<= 4 MB per
GPU, `aic.COLL_MAX_BYTES`); a prompt's step sends far larger ones (DeepSeek-R1's 8192-token prompt
on TP8: 117 MB per all-reduce), which that law priced at the small messages' bandwidth, 2-3x slower
than the database's own rows at those sizes (evidence/collective-sizes/). The import now fits a
second law on the larger messages (`CollectiveFit.min_bytes`), and a step prices each message by the
law of its size. On the rows copied into tests/fixtures/aic/ (H200, SGLang 0.5.14's all-reduce)."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest

from perfmodel import aic
from perfmodel.collective_math import bus_factor
from perfmodel.model.calibration import Factors, calibrated
from perfmodel.model.layers import Collective
from perfmodel.model.machine import CollectiveLaw, _with_large
from perfmodel.model.step import price_collective
from perfmodel.model.whatif import scale_collectives
from perfmodel.request import resolve_profile
from perfmodel.specs import registry
from perfmodel.transfer import _Machines

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "aic"


@pytest.fixture(scope="module")
def h200_sglang():
    db = aic.Database(FIXTURE / "systems", (FIXTURE / "VERSION").read_text().strip())
    return db, aic.import_profile(db, "h200_sxm", "sglang@0.5.14", resolve_profile(None))


@pytest.fixture(scope="module")
def machines(h200_sglang):
    return _Machines(h200_sglang[1], registry.load_gpu("h200-sxm"), registry.load_memory_kinds())


def _rows(db, n: int, graph: bool) -> list[aic.Point]:
    pts, _ = aic.points(db, "h200_sxm", "sglang", "0.5.14", kinds={"custom_allreduce"})
    return sorted((p for p in pts["custom_allreduce"] if p.n_gpus == n and p.graph == graph), key=lambda p: p.bytes_per_gpu)


def test_the_import_fits_a_law_on_the_messages_above_the_decode_range(h200_sglang):
    _, prof = h200_sglang
    small = {(c.n_gpus, c.graph) for c in prof.collectives if c.min_bytes == 0}
    large = [c for c in prof.collectives if c.min_bytes > 0]
    assert small and {(c.n_gpus, c.graph) for c in large} == small  # one of each size range per GPU count and mode
    for c in large:
        assert c.min_bytes == aic.COLL_MAX_BYTES and f"> {aic.COLL_MAX_BYTES >> 20} MB" in c.source


def test_a_prompt_size_all_reduce_is_priced_near_the_databases_own_row(h200_sglang, machines):
    """Every fixture row above 4 MB on 8 GPUs (captured in a graph, as a step prices them) within 25%
    of its time; the decode-range law alone put the largest of them more than 1.5x slow."""
    db, prof = h200_sglang
    rows = [p for p in _rows(db, 8, True) if p.bytes_per_gpu > aic.COLL_MAX_BYTES]
    assert len(rows) >= 3
    for p in rows:
        assert machines.price(p)[0] == pytest.approx(p.t_us, rel=0.25), p.bytes_per_gpu
    small_only = prof.model_copy(update={"collectives": [c for c in prof.collectives if c.min_bytes == 0]})
    old = _Machines(small_only, registry.load_gpu("h200-sxm"), registry.load_memory_kinds())
    assert old.price(rows[-1])[0] > 1.5 * rows[-1].t_us


def test_decode_size_messages_keep_the_decode_range_law(h200_sglang, machines):
    db, prof = h200_sglang
    fit = next(c for c in prof.collectives if c.n_gpus == 8 and c.graph and c.min_bytes == 0)
    for p in _rows(db, 8, True):
        if p.bytes_per_gpu <= aic.COLL_MAX_BYTES:
            want = fit.latency_us + p.bytes_per_gpu / (fit.bw_GBps * 1e3)
            assert machines.price(p)[0] == pytest.approx(want, rel=1e-9)


def test_a_larger_message_never_costs_less_across_the_bound():
    """A large-message law that would undercut the small law at the bound has its latency raised to
    meet it there; one above it is kept as fitted."""
    f = bus_factor("all_reduce", 8)
    small = CollectiveLaw(latency_us=5.0, busbw_GBps=100.0, rel_unc_lat=0.1, rel_unc_bw=0.1, rule="small")
    cheap = CollectiveLaw(latency_us=0.0, busbw_GBps=400.0, rel_unc_lat=0.1, rel_unc_bw=0.1, rule="large")
    bound = 4 * 2**20
    law = _with_large(small, cheap, bound, f)

    def t(b):
        return law.at(b).latency_us + b * f / (law.at(b).busbw_GBps * 1e3)

    assert t(bound + 1) >= t(bound) - 1e-9 and t(bound + 1) == pytest.approx(t(bound), rel=1e-6)
    assert law.large.busbw_GBps == 400.0  # the bandwidth is the fit's; only the latency met the bound
    dear = replace(cheap, latency_us=500.0)
    assert _with_large(small, dear, bound, f).large.latency_us == 500.0
    assert law.at(bound) is law and law.at(2 * bound) is law.large
    assert small.at(math.inf) is small  # no large law: one law for every size


def test_calibration_and_what_ifs_move_both_laws():
    small = CollectiveLaw(latency_us=5.0, busbw_GBps=100.0, rel_unc_lat=0.1, rel_unc_bw=0.1, rule="small")
    large = CollectiveLaw(latency_us=40.0, busbw_GBps=300.0, rel_unc_lat=0.1, rel_unc_bw=0.1, rule="large")
    law = _with_large(small, large, 4 * 2**20, bus_factor("all_reduce", 8))
    scaled = law.each(lambda x: replace(x, busbw_GBps=x.busbw_GBps * 2))
    assert (scaled.busbw_GBps, scaled.large.busbw_GBps) == (200.0, 600.0)
    assert scaled.large_from_bytes == law.large_from_bytes


def test_a_step_prices_each_message_by_the_law_of_its_size(machines):
    mach = machines.get(8, True)
    big, tiny = 64 * 2**20, 2**20
    for b in (big, tiny):
        law = mach.all_reduce.at(b)
        want = law.latency_us + b * bus_factor("all_reduce", 8) / (law.busbw_GBps * 1e3)
        assert price_collective(mach, Collective("all_reduce", "all_reduce", b, 1)) == pytest.approx(want, rel=1e-12)
    assert mach.all_reduce.at(big) is mach.all_reduce.large and mach.all_reduce.at(tiny) is mach.all_reduce
    # the what-if of twice the collective bandwidth halves the large messages' bandwidth term too
    fast = scale_collectives(2.0, "busbw_GBps")(mach)
    assert fast.all_reduce.large.busbw_GBps == pytest.approx(2 * mach.all_reduce.large.busbw_GBps)
    # a calibration's collective factors reach the large messages' law
    cal = calibrated(mach, Factors(values={"coll_bw.nvlink": 0.5}, sigma={}))
    assert cal.all_reduce.large.busbw_GBps == pytest.approx(0.5 * mach.all_reduce.large.busbw_GBps)
