"""The Projector's wiring of the laws, against hand-worked figures and limits: the verify step
prices B + 1 tokens, tau's interval never drops below one token, the interval of a profile
without end-to-end points is the step's own sigma, the budget choice and its curve, and the
self-check agrees with validate point by point."""

import math
import statistics

import pytest
from test_physics_step import _tiny_with_drafter, hand_machine, hand_profile

from perfmodel.api import project, projector, self_check
from perfmodel.model.layers import Layout
from perfmodel.model.step import Z90, step_estimate
from perfmodel.profile import save_profile
from perfmodel.scenario import Request


def _tiny(path, **kw):
    base = dict(target="h200", gpus=1, model=_tiny_with_drafter(), concurrency=[2], profile=path, context=100,
                spec="ddtree")
    return projector(Request(**(base | kw)))


def test_verify_step_prices_b_plus_one_tokens(hand_path):
    """Budget B: the verify part of the step is the target's step over B + 1 tokens per sequence
    (less the host step, which the split reports apart); draft, tree build, verify and host add
    up to the step."""
    pj = _tiny(hand_path, budget=8, acceptance="0.8")
    p = pj.point(2)
    verify = step_estimate(pj.model, hand_machine(), Layout("tp", 1), 2, 9, 100)
    s = p["spec_split"]
    assert s["verify_ms"] == pytest.approx((verify.step_us - verify.breakdown_us["host"]) / 1e3, rel=1e-12)
    assert s["tree_build_ms"] == pytest.approx((50.0 + 0.5 * 2 * 8) / 1e3)  # GPU build: 50 + 0.5 x C x B
    assert s["draft_ms"] + s["tree_build_ms"] + s["verify_ms"] + s["other_ms"] == pytest.approx(p["step_ms"])
    assert p["tau"] == pytest.approx((1 - 0.8**4) / 0.2)  # chain of the block's 3 + bonus: 1 + .8 + .64 + .512


def test_interval_without_self_check_is_the_step_sigma(hand_path):
    """A profile with no end-to-end points has no self-check error: the step's 90% interval is
    +-1.645 sigma of its terms, and with tau known exactly tok/s is tau over the step's ends."""
    pj = projector(Request(target="h200", gpus=1, model=_tiny_with_drafter(), concurrency=[1], profile=hand_path,
                           context=100))
    res = pj.run()
    assert res["self_check"]["n_points"] == 0 and res["self_check"]["median_abs_err"] is None
    p = res["points"][0]
    est = step_estimate(pj.model, hand_machine(), Layout("tp", 1), 1, 1, 100)
    lo, hi = p["interval"]["step_ms"]
    assert est.sigma_us > 0
    assert hi - p["step_ms"] == pytest.approx(Z90 * est.sigma_us / 1e3, rel=1e-9)
    assert p["step_ms"] - lo == pytest.approx(Z90 * est.sigma_us / 1e3, rel=1e-9)
    assert p["interval"]["tokens_per_s_per_stream"] == pytest.approx([1e3 / hi, 1e3 / lo], rel=1e-12)
    assert "tau_sigma" not in p and "tau_measured" not in p and p["interval"]["tau"] is None  # omitted: None


def test_tau_interval_floors_at_one_token(hand_path):
    """A table tau of 1.5 +- 1.0: 1.5 - 1.645 is below one token a step, which no step yields
    less than: the lower end is 1; the upper end is 1.5 + 1.645. tok/s combines the step's and
    tau's relative errors in quadrature, in log space."""
    p = _tiny(hand_path, budget=3, acceptance="table:3=1.5±1.0").point(1)
    assert p["tau"] == 1.5 and p["tau_sigma"] == 1.0 and p["tau_measured"] is True
    assert p["interval"]["tau"] == pytest.approx([1.0, 1.5 + Z90])
    lo_s, hi_s = p["interval"]["step_ms"]
    tps = p["tokens_per_s_per_stream"]
    down = math.hypot(math.log(hi_s / p["step_ms"]), math.log(1.5 / 1.0))
    up = math.hypot(math.log(p["step_ms"] / lo_s), math.log((1.5 + Z90) / 1.5))
    assert p["interval"]["tokens_per_s_per_stream"] == pytest.approx([tps * math.exp(-down), tps * math.exp(up)])
    # a modelled tau (scalar alpha) is not measured
    assert _tiny(hand_path, budget=3, acceptance="0.8").point(1)["tau_measured"] is False


