"""What-if variants against hand-worked figures on the hand-made profile of test_physics_step.

The tiny one-layer model on one H200 with the hand-made profile (every class t0 = 10 us, graph
node 1 us, graph launch 10 us, eager launch 5 us, host step 100 us), C = 1 and 4, context 100:
  graph step = 12 ops x 10 us (+ eps of bandwidth) + graph launch 10 + host 100 = 230 + eps;
  its floors are 12 x 10 - 13 nodes = 107 us, its dispatch 10 + 13 x 1 = 23 us.
Each what-if changes one input; the new step is worked out by hand below, and the gain is
base step / new step - 1 (no speculation: tau = 1).
"""

import math
from dataclasses import replace

import pytest
from test_physics_step import _tiny_with_drafter, hand_machine, hand_profile, tiny_model

from perfmodel import explore
from perfmodel.api import projector
from perfmodel.model import whatif
from perfmodel.model.acceptance import acceptance_from_cli
from perfmodel.model.machine import CollectiveLaw
from perfmodel.profile import KERNEL_CLASSES, KernelFit, save_profile
from perfmodel.request import production_floors
from perfmodel.scenario import Request

ONE_US = 1e-3  # ms


def _req(path, **kw):
    base = dict(target="h200", gpus=1, model=tiny_model(), concurrency=[1, 4], profile=path, context=100)
    base.update(kw)
    return Request(**base)


def _by_key(req, has_moe=False, has_drafter=False):
    return {w.key: w for w in whatif.variants(req, has_moe, has_drafter, production_floors())}


# ----------------------------------------------------------------------------- machine functions
def test_scale_functions_change_only_what_they_name():
    m = hand_machine()
    law = m.laws["gemm_bf16"]  # t0 9 (10 less its 1 us node), 1000 GB/s, 100 TFLOP/s
    m = replace(m, laws={**m.laws, "gemm_bf16": replace(law, bw_l2_GBps=5000.0)},
                all_reduce=CollectiveLaw(latency_us=20.0, busbw_GBps=300.0, rel_unc_lat=0.1, rel_unc_bw=0.1, rule="r"))
    half_t0 = whatif.scale_laws(0.5, "t0_us")(m)
    assert half_t0.laws["gemm_bf16"].t0_us == 4.5 and half_t0.laws["attention_gqa"].t0_us == 4.0
    assert half_t0.laws["gemm_bf16"].bw_GBps == 1000.0 and half_t0.laws["gemm_bf16"].bw_l2_GBps == 5000.0
    bw = whatif.scale_laws(2.0, "bw_GBps")(m)  # the L2 rate moves with the DRAM rate
    assert (bw.laws["gemm_bf16"].bw_GBps, bw.laws["gemm_bf16"].bw_l2_GBps) == (2000.0, 10000.0)
    assert bw.laws["elementwise"].bw_l2_GBps is None and bw.laws["elementwise"].tflops == 100.0
    fl = whatif.scale_laws(2.0, "tflops")(m)
    assert (fl.laws["gemm_bf16"].tflops, fl.laws["gemm_bf16"].bw_l2_GBps) == (200.0, 5000.0)
    c = whatif.scale_collectives(0.5, "latency_us")(m)
    assert (c.all_reduce.latency_us, c.all_reduce.busbw_GBps, c.all_to_all) == (10.0, 300.0, None)
    assert whatif.scale_collectives(2.0, "busbw_GBps")(m).all_reduce.busbw_GBps == 600.0
    h = whatif.scale_overheads(0.5, *whatif.HOST_FIELDS)(m).overheads
    assert (h.host_step_us, h.graph_launch_us, h.launch_eager_us, h.launch_eager_triton_us, h.graph_node_us) == (
        50.0, 5.0, 2.5, 2.5, 1.0)
    assert m.laws["gemm_bf16"].t0_us == 9.0 and m.overheads.host_step_us == 100.0  # the input is not changed


def _floors_machine(t0):
    prof = hand_profile()
    prof = prof.model_copy(update={"fits": {c: KernelFit(t0_us=t0, bw_GBps=1000.0, tflops=100.0, launcher="torch",
                                                          source="hand") for c in KERNEL_CLASSES}})
    return hand_machine(profile=prof)


