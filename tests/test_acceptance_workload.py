"""Acceptance by workload from published figures, the engine's own number, and tau's share of an
interval (perfmodel.model.acceptance, perfmodel/data/acceptance.yaml)."""

import math

import numpy as np
import pytest

from perfmodel.model import acceptance as A
from perfmodel.specs import registry
from perfmodel.specs.schema import AcceptanceData, AcceptanceFigure, DraftSetting

FIGS = registry.load_acceptance_data().figures


def fig(**kw):
    base = dict(id="t-1", drafter="eagle3", workload="chat", dataset="d", target="t",
                setting={"structure": "chain", "draft_tokens": 3}, tau=2.5, source="hand-written test figure")
    base.update(kw)
    return AcceptanceFigure.model_validate(base)


# ----------------------------------------------------------------------------- the data file
def test_every_shipped_figure_is_cited_and_physical():
    data = registry.load_acceptance_data()
    assert len(data.figures) >= 40
    for f in data.figures:
        assert len(f.source) > 10, f.id
        cap = f.setting.verify_width
        assert 1.0 <= f.tau <= cap, f.id
    kinds = {(f.drafter, f.workload) for f in data.figures}
    for d in ("dflash", "eagle3", "mtp"):  # every drafter has at least chat, code and math
        assert {(d, w) for w in ("chat", "code", "math")} <= kinds, d


def test_schema_refuses_what_a_setting_cannot_yield(tmp_path):
    with pytest.raises(ValueError, match="above the 4 tokens"):
        fig(tau=4.5)
    with pytest.raises(ValueError, match="needs budgets, depth"):
        DraftSetting(structure="ddtree")
    with pytest.raises(ValueError, match="above the 3 tokens"):  # an EAGLE tree yields at most steps + 1
        fig(setting={"structure": "eagle-tree", "topk": 4, "steps": 2, "verify_tokens": 8}, tau=3.5)
    with pytest.raises(ValueError, match="duplicate figure ids"):
        AcceptanceData(figures=[fig(), fig()])
    bad = tmp_path / "acc.yaml"
    bad.write_text("figures:\n  - {id: x1, drafter: eagle3, workload: chat, dataset: d, target: t, "
                   "setting: {structure: chain, draft_tokens: 2}, tau: 9, source: somewhere}\n")
    with pytest.raises(registry.SpecError) as ei:
        registry.load_acceptance_file(bad)
    assert "\n" not in str(ei.value) and "figures.0" in str(ei.value)


# ----------------------------------------------------------------------------- the shape
@pytest.mark.parametrize("setting,tau", [
    (("chain", 3, None, None, None, None, None), 2.3),
    (("chain", 15, None, None, None, None, None), 6.36),
    (("ddtree", None, (64, 128), 15, None, None, None), 9.54),
    (("eagle-tree", None, None, None, 8, 8, 64), 5.88),
])
def test_the_fitted_scale_reproduces_the_figure(setting, tau):
    s1 = A.fit_scale(setting, tau)
    assert A.setting_tau(s1, setting) == pytest.approx(tau, abs=1e-6)


def test_a_chain_with_flat_confidence_is_leviathan_chain():
    """decay 1 and a = 1: every depth accepts with the top-1 probability 1 / H_{K,s1}, so a chain's
    tau is (1 - a^(k+1)) / (1 - a)."""
    s1 = A.fit_scale(("chain", 4, None, None, None, None, None), 3.08)
    r = np.arange(1, 1025, dtype=float)
    alpha = 1.0 / np.sum(r ** -s1)
    assert A.chain_tau(alpha, 4) == pytest.approx(3.08, abs=1e-6)


def test_a_figure_the_family_cannot_reach_is_named():
    with pytest.raises(ValueError, match="outside what the draft family gives"):
        A.fit_scale(("chain", 2, None, None, None, None, None), 3.5)