def test_auto_budget_and_its_curve(hand_path):
    """tau saturated at the smallest candidate tree (4 nodes already yield the block's 4 tokens,
    the cap of a 4-token block): every larger tree costs more and yields no more, so auto picks 4; the curve lists no speculation
    and every candidate; no speculation at all (tau 1) reports tau_measured None."""
    pj = _tiny(hand_path, budget="auto", acceptance="table:4=4,512=4")
    p = pj.point(1)
    assert p["budget"] == 4 and p["tau"] == 4.0 and p["speculation_fits"] is True
    assert [c["budget"] for c in p["budget_curve"]] == [0, 4, 8, 16, 32, 64, 128, 256, 512]
    for c in p["budget_curve"]:
        assert c["tokens_per_s_per_stream"] == pytest.approx(c["tau"] / c["step_ms"] * 1e3, rel=1e-12)
    assert p["budget_note"] == "best budget 4 of [0, 4, 8, 16, 32, 64, 128, 256, 512]"
    none = _tiny(hand_path, budget="auto", acceptance="0.0").point(1)
    assert none["budget"] == 0 and none["tau"] == 1.0 and "tau_measured" not in none and "tau_sigma" not in none
    assert none["speculation_fits"] is True and none["budget_note"] == "no speculation is fastest at this concurrency"
    one = _tiny(hand_path, budget=1, acceptance="0.8").point(1)  # a one-node tree is speculation too
    assert one["budget"] == 1 and one["speculation_fits"] is True and one["tau"] == pytest.approx(1.8)


def test_breakdown_is_largest_first(hand_path):
    p = _tiny(hand_path, budget=8, acceptance="0.8").point(2)
    v = list(p["breakdown_ms"].values())
    assert v == sorted(v, reverse=True) and len(v) > 3


def test_budget_curve_marks_trees_that_do_not_fit():
    """Kimi TP8 on B300 at C = 292: no speculation fits (0.576 GB of KV a sequence); every tree
    with the drafter does not, and is listed as not fitting, with no figures."""
    p = project(Request(target="b300", gpus=8, spec="ddtree", concurrency=[292]))["points"][0]
    curve = p["budget_curve"]
    assert [c["budget"] for c in curve] == [0, 4, 8, 16, 32, 64, 128, 256, 512]
    assert curve[0]["fits_in_memory"] is True
    assert all(c["fits_in_memory"] is False and "tau" not in c for c in curve[1:])
    assert p["speculation_fits"] is False and p["budget"] == 0


def test_self_check_agrees_with_validate_point_by_point():
    """The self-check and validate's 1-GPU rows price the same profile points: the same
    predicted ms and error for each."""
    from importlib import resources

    from perfmodel.profile import load_profile
    from perfmodel.validate import run_validation

    path = str(resources.files("perfmodel").joinpath("data", "h200-sxm.json"))
    sc = self_check(load_profile(path))
    rows = [r for r in run_validation([path], published=False)["rows"] if r["kind"] == "e2e-1gpu"]
    assert sc["n_points"] == len(rows) > 5
    for a, r in zip(sc["points"], rows):
        assert a["predicted_ms"] == pytest.approx(r["predicted"], rel=1e-12)
        assert a["err"] == pytest.approx(r["err"], rel=1e-12)
        assert 0.2 < a["predicted_ms"] / a["measured_ms"] < 5  # ms, both
    assert sc["median_abs_err"] == pytest.approx(statistics.median(abs(a["err"]) for a in sc["points"]))
    assert sc["max_abs_err"] == pytest.approx(max(abs(a["err"]) for a in sc["points"]))


def test_observed_spec_figure_uses_the_requests_acceptance():
    """--observed with spec=ddtree,b=16: the uncalibrated figure is the model's own projection of
    that point with the request's acceptance (table tau 6.1), i.e. tau / step."""
    o = project(Request(target="b300", gpus=8, spec="ddtree", budget=16, concurrency=[1],
                        acceptance="table:16=6.1", observed="h200,tp8,c=1,300tok/s,spec=ddtree,b=16"))["observed"]
    h = project(Request(target="h200", gpus=8, spec="ddtree", budget=16, concurrency=[1],
                        acceptance="table:16=6.1"))["points"][0]
    assert h["tau"] == pytest.approx(6.1)
    assert o["uncalibrated_tokens_per_s_per_stream"] == pytest.approx(h["tokens_per_s_per_stream"], rel=1e-9)


