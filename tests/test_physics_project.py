"""The Projector's wiring of the laws, against hand-worked figures and limits: the verify step
prices B + 1 tokens, tau's interval never drops below one token, the interval of a profile
without end-to-end points is the step's own sigma, the budget choice and its curve, and the
self-check agrees with validate point by point."""

import math
import statistics

import pytest
from test_physics_step import _tiny_with_drafter, hand_machine

from perfmodel.model.layers import Layout
from perfmodel.model.project import Projector, Request, project, self_check
from perfmodel.model.step import Z90, step_estimate


def _tiny(path, **kw):
    base = dict(target="h200", gpus=1, model=_tiny_with_drafter(), concurrency=[2], profile=path, context=100,
                spec="ddtree")
    return Projector(Request(**(base | kw)))


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
    pj = Projector(Request(target="h200", gpus=1, model=_tiny_with_drafter(), concurrency=[1], profile=hand_path,
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