def test_shape_slope_is_the_rms_error_per_doubling_of_the_series():
    """Two figures of one series, a chain of 2 at tau 2.2 and of 6 at 3.0: each fit predicts the
    other; the slope is sqrt(sum e^2 / sum d^2) with d = log2(7/3)."""
    a = fig(id="s-2", setting={"structure": "chain", "draft_tokens": 2}, tau=2.2, series="s")
    b = fig(id="s-6", setting={"structure": "chain", "draft_tokens": 6}, tau=3.0, series="s")
    lone = fig(id="lone", tau=2.0)
    sa, sb = (A.fit_scale(A._setting_fields(f.setting), f.tau) for f in (a, b))
    e1 = (A.setting_tau(sa, A._setting_fields(b.setting)) - 1) / 2.0 - 1
    e2 = (A.setting_tau(sb, A._setting_fields(a.setting)) - 1) / 1.2 - 1
    d = math.log2(7 / 3)
    assert A.shape_slope([a, b, lone]) == pytest.approx(math.sqrt((e1 ** 2 + e2 ** 2) / (2 * d * d)))
    assert A.shape_slope([lone]) == 0.0


def test_shipped_series_are_within_the_engine_sources_two_sigma():
    """Fitted to one figure of a published tau-vs-setting series, the flat-confidence shape puts
    every other figure of the series within 2 sigma of what from_engine_acceptance claims there:
    hypot(DEFAULT_SIGMA_REL, slope x |log2 width ratio|) of (tau - 1)."""
    figs = list(FIGS)
    slope = A.shape_slope(figs)
    assert 0 < slope < 0.1
    for g in A._groups(figs):
        for fi in g:
            for fj in g:
                if fi is fj:
                    continue
                si = A.fit_scale(A._setting_fields(fi.setting), fi.tau)
                e = (A.setting_tau(si, A._setting_fields(fj.setting)) - 1) / (fj.tau - 1) - 1
                d = abs(math.log2(fj.setting.verify_width / fi.setting.verify_width))
                assert abs(e) <= 2 * math.hypot(A.DEFAULT_SIGMA_REL, slope * d), (fi.id, fj.id, e, d)


# ----------------------------------------------------------------------------- workload presets
def test_no_workload_spans_the_classes():
    """With no workload named, tau is the mean of the class means and its 1-sigma is at least
    their spread: every class mean lies inside tau +- 1.645 sigma."""
    for drafter, depth, structure, b in (("dflash", 15, "ddtree", 16), ("eagle3", 3, "chain", 3), ("mtp", 3, "chain", 3)):
        cls = {}
        for w in A.WORKLOADS:
            try:
                cls[w] = A.workload_source(drafter, w, depth, structure, figures=FIGS)
            except ValueError:
                continue
        anyw = A.workload_source(drafter, None, depth, structure, figures=FIGS)
        mus = np.array([s.tau(b) for s in cls.values()])
        assert anyw.tau(b) == pytest.approx(mus.mean())
        assert anyw.tau_sigma(b) >= mus.std() - 1e-12
        assert anyw.tau_sigma(b) ** 2 == pytest.approx(
            np.mean([s.tau_sigma(b) ** 2 for s in cls.values()]) + mus.var())
        for w, mu in zip(cls, mus):
            assert abs(mu - anyw.tau(b)) <= 1.645 * anyw.tau_sigma(b), (drafter, w)
        assert anyw.kind == f"workload:any@{drafter}" and "acceptance.yaml" in anyw.description


def test_kimi_ddtree_interval_is_wider_without_a_workload():
    """The bar: with no workload named the DDTree tau for Kimi K2.6 + DFlash (depth 15) at budget 16
    is less certain than the single-benchmark default (sigma 0.544 on tau 6.45 there)."""
    old = A.parametric("dflash_default", depth=15, structure="ddtree")
    new = A.workload_source("dflash", None, 15, "ddtree", figures=FIGS)
    assert old.tau(16) == pytest.approx(6.454, abs=1e-3) and old.tau_sigma(16) == pytest.approx(0.544, abs=1e-3)
    assert new.tau_sigma(16) > 2 * old.tau_sigma(16)
    assert new.tau_sigma(16) / new.tau(16) > 2 * old.tau_sigma(16) / old.tau(16)