def test_tps_interval_combines_tau_and_step_errors_in_log_space(hand_path):
    """tau 3 +- 0.5 (90%: 2.18 .. 3.82): the tok/s interval's ends are tps x exp(-+hypot(step's
    log error, tau's log error)), with tau's from 3 / 2.18 and 3.82 / 3."""
    p = _tiny(hand_path, budget=3, acceptance="table:3=3.0±0.5").point(1)
    t_lo, t_hi = 3.0 - Z90 * 0.5, 3.0 + Z90 * 0.5
    assert p["interval"]["tau"] == pytest.approx([t_lo, t_hi])
    lo_s, hi_s = p["interval"]["step_ms"]
    tps = p["tokens_per_s_per_stream"]
    down = math.hypot(math.log(hi_s / p["step_ms"]), math.log(3.0 / t_lo))
    up = math.hypot(math.log(p["step_ms"] / lo_s), math.log(t_hi / 3.0))
    assert p["interval"]["tokens_per_s_per_stream"] == pytest.approx([tps * math.exp(-down), tps * math.exp(up)])
    assert p["interval"]["level"] == 0.9


def test_aggregate_interval_is_c_times_the_per_stream_one(hand_path):
    pj = projector(Request(target="h200", gpus=1, model=_tiny_with_drafter(), concurrency=[4], profile=hand_path,
                           context=100))
    p = pj.point(4)
    assert p["tokens_per_s"] == pytest.approx(4 * p["tokens_per_s_per_stream"])
    assert p["interval"]["tokens_per_s"] == pytest.approx([4 * x for x in p["interval"]["tokens_per_s_per_stream"]])
    assert p["tokens_per_s_per_gpu"] == pytest.approx(4 * p["tokens_per_s_per_stream"])  # one GPU
    assert p["tpot_ms"] == p["itl_ms"] == p["step_ms"]  # tau = 1


def test_an_explicit_budget_of_one_speculates(hand_path):
    """point(C, 1): a one-node tree, tau = 1 + alpha, with a draft term; point(C, 0): plain."""
    pj = _tiny(hand_path, budget="auto", acceptance="0.8")
    one, zero = pj.point(1, 1), pj.point(1, 0)
    assert one["budget"] == 1 and one["tau"] == pytest.approx(1.8) and one["spec_split"]["draft_ms"] > 0.2
    assert zero["budget"] == 0 and zero["tau"] == 1.0 and zero["spec_split"] is None


def test_a_drafter_yields_at_most_its_block_whatever_the_acceptance_file(hand_path, tmp_path):
    """A calibration file of 20 depths, every node accepted: tau(B) would be min(B, 20) + 1,
    but the tiny drafter's block is 4 tokens: tau is capped at 4 for B >= 3, at B + 1 below."""
    import json

    f = tmp_path / "all.json"
    f.write_text(json.dumps({"q": [[1.0]] * 20, "p": [[1.0]] * 20}))
    pj = _tiny(hand_path, budget=16, acceptance=f"file:{f}")
    assert pj.point(1)["tau"] == 4.0
    assert pj.point(1, 2)["tau"] == 3.0


def test_step_interval_never_below_zero(tmp_path):
    """A profile whose end-to-end points ran 3x slower than its components predict: a
    self-check error of 2/3, and 1.645 x 2/3 > 1: the step's lower end stops at 1 ns (never
    zero or negative), the upper end is step x (1 + 1.645 x error) at least."""
    from importlib import resources

    from perfmodel.profile import load_profile

    prof = load_profile(str(resources.files("perfmodel").joinpath("data", "h200-sxm.json")))
    slow = prof.model_copy(update={"e2e": [p.model_copy(update={"step_ms": p.step_ms * 3}) for p in prof.e2e]})
    path = tmp_path / "slow.json"
    save_profile(slow, path)
    res = project(Request(target="h200", gpus=1, model="llama-3.1-8b", concurrency=[1], profile=str(path)))
    err = res["self_check"]["median_abs_err"]
    assert err > 0.61
    p = res["points"][0]
    lo, hi = p["interval"]["step_ms"]
    assert 0 < lo <= 1e-6
    assert hi >= p["step_ms"] * (1 + Z90 * err) * (1 - 1e-12)


def test_cached_self_check_never_serves_another_profiles_result():
    """The cache is keyed by the profile object's id; an id reused by another profile (after
    the first was freed) must not get the first one's self-check."""
    from importlib import resources

    from perfmodel import api as pmod
    from perfmodel.profile import load_profile

    a = load_profile(str(resources.files("perfmodel").joinpath("data", "h200-sxm.json")))
    b = a.model_copy(update={"e2e": []})
    pmod._CHECKS[id(b)] = (a, self_check(a))  # as if b took a freed a's id
    try:
        assert pmod.cached_self_check(b)["n_points"] == 0
        assert pmod.cached_self_check(b) is pmod.cached_self_check(b)  # then cached for b
    finally:
        pmod._CHECKS.pop(id(b), None)


