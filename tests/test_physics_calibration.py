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
    from perfmodel.api import projector
    from perfmodel.scenario import Request

    own = projector(Request(target="h200", gpus=8, concurrency=[1])).point(1)["tokens_per_s_per_stream"]
    res = projector(Request(target="b300", gpus=8, concurrency=[1], observed=f"h200,tp8,c=1,{own:.6f}tok/s")).run()
    cal = res["calibration"]
    assert not any("outside" in w for w in cal["warnings"])
    assert all(1 / 3 <= f["value"] <= 3 for k, f in cal["factors"].items() if k != "engine_host_us")
    assert res["observed"]["calibrated_tokens_per_s_per_stream"] == pytest.approx(own, rel=0.02)


# ----------------------------------------------------------------------------- by hand, more laws
def test_no_factors_change_nothing():
    """An empty calibration: every factor is 1 and the engine host term 0 us, so every law keeps
    its numbers (and its uncertainty), and no verification law appears."""
    m = hand_machine()
    c = calibrated(m, Factors())
    for cls, law in m.laws.items():
        assert (c.laws[cls].t0_us, c.laws[cls].bw_GBps, c.laws[cls].unit_GBps) == (law.t0_us, law.bw_GBps, law.unit_GBps)
        assert (c.laws[cls].rel_unc_t0, c.laws[cls].rel_unc_bw) == (law.rel_unc_t0, law.rel_unc_bw)
    assert set(c.laws) == set(m.laws)
    o, o0 = c.overheads, m.overheads
    assert (o.graph_node_us, o.launch_eager_us, o.rel_unc_node) == (o0.graph_node_us, o0.launch_eager_us, o0.rel_unc_node)
    assert (o.engine_host_us, o.engine_host_sigma_us) == (0.0, 0.0)
    assert Factors().get("floor.gemm") == 1.0 and Factors().get("engine_host_us") == 0.0


def test_floor_and_bandwidth_factors_by_group():
    """floor.gemm x 1.5 and bw.moe x 0.5: the GEMM law's t0 grows by half, the MoE laws' bandwidth
    (and a per-unit rate, where a law has one) halves; the other groups keep theirs."""
    m = hand_machine()
    moe = next(c for c in m.laws if c.startswith("moe"))
    m = replace(m, laws={**m.laws, moe: replace(m.laws[moe], unit_GBps=40.0)})
    c = calibrated(m, Factors(values={"floor.gemm": 1.5, "bw.moe": 0.5}))
    assert c.laws["gemm_bf16"].t0_us == pytest.approx(1.5 * m.laws["gemm_bf16"].t0_us)
    assert c.laws["gemm_bf16"].bw_GBps == m.laws["gemm_bf16"].bw_GBps
    assert c.laws[moe].bw_GBps == pytest.approx(0.5 * m.laws[moe].bw_GBps)
    assert c.laws[moe].unit_GBps == pytest.approx(20.0)
    assert c.laws[moe].t0_us == m.laws[moe].t0_us
    assert c.laws["elementwise"].t0_us == m.laws["elementwise"].t0_us


def test_only_attention_classes_get_a_verification_law():
    """A verify factor copies each attention class (and only those) to a '.verify' law."""
    m = hand_machine()
    c = calibrated(m, Factors(values={"floor.attention_verify": 2.0}))
    assert set(c.laws) - set(m.laws) == {f"{k}.verify" for k in m.laws if k.startswith("attention") and "." not in k}


def test_a_law_already_above_the_roof_is_not_pulled_down():
    """A law faster than the DRAM roof (an L2-resident class, 6000 GB/s over the H200's 4320):
    a faster engine (bw x 1.5) leaves it at its own 6000, not 9000 and not the roof."""
    m = hand_machine()
    m = replace(m, laws={**m.laws, "elementwise": replace(m.laws["elementwise"], bw_GBps=6000.0)})
    assert m.roof_GBps < 6000.0
    assert calibrated(m, Factors(values={"bw.elementwise": 1.5})).laws["elementwise"].bw_GBps == pytest.approx(6000.0)
    # no roof known: nothing caps the move
    free = calibrated(replace(m, roof_GBps=None), Factors(values={"bw.elementwise": 1.5}))
    assert free.laws["elementwise"].bw_GBps == pytest.approx(9000.0)