def test_tau_grows_with_the_tree_and_no_speculation_is_exact():
    s = A.workload_source("dflash", "code", 15, "ddtree", figures=FIGS)
    c = [s.tau(b) for b in (0, 1, 4, 16, 64, 256)]
    assert c[0] == 1.0 and s.tau_sigma(0) == 0.0
    assert all(x < y for x, y in zip(c, c[1:]))
    ch = A.workload_source("eagle3", "math", 3, "chain", figures=FIGS)
    assert ch.tau(3) == ch.tau(10) and ch.tau(3) <= 4.0  # a chain of 3 yields at most 4 tokens


def test_a_class_without_figures_is_refused_not_derived():
    with pytest.raises(ValueError, match="no published EAGLE-3 acceptance figures for workload 'thinking'"):
        A.workload_source("eagle3", "thinking", 3, "chain", figures=FIGS)
    with pytest.raises(ValueError, match="unknown workload"):
        A.workload_source("dflash", "poetry", figures=FIGS)
    with pytest.raises(ValueError, match="unknown drafter kind"):
        A.workload_source("medusa", "chat", figures=FIGS)


def test_one_figure_class_takes_the_pooled_spread():
    """DFlash's thinking class has one figure: its sigma is the pooled within-class relative spread
    times (tau - 1), with the shape term on top (never 0)."""
    s = A.workload_source("dflash", "thinking", 15, "chain", figures=FIGS)
    assert "pooled within-class spread" in s.sigma_note
    assert s.tau(15) == pytest.approx(4.75, rel=1e-6)  # its one figure, at its own setting
    assert s.tau_sigma(15) > 0.1 * (s.tau(15) - 1)


def test_class_figures_are_averaged_per_series():
    """A series (one run at several chain lengths) counts once in its class."""
    a = fig(id="a-2", setting={"structure": "chain", "draft_tokens": 2}, tau=2.2, series="a")
    b = fig(id="a-4", setting={"structure": "chain", "draft_tokens": 4}, tau=2.8, series="a")
    c = fig(id="c-3", setting={"structure": "chain", "draft_tokens": 3}, tau=2.0)
    s = A.workload_source("eagle3", "chat", 3, "chain", figures=[a, b, c])
    ta = np.mean([A.workload_source("eagle3", "chat", 3, "chain", figures=[x]).tau(3) for x in (a, b)])
    tc = A.workload_source("eagle3", "chat", 3, "chain", figures=[c]).tau(3)
    assert s.tau(3) == pytest.approx((ta + tc) / 2)


# ----------------------------------------------------------------------------- the engine's number
def test_engine_metrics_count_the_bonus_token():
    assert A.tau_from_engine_metric(3.1, "accept_len") == 3.1  # SGLang
    assert A.tau_from_engine_metric(3.1, "mean_acceptance_length") == 3.1  # vLLM
    assert A.tau_from_engine_metric(0.25, "acceptance_rate", draft_tokens=15) == pytest.approx(4.75)
    assert A.tau_from_engine_metric([0.633, 0.404, 0.264], "per_position") == pytest.approx(2.301)
    assert A.tau_from_engine_metric(2.1, "accepted_per_step") == pytest.approx(3.1)
    for bad in ((0.5, "acceptance_rate", None), (1.2, "acceptance_rate", 3), ([0.4, 0.6], "per_position", None),
                (0.5, "mean_acceptance_length", None), (2.0, "nope", None)):
        with pytest.raises(ValueError):
            A.tau_from_engine_metric(bad[0], bad[1], draft_tokens=bad[2])