def test_variant_projector_prices_its_own_machine_uncalibrated(hand_path):
    """pj.variant(machine=...) prices the machine it is given (host halved: the step 50 us
    shorter, the graph launch 5 us); an uncalibrated projection's rules never say 'calibrated'."""
    from perfmodel.model.whatif import HOST_FIELDS, scale_overheads

    pj = projector(Request(target="h200", gpus=1, model=_tiny_with_drafter(), concurrency=[1], profile=hand_path,
                           context=100))
    v = pj.variant(machine=scale_overheads(0.5, *HOST_FIELDS)(pj.machine))
    assert pj.point(1)["step_ms"] - v.point(1)["step_ms"] == pytest.approx(0.055)
    assert pj.variant().point(1)["step_ms"] == pj.point(1)["step_ms"]
    assert not any("calibrated" in (r or "") for r in pj.run()["rules"].values())


def test_plain_decode_memory_reserves_no_speculative_tokens():
    """Kimi TP8 on B300 at C = 292, auto budget: no speculation fits, and the point's KV is that
    of 8192 tokens a sequence exactly (61 x 576 x 2 B each), none reserved for a tree; the note
    prices the drafter and the smallest tree (4 nodes: 8192 + 5 tokens) above the plain weights."""
    import re

    p = project(Request(target="b300", gpus=8, spec="ddtree", concurrency=[292]))["points"][0]
    assert p["budget"] == 0
    assert p["memory_GB"]["kv"] == pytest.approx(292 * 61 * 576 * 2 * 8192 / 1e9, rel=1e-12)
    w, kv = (float(x) for x in re.search(r"weights ([\d.]+) GB \+ KV ([\d.]+) GB", p["budget_note"]).groups())
    assert kv == pytest.approx(292 * 61 * 576 * 2 * (8192 + 5) / 1e9, abs=0.05)
    assert w > p["memory_GB"]["weights"] + 0.1  # the drafter's weights
    # and a point that does not fit at all names the drafter's weights too
    s = project(Request(target="b300", gpus=8, spec="ddtree", budget=16, concurrency=[100000]))["points"][0]
    plain = project(Request(target="b300", gpus=8, concurrency=[100000]))["points"][0]
    assert s["memory_GB"]["weights"] > plain["memory_GB"]["weights"] + 0.1


def test_chain_on_a_two_token_block_speculates_one_node(hand_path, tmp_path):
    """A drafter of block 2 drafts one token: chain auto tries budget 1 only, and at alpha 0.9
    (tau 1.9) it is the best; the note says so."""
    from test_physics_step import tiny_model

    from perfmodel.specs.schema import DrafterSpec

    m = tiny_model(drafter=DrafterSpec(name="d2", source="hand-written test drafter", n_layers=1, hidden_size=64,
                                       n_heads=4, n_kv_heads=2, head_dim=32, intermediate_size=128, block_size=2))
    p = projector(Request(target="h200", gpus=1, model=m, concurrency=[1], profile=hand_path, context=100,
                          spec="chain", acceptance="0.9")).point(1)
    assert p["budget"] == 1 and p["tau"] == pytest.approx(1.9)
    assert p["budget_note"] == "best budget 1 of [0, 1]"


def test_projection_names_its_tree_build_and_layout_notes(hand_path):
    base = dict(target="h200", gpus=1, model=_tiny_with_drafter(), concurrency=[1], profile=hand_path, context=100)
    assert project(Request(**base, spec="ddtree", acceptance="0.8"))["tree_build"] == "gpu"
    assert project(Request(**base, spec="chain", acceptance="0.8"))["tree_build"] is None
    assert project(Request(**base))["tree_build"] is None
    assert project(Request(**base)).layout_notes is None  # (omitted from the JSON)
    notes = project(Request(target="b300", gpus=16, model="llama-3.1-8b", concurrency=[1]))["layout_notes"]
    assert notes and notes[0].startswith("TP 16 > 8 KV heads")