def test_production_floors_lower_only_the_cited_classes():
    """production_floors.yaml: attention_gqa 12.3 us, attention_mla 12 us (graph nodes included);
    the laws' t0 exclude the 2 nodes of an attention call (1 us each), so a fitted 30 us call
    (t0 28) drops to 12.3 - 2 = 10.3 and 12 - 2 = 10; classes with floor_us null keep 29 / 26."""
    m = _floors_machine(30.0)
    m = replace(m, laws={**m.laws, "attention_gqa.decode": m.laws["attention_gqa"]})  # a variant of the class
    p = whatif.with_production_floors(m, production_floors())
    assert p.laws["attention_gqa"].t0_us == pytest.approx(10.3)
    assert p.laws["attention_gqa.decode"].t0_us == pytest.approx(10.3)
    assert p.laws["attention_mla"].t0_us == pytest.approx(10.0)
    assert (p.laws["gemm_bf16"].t0_us, p.laws["moe_w4a16"].t0_us, p.laws["elementwise"].t0_us) == (29.0, 26.0, 29.0)
    # a fitted floor already below the anchor is kept (10 us call: t0 8 < 10.3)
    assert whatif.with_production_floors(_floors_machine(10.0), production_floors()).laws["attention_gqa"].t0_us == 8.0
    # a node cost so large the anchor holds nothing else: the floor is 0, never negative
    big = replace(m, overheads=replace(m.overheads, graph_node_us=10.0))
    assert whatif.with_production_floors(big, production_floors()).laws["attention_gqa"].t0_us == 0.0


def test_scale_acceptance_scales_tau_minus_one():
    """scalar alpha 0.8, 16 nodes on a 15-deep chain: tau = (1 - 0.8^16) / 0.2 = 4.859...;
    scaled by k: 1 + k (tau - 1)."""
    acc = acceptance_from_cli("0.8", 15)
    tau = (1 - 0.8**16) / 0.2
    assert acc.tau(16) == pytest.approx(tau)
    assert whatif.scale_acceptance(0.5)(acc).tau(16) == pytest.approx(1 + 0.5 * (tau - 1))
    assert whatif.scale_acceptance(1.2)(acc).tau(16) == pytest.approx(1 + 1.2 * (tau - 1))
    assert acc.tau(16) == pytest.approx(tau)  # unchanged


# ----------------------------------------------------------------------------- the variants offered
def test_variants_one_change_each(hand_path):
    req = _req(hand_path)
    v = _by_key(req)
    assert list(v) == ["graphs", "production_floors", "latency_floor_half", "host_half", "graph_node_half"]
    assert v["graphs"].request == {"graphs": False} and "off" in v["graphs"].change
    assert not any(w.rechooses_budget for w in v.values())
    eager = _by_key(_req(hand_path, graphs=False))
    assert eager["graphs"].request == {"graphs": True} and eager["graphs"].change.startswith("CUDA graphs on")
    moe = _by_key(Request(target="h200", gpus=8, model="qwen3-30b-a3b", spec="ddtree", tree_build="cpu"), True, True)
    assert list(moe) == ["tree_build", "graphs", "parallel_tp-attn-ep-moe", "parallel_ep", "spec_none", "spec_chain",
                         "production_floors", "latency_floor_half", "collective_latency_half", "host_half",
                         "graph_node_half"]
    assert moe["tree_build"].request == {"tree_build": "gpu"}
    assert moe["spec_none"].request == {"spec": "none", "budget": "auto"} and moe["spec_chain"].rechooses_budget
    ep = _by_key(Request(target="h200", gpus=8, model="qwen3-30b-a3b", parallel="ep"), True, False)
    assert [k for k in ep if k.startswith("parallel_")] == ["parallel_tp", "parallel_tp-attn-ep-moe"]
    assert "spec_chain" not in ep and "tree_build" not in ep
    # engine settings a user can act on, apart from what-ifs on perfmodel's own kernels
    assert {k for k, w in moe.items() if w.kind == "engine"} == {"graphs", "parallel_tp-attn-ep-moe", "parallel_ep",
                                                                  "spec_none", "spec_chain"}
    assert "tp+ep" in moe["parallel_tp-attn-ep-moe"].change and "dp-attn+ep" in moe["parallel_ep"].change


def test_kv_dtype_and_per_concurrency_budget_variants():
    req = Request(target="h200", gpus=8, spec="ddtree")
    v = {w.key: w for w in whatif.variants(req, True, True, production_floors(), kv_dtype="bf16", block=16)}
    assert v["kv_fp8"].request == {"dtypes": {"kv_cache": "fp8"}} and v["kv_fp8"].kind == "engine"
    assert v["budget_per_concurrency"].request == {"budget": 15} and v["budget_per_concurrency"].inverse
    fixed = {w.key for w in whatif.variants(Request(target="h200", gpus=8, spec="ddtree", budget=8), True, True,
                                             production_floors(), kv_dtype="fp8", block=16)}
    assert "kv_fp8" not in fixed and "budget_per_concurrency" not in fixed