def test_engine_number_is_exact_where_measured_and_less_certain_away():
    st = A.engine_setting(draft_tokens=4)
    s = A.from_engine_acceptance(3.08, st, "eagle3", "chain", depth=7, figures=FIGS)
    assert s.tau(4) == pytest.approx(3.08, abs=1e-6) and s.measured
    assert s.tau_sigma(4) == pytest.approx(A.DEFAULT_SIGMA_REL * 2.08, rel=1e-6)
    rel = [s.tau_sigma(k) / (s.tau(k) - 1) for k in (4, 5, 7)]
    assert rel[0] < rel[1] < rel[2]
    slope = A.shape_slope(figures=FIGS)
    assert rel[2] == pytest.approx(math.hypot(A.DEFAULT_SIGMA_REL, slope * math.log2(8 / 5)))
    # the published chain at K=7 of the same run lies within 2 sigma of the carried tau
    assert abs(s.tau(7) - 3.54) < 2 * s.tau_sigma(7)
    d = A.from_engine_acceptance(6.36, A.engine_setting(draft_tokens=15), "dflash", "ddtree", depth=15, sigma_rel=0.0, figures=FIGS)
    assert d.tau_sigma(15) == pytest.approx(0.0, abs=1e-12) and d.tau_sigma(128) > 0
    with pytest.raises(ValueError, match="above the 5 tokens"):
        A.from_engine_acceptance(5.5, st, figures=FIGS)
    with pytest.raises(ValueError, match="depth"):
        A.engine_setting(ddtree_budget=16)


def test_cli_forms_of_the_new_sources():
    s = A.acceptance_from_cli("workload:code@eagle3", 3, "chain", figures=FIGS)
    assert s.kind == "workload:code@eagle3"
    assert A.acceptance_from_cli("workload:any", 15, figures=FIGS).kind == "workload:any@dflash"
    e = A.acceptance_from_cli("engine:3.08@4", 7, "chain", drafter="eagle3", figures=FIGS)
    assert e.tau(4) == pytest.approx(3.08, abs=1e-6)
    b = A.acceptance_from_cli("engine:6.45@b16", 15, figures=FIGS)
    assert b.tau(16) == pytest.approx(6.45, abs=1e-6)
    for bad in ("engine:3.1", "engine:x@4", "engine:9@4", "workload:nope", "engine:3@b"):
        with pytest.raises(ValueError) as ei:
            A.acceptance_from_cli(bad, 15)
        assert "\n" not in str(ei.value)


# ----------------------------------------------------------------------------- tau's share of the interval
def test_combine_intervals_limits_and_share():
    st = A.combine_intervals(100.0, 10.0, 9.0, 11.0, 5.0, 0.0)
    assert st.tau_share == 0.0 and st.tokens_per_s == pytest.approx((100 * 10 / 11, 100 * 10 / 9))
    t = A.combine_intervals(100.0, 10.0, 10.0, 10.0, 5.0, 0.5)
    assert t.tau_share == pytest.approx(1.0)
    assert t.tokens_per_s == pytest.approx((100 * (5 - 1.645 * 0.5) / 5, 100 * (5 + 1.645 * 0.5) / 5))
    both = A.combine_intervals(100.0, 10.0, 9.0, 11.0, 5.0, 0.5)
    assert 0 < both.tau_share < 1 and both.tokens_per_s[0] < st.tokens_per_s[0]
    assert A.tau_sigma_rel(A.from_scalar_alpha(0.8, 4), 4) == pytest.approx(0.05 * (A.chain_tau(0.8, 4) - 1)
                                                                             / A.chain_tau(0.8, 4))


def test_combine_intervals_is_the_projections_interval():
    """combine_intervals on a projected point's step band and tau reproduces the point's tok/s
    interval (perfmodel.model.project combines them the same way)."""
    from perfmodel.api import projector as Projector
    from perfmodel.scenario import Request

    src = A.workload_source("dflash", None, 15, "ddtree", figures=FIGS)
    p = Projector(Request(target="b300", gpus=8, spec="ddtree", budget=16, concurrency=[1]),
                  acceptance_fn=lambda acc: src).projection().points[0]
    sp = A.combine_intervals(p.tokens_per_s_per_stream, p.step_ms, *p.interval.step_ms, p.tau, p.tau_sigma)
    assert sp.tokens_per_s == pytest.approx(tuple(p.interval.tokens_per_s_per_stream), rel=1e-9)
    assert p.tau_sigma == pytest.approx(src.tau_sigma(16))
    assert sp.tau_share > 0.5  # with no workload named, tau's spread dominates the interval at C=1