def test_posterior_sigma_on_the_gpu_seen_and_combined_elsewhere():
    """On a GPU the calibration points ran on, a factor's uncertainty is its posterior sigma;
    on another GPU it is combined in quadrature with the transfer rule's own."""
    m = hand_machine()
    sig = {"floor.gemm": 0.05, "bw.gemm": 0.04, "launch": 0.03}
    vals = {k: 1.0 for k in sig}
    law, o = m.laws["gemm_bf16"], m.overheads
    here = calibrated(m, Factors(values=vals, sigma=sig, gpus=(m.gpu.name,)))
    assert (here.laws["gemm_bf16"].rel_unc_t0, here.laws["gemm_bf16"].rel_unc_bw) == (0.05, 0.04)
    assert here.overheads.rel_unc_node == 0.03
    away = calibrated(m, Factors(values=vals, sigma=sig, gpus=("some-other-gpu",)))
    assert away.laws["gemm_bf16"].rel_unc_t0 == pytest.approx(math.hypot(0.05, law.rel_unc_t0))
    assert away.laws["gemm_bf16"].rel_unc_bw == pytest.approx(math.hypot(0.04, law.rel_unc_bw))
    assert away.overheads.rel_unc_node == pytest.approx(math.hypot(0.03, o.rel_unc_node))
    # a group with no sigma keeps the law's own
    assert here.laws["elementwise"].rel_unc_t0 == m.laws["elementwise"].rel_unc_t0


def test_launch_factor_scales_the_eager_wrapper_calls_and_engine_host_is_additive():
    m = hand_machine()
    m = replace(m, overheads=replace(m.overheads, launch_eager_call_us={"attention_mla": 68.0}))
    o = calibrated(m, Factors(values={"launch": 0.5, "engine_host_us": 120.0}, sigma={"engine_host_us": 15.0})).overheads
    assert o.launch_eager_call_us == {"attention_mla": pytest.approx(34.0)}
    assert o.launch_eager_us == pytest.approx(0.5 * m.overheads.launch_eager_us)
    assert (o.engine_host_us, o.engine_host_sigma_us) == (120.0, 15.0)
    no_sigma = calibrated(m, Factors(values={"engine_host_us": 120.0})).overheads
    assert no_sigma.engine_host_sigma_us == 0.0


def test_the_widening_takes_the_largest_move_either_way():
    """PCIe factors x 2 and x 0.25 on an NVLink machine: the larger move is the slower one,
    |ln 0.25| = 1.386, not ln 2."""
    m = calibrated(_nvlink_machine(), Factors(values={"coll_lat.pcie": 2.0, "coll_bw.pcie": 0.25}))
    assert m.all_reduce.rel_unc_lat == pytest.approx(math.hypot(0.1, math.log(4)))


def test_collective_factors_need_a_link_of_their_family():
    """No link (one GPU): collective factors have no family to apply to; the laws are widened as
    for another family. A machine with no all-to-all law keeps none."""
    m = replace(_nvlink_machine(), link=None, all_to_all=None)
    c = calibrated(m, Factors(values={"coll_lat.nvlink": 2.0}))
    assert c.all_reduce.latency_us == 20.0 and c.all_to_all is None
    assert c.all_reduce.rel_unc_lat == pytest.approx(math.hypot(0.1, math.log(2)))


def test_latency_only_factor_leaves_bandwidth_sigma_alone():
    m = calibrated(_nvlink_machine(), Factors(values={"coll_lat.nvlink": 1.0, "coll_bw.nvlink": 1.0},
                                              sigma={"coll_bw.nvlink": 0.3}))
    assert m.all_reduce.rel_unc_lat == 0.1 and m.all_reduce.rel_unc_bw == pytest.approx(math.hypot(0.3, 0.2))


def test_factors_outside_a_third_to_three_are_flagged():
    """README: a factor outside [0.33, 3] is flagged as a mechanism the model lacks. Observed at a
    tenth of the model's own H200 figure: the fit needs large factors; each is flagged exactly
    when it lies outside [1/3, 3], and the warning names that range."""
    from perfmodel.api import projector
    from perfmodel.scenario import Request

    own = projector(Request(target="h200", gpus=8, concurrency=[1])).point(1)["tokens_per_s_per_stream"]
    res = projector(Request(target="b300", gpus=8, concurrency=[1], observed=f"h200,tp8,c=1,{own / 10:.6f}tok/s")).run()
    cal = res["calibration"]
    flagged = {k for k, f in cal["factors"].items() if k != "engine_host_us" and not (1 / 3 <= f["value"] <= 3)}
    assert flagged
    assert any("outside [0.33, 3]" in w for w in cal["warnings"])
    assert all(any(k in w for w in cal["warnings"]) for k in flagged)


def test_a_zero_factor_carries_no_move():
    """A collective factor of 0 (a hand-edited calibration) has no log-move to widen by; the
    other factor's |ln 2| is the widening."""
    m = calibrated(_nvlink_machine(), Factors(values={"coll_lat.pcie": 0.0, "coll_bw.pcie": 2.0}))
    assert m.all_reduce.rel_unc_lat == pytest.approx(math.hypot(0.1, math.log(2)))