# ----------------------------------------------------------------------------- evaluate, by hand
@pytest.mark.parametrize("key, saved_us, component", [
    # eager: no 10 us graph launch; the first kernel's 5 us launch is exposed, the other
    # launches (5 us each) hide under the 10 us kernels queued before them
    ("graphs", 5.0, "dispatch"),
    ("latency_floor_half", 53.5, "latency_floor"),  # the 107 us of floors halved
    ("host_half", 55.0, "host"),  # host step 100 -> 50 and graph launch 10 -> 5
    ("graph_node_half", 6.5, "dispatch"),  # 13 nodes x 0.5 us
    ("production_floors", 0.0, None),  # fitted floors (8 and 9 us) already below the anchors
])
def test_evaluate_by_hand(hand_path, key, saved_us, component):
    req = _req(hand_path)
    base = projector(req).run()["points"]
    assert 0.230 < base[0]["step_ms"] < 0.2305
    row = explore.evaluate(req, _by_key(req)[key], base)
    assert row["n_evaluated"] == 2 and row["rechooses_budget"] is False
    gains = []
    for b, c in zip(base, row["per_concurrency"]):
        assert c["fits"] and c["concurrency"] == b["concurrency"]
        assert c["new"]["step_ms"] == pytest.approx(b["step_ms"] - saved_us * ONE_US, abs=1e-9)
        assert c["gain"] == pytest.approx(b["step_ms"] / c["new"]["step_ms"] - 1, abs=1e-9)
        if component:
            assert c["component"] == component
            assert c["component_base_ms"] - c["component_new_ms"] == pytest.approx(
                {"graphs": 5.0, "latency_floor_half": 53.5, "host_half": 50.0, "graph_node_half": 6.5}[key] * ONE_US)
        gains.append(c["gain"])
    assert row["rank_gain"] == pytest.approx(math.sqrt((1 + gains[0]) * (1 + gains[1])) - 1)


def test_production_floors_in_the_step(tmp_path):
    """With every call fitted at 30 us, the one GQA attention call drops from 28 to 10.3 us of
    floor: the step is 17.7 us shorter."""
    prof = hand_profile().model_copy(update={"fits": {c: KernelFit(t0_us=30.0, bw_GBps=1000.0, tflops=100.0,
                                                                    launcher="torch", source="hand")
                                                       for c in KERNEL_CLASSES}})
    save_profile(prof, tmp_path / "p.json")
    req = _req(str(tmp_path / "p.json"), concurrency=[1])
    base = projector(req).run()["points"]
    c = explore.evaluate(req, _by_key(req)["production_floors"], base)["per_concurrency"][0]
    assert c["new"]["step_ms"] == pytest.approx(base[0]["step_ms"] - 17.7 * ONE_US)
    assert c["component"] == "latency_floor"


def test_evaluate_marks_points_that_do_not_fit(hand_path):
    """A base point that does not fit is not compared; a variant point past memory says why;
    a point that cannot be priced says why; only the fitting ones count in the rank gain."""
    req = _req(hand_path, context=100_000)
    base = projector(req).run()["points"]
    # KV: 1 layer x 2 (K, V) x 2 heads x 32 x 2 B = 256 B a token, 25.6 MB a sequence: 10^4 of them
    # are 256 GB > the H200's 141 GB
    huge = dict(base[0], concurrency=10_000)
    unfit = dict(base[1], fits_in_memory=False)
    row = explore.evaluate(req, _by_key(req)["host_half"], [base[0], unfit, huge])
    pc = row["per_concurrency"]
    assert [c["fits"] for c in pc] == [True, False, False] and row["n_evaluated"] == 1
    assert pc[1]["why"] == "the base does not fit"
    assert pc[2]["why"].startswith("does not fit: weights")
    assert row["rank_gain"] == pytest.approx(pc[0]["gain"])



def test_evaluate_reports_an_unpriceable_point(tmp_path):
    """Speculation on the drafter model whose acceptance cannot be evaluated: the row says why
    and does not fit; a request the variant cannot build is skipped with the reason."""
    prof = hand_profile().model_copy(update={"treebuild": {"gpu": hand_profile().treebuild["gpu"]}})
    save_profile(prof, tmp_path / "p.json")
    req = _req(str(tmp_path / "p.json"), model=_tiny_with_drafter(), spec="ddtree", acceptance="0.8")
    base = projector(req).run()["points"]
    v = _by_key(req, has_drafter=True)
    skipped = explore.evaluate(req, v["tree_build"], base)  # no CPU tree-build fit in the profile
    assert "cpu" in skipped["skipped"] and "per_concurrency" not in skipped

    def bad_tau(acc):
        def tau(b):
            raise ValueError(f"tau: no figure at budget {b}")
        return replace(acc, _tau=tau)

    row = explore.evaluate(req, whatif.WhatIf("bad", "acceptance that fails", acceptance=bad_tau), base)
    assert len(row["per_concurrency"]) == len(base) == 2
    assert all(c["fits"] is False and c["why"].startswith("tau: no figure") for c in row["per_concurrency"])
    assert row["rank_gain"] is None and row["n_evaluated"] == 0