def test_one_point_calibration_keeps_the_self_check_error(tmp_path):
    """--observed fits one point exactly (its in-sample error ~0) and has no leave-one-out
    error: the interval keeps the self-check's error, at least 1.645 x that x step wide."""
    res = project(Request(target="h200", gpus=8, concurrency=[1], observed="h200,tp8,c=1,50tok/s"))
    err = res["self_check"]["median_abs_err"]
    p = res["points"][0]
    assert err > 0.005
    assert p["interval"]["step_ms"][1] - p["step_ms"] >= Z90 * err * p["step_ms"] * (1 - 1e-9)
    # the model's error is the larger of the two: the self-check's, not the fit's ~0 in-sample one
    pj = projector(Request(target="h200", gpus=8, concurrency=[1], observed="h200,tp8,c=1,50tok/s"))
    assert pj.calibration.loo_median_abs_err is None and pj.calibration.median_abs_err < err
    assert pj.model_error() == err


def test_observed_with_a_model_file(tmp_path):
    """A model given as a YAML file calibrates from --observed like a named one."""
    import shutil
    from importlib import resources

    src = resources.files("perfmodel").joinpath("modelspecs", "llama-3.1-8b.yaml")
    path = tmp_path / "mine.yaml"
    shutil.copy(str(src), path)
    res = project(Request(target="h200", gpus=1, model_file=str(path), concurrency=[1],
                          observed="h200,tp1,c=1,100tok/s"))
    named = project(Request(target="h200", gpus=1, model="llama-3.1-8b", concurrency=[1],
                            observed="h200,tp1,c=1,100tok/s"))
    assert res["observed"]["calibrated_tokens_per_s_per_stream"] == pytest.approx(
        named["observed"]["calibrated_tokens_per_s_per_stream"], rel=1e-9)


def test_split_without_a_host_step(tmp_path):
    """A profile whose host step is 0: the split's other part is 0 and the parts still add up."""
    from test_physics_step import GLAUNCH, LAUNCH, NODE

    from perfmodel.profile import Overheads

    prof = hand_profile().model_copy(update={"overheads": Overheads(
        launch_eager_us=LAUNCH, graph_node_us=NODE, graph_launch_us=GLAUNCH, host_step_us=0.0)})
    save_profile(prof, tmp_path / "p.json")
    p = _tiny(str(tmp_path / "p.json"), budget=8, acceptance="0.8").point(1)
    s = p["spec_split"]
    assert s["other_ms"] == 0.0
    assert s["draft_ms"] + s["tree_build_ms"] + s["verify_ms"] == pytest.approx(p["step_ms"], rel=1e-12)


def test_a_calibration_carries_its_kernel_set(tmp_path):
    """A calibration's factors move the laws of the kernel set it was fitted on, so a projection
    with it prices that set: by default, or when --kernels names the same set; asking for
    another set is refused, naming both."""
    from perfmodel.calibrate import write_result
    from perfmodel.request import ProjectionError

    base = dict(target="h200", gpus=1, model="llama-3.1-8b", concurrency=[1])
    pj = projector(Request(**base, kernels="torch", observed="h200,tp1,c=1,100tok/s"))  # the same set: accepted
    assert pj.kernels == "torch" and pj.calibration.kernels == "torch"
    torch_cal, own_cal = tmp_path / "torch.json", tmp_path / "own.json"
    write_result(pj.calibration, torch_cal)
    write_result(projector(Request(**base, observed="h200,tp1,c=1,100tok/s")).calibration, own_cal)
    assert projector(Request(**base, calibration=str(torch_cal))).kernels == "torch"  # the file's set by default
    assert projector(Request(**base, kernels="torch", calibration=str(torch_cal))).kernels == "torch"
    with pytest.raises(ProjectionError, match="--kernels torch: the calibration was fitted on kernel set 'perfmodel'"):
        projector(Request(**base, kernels="torch", calibration=str(own_cal)))


def test_an_observed_speculative_figure_scales_tau():
    """--observed at spec=ddtree,b=16 with a table tau of 6.1: an engine faster than the model
    credits part of it to acceptance (tau factor k > 1, slower: k < 1), and the calibrated tau is
    6.1 x k, never above the 16-token block."""
    kw = dict(target="b300", gpus=8, spec="ddtree", budget=16, concurrency=[1], acceptance="table:16=6.1")
    ks = []
    for tps in (100, 1000):
        pj = projector(Request(**kw, observed=f"h200,tp8,c=1,{tps}tok/s,spec=ddtree,b=16"))
        k = pj.factors.get("tau")
        assert pj.point(1)["tau"] == pytest.approx(min(6.1 * k, 16.0), rel=1e-12)
        ks.append(k)
    assert ks[0] < 1 < ks[1]
