"""How a machine carries calibration factors (perfmodel/model/calibration.py), by hand."""

import math
from dataclasses import replace

import pytest
from test_physics_step import hand_machine

from perfmodel.model.calibration import Factors, calibrated, scaled_tau
from perfmodel.model.machine import CollectiveLaw
from perfmodel.specs import registry

LAW = CollectiveLaw(latency_us=20.0, busbw_GBps=300.0, rel_unc_lat=0.1, rel_unc_bw=0.2, rule="r")


def _nvlink_machine():
    h200 = registry.load_gpu("h200")
    m = hand_machine()
    return replace(m, link=registry.load_link(h200.default_interconnect), all_reduce=LAW, all_to_all=LAW)


def test_collective_factors_on_their_own_family():
    """NVLink factors: latency x 2 with a 10% posterior sigma, bandwidth untouched (factor 1);
    the uncertainties combine in quadrature: hypot(0.1, 0.1) on latency, the law's own on bw."""
    m = calibrated(_nvlink_machine(), Factors(values={"coll_lat.nvlink": 2.0}, sigma={"coll_lat.nvlink": 0.1}))
    ar = m.all_reduce
    assert (ar.latency_us, ar.busbw_GBps) == (40.0, 300.0)
    assert ar.rel_unc_lat == pytest.approx(math.hypot(0.1, 0.1)) and ar.rel_unc_bw == 0.2
    bw = calibrated(_nvlink_machine(), Factors(values={"coll_bw.nvlink": 0.5}, sigma={"coll_bw.nvlink": 0.3}))
    assert (bw.all_reduce.latency_us, bw.all_reduce.busbw_GBps) == (20.0, 150.0)
    assert bw.all_reduce.rel_unc_bw == pytest.approx(math.hypot(0.3, 0.2)) and bw.all_reduce.rel_unc_lat == 0.1


def test_other_family_widens_by_the_largest_move():
    """PCIe factors x 2 (latency) and x 0.8 (bandwidth) on an NVLink machine: no factor applies,
    and both uncertainties widen by the larger move, |ln 2| = 0.693 (not |ln 0.8| = 0.223)."""
    m = calibrated(_nvlink_machine(), Factors(values={"coll_lat.pcie": 2.0, "coll_bw.pcie": 0.8}))
    ar = m.all_reduce
    assert (ar.latency_us, ar.busbw_GBps) == (20.0, 300.0)
    assert ar.rel_unc_lat == pytest.approx(math.hypot(0.1, math.log(2)))
    assert ar.rel_unc_bw == pytest.approx(math.hypot(0.2, math.log(2)))
    assert "widened by 69%" in ar.rule
    # no collective factor at all: the law is the same object
    assert calibrated(_nvlink_machine(), Factors(values={"launch": 2.0})).all_reduce == LAW


def test_scaled_tau_capped_at_what_the_tree_accepts():
    f = Factors(values={"tau": 1.5})
    assert scaled_tau(4.0, f, 17) == 6.0
    assert scaled_tau(4.0, f, 5) == 5.0  # B + 1 = 5 tokens at most
    assert scaled_tau(4.0, Factors(), 17) == 4.0


def test_verification_attention_gets_its_own_law():
    """A floor factor for q > 1 attention (attention_verify) only: each attention class gets a
    '.verify' law, a copy with t0 x 2; the q = 1 laws keep theirs."""
    m = hand_machine()
    c = calibrated(m, Factors(values={"floor.attention_verify": 2.0}))
    for cls in ("attention_gqa", "attention_mla"):
        assert c.laws[f"{cls}.verify"].t0_us == pytest.approx(2 * m.laws[cls].t0_us)
        assert c.laws[cls].t0_us == m.laws[cls].t0_us
    b = calibrated(m, Factors(values={"bw.attention_verify": 0.5}))
    assert b.laws["attention_gqa.verify"].bw_GBps == pytest.approx(0.5 * m.laws["attention_gqa"].bw_GBps)
    assert "attention_gqa.verify" not in calibrated(m, Factors(values={"floor.gemm": 2.0})).laws


def test_a_faster_engine_cannot_stream_past_the_roof():
    """bw x 1.5 on a law at 4000 GB/s of the H200's 4800 x 0.9 = 4320 GB/s streaming roof: capped
    at 4320; x 1.05 on it: 4200, under the roof; x 0.5: 2000."""
    m = hand_machine()
    m = replace(m, laws={**m.laws, "gemm_bf16": replace(m.laws["gemm_bf16"], bw_GBps=4000.0)})
    roof = m.roof_GBps
    assert roof == pytest.approx(4800 * registry.load_gpu("h200").memory.streaming_fraction(registry.load_memory_kinds()))
    assert calibrated(m, Factors(values={"bw.gemm": 1.5})).laws["gemm_bf16"].bw_GBps == pytest.approx(roof)
    assert calibrated(m, Factors(values={"bw.gemm": 1.05})).laws["gemm_bf16"].bw_GBps == pytest.approx(4200.0)
    assert calibrated(m, Factors(values={"bw.gemm": 0.5})).laws["gemm_bf16"].bw_GBps == pytest.approx(2000.0)


def test_launch_factor_scales_every_launch_cost():
    m = hand_machine()
    o = calibrated(m, Factors(values={"launch": 2.0})).overheads
    assert (o.graph_node_us, o.graph_launch_us, o.launch_eager_us, o.launch_eager_triton_us) == pytest.approx(
        (2 * m.overheads.graph_node_us, 2 * m.overheads.graph_launch_us, 2 * m.overheads.launch_eager_us,
         2 * m.overheads.launch_eager_triton_us))
    assert o.host_step_us == m.overheads.host_step_us  # perfmodel's own host loop is not the engine's


def test_observing_the_models_own_figure_needs_no_correction():
    """--observed at exactly the model's own H200 TP8 C=1 figure: the calibration moves nothing
    by a factor outside [1/3, 3] and warns of none."""
    from perfmodel.model.project import Projector, Request

    own = Projector(Request(target="h200", gpus=8, concurrency=[1])).point(1)["tokens_per_s_per_stream"]
    res = Projector(Request(target="b300", gpus=8, concurrency=[1], observed=f"h200,tp8,c=1,{own:.6f}tok/s")).run()
    cal = res["calibration"]
    assert not any("outside" in w for w in cal["warnings"])
    assert all(1 / 3 <= f["value"] <= 3 for k, f in cal["factors"].items() if k != "engine_host_us")
    assert res["observed"]["calibrated_tokens_per_s_per_stream"] == pytest.approx(own, rel=0.02)