def test_evaluate_keeps_the_base_budget_unless_rechosen(tmp_path):
    """Block 4 drafter, alpha 0.8: the base picks a budget; a what-if that does not re-choose
    keeps it (graphs off: the same budget and tau); spec none prices budget 0 (tau 1); spec
    chain re-chooses the chain's block - 1 = 3 nodes, tau = 1 + .8 + .8^2 + .8^3."""
    prof = hand_profile()
    save_profile(prof, tmp_path / "p.json")
    req = _req(str(tmp_path / "p.json"), model=_tiny_with_drafter(), spec="ddtree", acceptance="0.8")
    base = projector(req).run()["points"]
    v = _by_key(req, has_drafter=True)
    b0 = base[0]["budget"]
    assert b0 > 0
    g = explore.evaluate(req, v["graphs"], base)["per_concurrency"][0]
    assert g["new"]["budget"] == b0 and g["new"]["tau"] == base[0]["tau"]
    n = explore.evaluate(req, v["spec_none"], base)["per_concurrency"][0]
    assert (n["new"]["budget"], n["new"]["tau"]) == (0, 1.0)
    c = explore.evaluate(req, v["spec_chain"], base)["per_concurrency"][0]
    assert c["new"]["budget"] == 3 and c["new"]["tau"] == pytest.approx(1 + 0.8 + 0.64 + 0.512)
    # tree building on the CPU (100 + 2 x C x B us, vs 50 + 0.5 x C x B on the GPU), same budget
    t = explore.evaluate(req, v["tree_build"], base)["per_concurrency"][0]
    assert t["new"]["budget"] == b0
    assert t["new"]["step_ms"] - base[0]["step_ms"] == pytest.approx((50.0 + 1.5 * 1 * b0) * ONE_US)


# ----------------------------------------------------------------------------- ranking
def test_geo_mean_gain_by_hand():
    assert whatif.geo_mean_gain([]) is None
    assert whatif.geo_mean_gain([3.0]) == pytest.approx(3.0)
    assert whatif.geo_mean_gain([1.0, -0.5]) == pytest.approx(0.0, abs=1e-15)  # x2 then x0.5
    assert whatif.geo_mean_gain([0.44, 0.0]) == pytest.approx(0.2)  # sqrt(1.44 x 1) - 1
    assert whatif.geo_mean_gain([0.0, 0.0, 0.331]) == pytest.approx(1.331 ** (1 / 3) - 1)


def test_rank_best_first_unevaluated_last_ties_by_key():
    rows = [{"key": "b", "rank_gain": 0.1}, {"key": "z", "rank_gain": None}, {"key": "a", "rank_gain": 0.1},
            {"key": "c", "rank_gain": -0.2}, {"key": "d", "rank_gain": 0.5}, {"key": "y", "skipped": "why"},
            {"key": "e", "rank_gain": 0.0}]
    assert [r["key"] for r in whatif.rank(rows)] == ["d", "a", "b", "e", "c", "y", "z"]


def test_sensitivity_to_acceptance_at_the_base_budget(hand_path):
    """tok/s = tau / step, and the step does not depend on tau: (tau - 1) +-20% moves tok/s by
    +-0.2 (tau - 1) / tau exactly, at the base point's budget (table tau 3 at B = 4: 2/15)."""
    from perfmodel.explore import sensitivity

    acc = "acceptance (τ − 1)"
    req = _req(hand_path, model=_tiny_with_drafter(), spec="ddtree", acceptance="table:4=3,16=3.5", budget=4,
               concurrency=[1])
    at4 = {r["input"]: r for r in sensitivity(req)}[acc]
    assert (at4["plus"], at4["minus"]) == pytest.approx((0.2 * 2 / 3, -0.2 * 2 / 3), rel=1e-9)
    auto = _req(hand_path, model=_tiny_with_drafter(), spec="ddtree", acceptance="table:4=3,16=3.5", concurrency=[1])
    tau = projector(auto).point(1)["tau"]
    assert {r["input"]: r for r in sensitivity(auto)}[acc]["plus"] == pytest.approx(0.2 * (tau - 1) / tau, rel=1e-9)
    # host overhead (host step 100 us + graph launch 10 us) +-20%: the step moves by +-22 us
    plain = _req(hand_path, concurrency=[1])
    step = projector(plain).point(1)["step_ms"]
    rows = {r["input"]: r for r in sensitivity(plain)}
    host = rows["host overhead (per step, per launch)"]
    assert (host["plus"], host["minus"]) == pytest.approx((step / (step + 0.022) - 1, step / (step - 0.022) - 1))


def test_evaluate_at_the_base_budget_even_when_auto_would_pick_another(hand_path):
    """A base point priced at budget 8 (auto would pick 4 here): a what-if that does not re-choose
    is priced at 8 too, so its gain is the change alone."""
    req = _req(hand_path, model=_tiny_with_drafter(), spec="ddtree", acceptance="0.8", concurrency=[1])
    pj = projector(req)
    assert pj.point(1)["budget"] == 4
    base = [pj.point(1, 8)]
    for key in ("graphs", "host_half", "latency_floor_half"):
        new = explore.evaluate(req, _by_key(req, has_drafter=True)[key], base)["per_concurrency"][0]["new"]
        assert new["budget"] == 8 and new["tau"] == base[0]["tau"]


def test_components_missing_on_one_side_count_as_zero(hand_path):
    """Speculation off: the draft term (the largest change) is gone, its new value 0; speculation
    on from a plain base: the draft term appears from 0."""
    req = _req(hand_path, model=_tiny_with_drafter(), spec="ddtree", acceptance="0.8", concurrency=[1])
    base = projector(req).run()["points"]
    off = explore.evaluate(req, _by_key(req, has_drafter=True)["spec_none"], base)["per_concurrency"][0]
    assert off["component"] == "draft" and off["component_new_ms"] == 0.0
    assert off["component_base_ms"] == base[0]["breakdown_ms"]["draft"] > 0.2  # 22 calls of 10 us
    plain = _req(hand_path, model=_tiny_with_drafter(), concurrency=[1])
    pbase = projector(plain).run()["points"]
    on = explore.evaluate(plain, _by_key(plain, has_drafter=True)["spec_ddtree"], pbase)["per_concurrency"][0]
    assert on["component"] == "draft" and on["component_base_ms"] == 0.0 and on["component_new_ms"] > 0.2


def test_collective_latency_half_on_two_gpus(hand_path):
    """TP2: 2 all-reduces per layer + the logits gather = 3 all-reduces a step, each at the link
    spec's latency (the hand profile measured no collectives); halving the latency saves 1.5 of them."""
    from perfmodel.specs import registry

    req = _req(hand_path, gpus=2, concurrency=[1])
    v = _by_key(req)
    assert "collective_latency_half" in v and "collective_latency_half" not in _by_key(_req(hand_path))
    lat = registry.load_link(registry.load_gpu("h200").default_interconnect).calibrated.allreduce_latency_us.value
    base = projector(req).run()["points"]
    c = explore.evaluate(req, v["collective_latency_half"], base)["per_concurrency"][0]
    assert c["component"] == "collectives"
    assert base[0]["step_ms"] - c["new"]["step_ms"] == pytest.approx(1.5 * lat * ONE_US, rel=1e-9)


def test_sensitivity_keeps_the_budget_even_when_speculation_stops_paying(hand_path):
    """Speculation barely pays at the base (tau 2.4 at B = 4 for a step about twice the plain
    one); (tau - 1) -20% makes it lose to plain decode, but the row is at the base budget:
    (1 + 0.8 x 1.4) / 2.4 - 1 exactly. Where the base does not speculate (alpha 0), there is
    no acceptance row."""
    from perfmodel.explore import sensitivity

    acc = "acceptance (τ − 1)"
    req = _req(hand_path, model=_tiny_with_drafter(), spec="ddtree", acceptance="table:4=2.4,512=2.4",
               concurrency=[1])
    assert projector(req).point(1)["budget"] == 4
    row = {r["input"]: r for r in sensitivity(req)}[acc]
    assert row["minus"] == pytest.approx((1 + 0.8 * 1.4) / 2.4 - 1, rel=1e-9)
    assert row["plus"] == pytest.approx((1 + 1.2 * 1.4) / 2.4 - 1, rel=1e-9)
    none = _req(hand_path, model=_tiny_with_drafter(), spec="ddtree", acceptance="0.0", concurrency=[1])
    assert acc not in {r["input"] for r in sensitivity(none)}
