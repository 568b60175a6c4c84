"""Acceptance models at their limits: the boundary values each law admits, tau's 1-sigma, and
the sources' plumbing, against hand-worked figures (chain: tau = 1 + sum of prod alpha)."""

import json
import math

import numpy as np
import pytest

from perfmodel.model.acceptance import (
    PRESETS,
    ParametricDraft,
    acceptance_from_cli,
    chain_tau_per_depth,
    ddtree_tau_curve,
    derive_presets,
    eagle_build,
    fit_s1_for_chain,
    from_calibration_json,
    from_scalar_alpha,
    from_table,
    parametric,
)


def test_chain_per_depth_limits():
    assert chain_tau_per_depth([1.0, 1.0]) == 3.0  # certain acceptance: every draft + the bonus
    assert chain_tau_per_depth([0.0, 1.0]) == 1.0
    assert chain_tau_per_depth([0.5, 0.5]) == pytest.approx(1 + 0.5 + 0.25)
    assert chain_tau_per_depth([]) == 1.0
    for bad in ([1.5], [-0.1], [float("nan")], [0.5, 1.01]):
        with pytest.raises(ValueError):
            chain_tau_per_depth(bad)


def test_scalar_alpha_limits():
    assert from_scalar_alpha(1.0).tau(3) == 4.0 and from_scalar_alpha(0.0).tau(3) == 1.0
    assert from_scalar_alpha(0.5, depth=2).tau(10) == pytest.approx(1.75)  # capped at the block
    with pytest.raises(ValueError):
        from_scalar_alpha(1.01)


def test_tree_inputs_validated():
    for q in (np.zeros((0, 3)), np.zeros((3, 0))):
        with pytest.raises(ValueError, match="non-empty"):
            ddtree_tau_curve(q, q, 4)
    with pytest.raises(ValueError, match="sums to"):
        ddtree_tau_curve([[0.7, 0.6]], [[0.1, 0.1]], 2)
    q = [[0.5, 0.3]]
    with pytest.raises(ValueError):
        eagle_build(q, q, 0, 1)
    with pytest.raises(ValueError):
        eagle_build(q, q, 1, 0)
    t = eagle_build([[0.6, 0.3], [0.6, 0.3]], [[0.5, 0.2], [0.5, 0.2]], 1, 2)  # top-1, depth 2: a chain
    assert list(t.depth) == [1, 2] and list(t.parent) == [-1, 0]
    assert list(t.gain) == pytest.approx([0.5, 0.25])


def test_parametric_draft_limits():
    for kw in (dict(decay=0.0), dict(a=1.01), dict(a=-0.1), dict(D=0), dict(K=0), dict(D=0, K=5), dict(s1=-1.0)):
        args = dict(s1=2.0, decay=1.0, a=1.0, D=3, K=8) | kw
        with pytest.raises(ValueError):
            ParametricDraft(**args)
    for kw in (dict(a=1.0), dict(a=0.0), dict(D=1), dict(K=1), dict(s1=0.0)):
        ParametricDraft(**(dict(s1=2.0, decay=1.0, a=1.0, D=3, K=8) | kw))
    # a = 0: the target never agrees, tau = 1; K = 1: the single rank is certain, tau = 1 + gamma
    assert ParametricDraft(2.0, 1.0, 0.0, 3, 8).chain_tau() == 1.0
    assert ParametricDraft(2.0, 1.0, 1.0, 3, 1).chain_tau() == 4.0
    assert ParametricDraft(2.0, 1.0, 1.0, 3, 1).chain_tau(0) == 1.0


def test_fit_s1_at_the_ends_of_its_bracket():
    hi = ParametricDraft(40.0, 1.0, 1.0, 15, 1024).chain_tau(15)
    assert fit_s1_for_chain(hi, 15, 1.0) == pytest.approx(40.0, abs=1e-3)  # tau is flat up there
    lo = ParametricDraft(0.0, 1.0, 1.0, 15, 1024).chain_tau(15)
    assert fit_s1_for_chain(lo, 15, 1.0) == pytest.approx(0.0, abs=1e-6)
    with pytest.raises(ValueError, match="outside"):
        fit_s1_for_chain(hi + 0.01, 15, 1.0)


def test_presets_are_what_derive_presets_gives():
    got = derive_presets()
    for name, p in PRESETS.items():
        g = got[name]
        assert (p.decay, p.a, p.D, p.K) == (pytest.approx(g.decay), g.a, g.D, g.K), name
        assert p.s1 == pytest.approx(g.s1, abs=1e-4), name


def test_tau_sigma():
    """Default 1-sigma: 5% of the speculative gain (tau - 1); 0 without speculation."""
    src = from_scalar_alpha(0.8, depth=15)
    assert src.tau_sigma(0) == 0.0
    assert src.tau_sigma(4) == pytest.approx(0.05 * (src.tau(4) - 1))
    t = from_table({16: 6.0, 17: 6.1, 64: 8.0}, sigmas={16: 0.3})  # budgets 1 apart are not duplicates
    assert t.tau_sigma(16) == pytest.approx(0.3)
    assert t.tau_sigma(64) == pytest.approx(0.05 * 7.0)  # not given: the default
    with pytest.raises(ValueError, match="duplicate"):
        from_table({"16": 6.0, 16: 6.1})
    cli = acceptance_from_cli("table:16=6.1±0.2,32=7.0±0", 15)
    assert cli.tau_sigma(16) == pytest.approx(0.2) and cli.tau_sigma(32) == 0.0
    with pytest.raises(ValueError, match="standard error"):
        acceptance_from_cli("table:16=6.1±-1", 15)


def test_calibration_file_sigma(tmp_path):
    f = tmp_path / "c.json"
    f.write_text(json.dumps({"q": [[0.6, 0.3]], "p": [[0.5, 0.2]], "tau_sigma_rel": 0.0}))
    src = from_calibration_json(f, text=f.read_text())
    assert src.tau(2) == pytest.approx(1.7) and src.tau_sigma(2) == 0.0
    f.write_text(json.dumps({"q": [[0.6, 0.3]], "p": [[0.5, 0.2]], "tau_sigma_rel": 0.2}))
    assert from_calibration_json(f, text=f.read_text()).tau_sigma(2) == pytest.approx(0.2 * 0.7)


def test_cli_forms_reach_the_same_models():
    a = acceptance_from_cli("parametric:ddtree_paper", 15)
    b = parametric("ddtree_paper", depth=15)
    assert a.tau(64) == b.tau(64) and a.tau(64) > acceptance_from_cli("auto", 15).tau(64)
    assert "top-8" in parametric("dflash_default", depth=15, structure="eagle").description
    assert math.isclose(acceptance_from_cli("0.5", 2).tau(9), 1.75)


def test_eagle_depth_one_is_the_top_k():
    t = eagle_build([[0.6, 0.3]], [[0.5, 0.2]], 2, 1)  # depth 1: the draft's top-2 tokens, best first
    assert list(t.rank) == [0, 1] and list(t.gain) == pytest.approx([0.5, 0.2])


def test_preset_sigma_against_the_published_figures():
    """A preset's 1-sigma is the RMS relative error of its (tau - 1) against the figures it was
    fitted to: DFlash chain tau 6.29 and 6.44 at block 16 (sglang PR #16818, GSM8K) and DDTree
    mean tau(64), tau(128) of 9.54 (GSM8K), 9.94 (MBPP), 10.72 (HumanEval) (DDTree paper)."""
    from perfmodel.model.acceptance import preset_sigma_rel

    for name, figures in (("dflash_default", [("chain", 6.29), ("chain", 6.44), ("ddtree", 9.54), ("ddtree", 9.94),
                                              ("ddtree", 10.72)]),
                          ("ddtree_paper", [("ddtree", 9.54), ("ddtree", 9.94), ("ddtree", 10.72)])):
        m = PRESETS[name]
        c = ddtree_tau_curve(m.q(), m.p(), 128)
        model = {"chain": m.chain_tau(15), "ddtree": (c[64] + c[128]) / 2}
        errs = [(model[s] - 1) / (pub - 1) - 1 for s, pub in figures]
        assert preset_sigma_rel(name) == pytest.approx(math.sqrt(sum(e * e for e in errs) / len(errs))), name
    assert not parametric("dflash_default", depth=15).measured and not from_scalar_alpha(0.8).measured
    assert from_table({16: 6.0}).measured


# ----------------------------------------------------------------------------- more limits (seed-31 sample)
def test_chain_alpha_above_one_or_not_finite_is_refused():
    from perfmodel.model.acceptance import chain_tau

    assert chain_tau(1.0, 4) == 5.0 and chain_tau(0.0, 4) == 1.0
    for bad in (1.5, 2.0, -0.1, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="alpha must be in"):
            chain_tau(bad, 4)


def test_rank_order_of_a_calibration_file_does_not_matter(tmp_path):
    """Ranks are the draft's order: a file listing a depth's ranks in another order describes
    the same drafts (q .6 / p .5 first, then q .3 / p .2), and gives the same tau."""
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps({"q": [[0.6, 0.3], [0.6, 0.3]], "p": [[0.5, 0.2], [0.5, 0.2]]}))
    b.write_text(json.dumps({"q": [[0.3, 0.6], [0.6, 0.3]], "p": [[0.2, 0.5], [0.5, 0.2]]}))
    fa, fb = from_calibration_json(str(a), text=a.read_text()), from_calibration_json(str(b), text=b.read_text())
    for B in (1, 2, 3, 4):
        assert fb.tau(B) == pytest.approx(fa.tau(B))
    assert fa.tau(3) == pytest.approx(1.95)  # 1 + .5 + .25 + .2 (see test_physics_projection)


def test_ddtree_ties_are_taken_in_insertion_order():
    """After the root (q .5): its sibling (q .5) and its child (q .5 x 1.0) tie; the sibling
    was pushed first, so a 2-node tree is two depth-1 nodes. Either way tau is 1 + .5 + .5."""
    from perfmodel.model.acceptance import ddtree_build

    t = ddtree_build([[0.5, 0.5], [1.0, 0.0]], [[0.5, 0.5], [1.0, 0.0]], 2)
    assert t.depth.tolist() == [1, 1] and t.rank.tolist() == [0, 1]
    assert 1 + t.gain.sum() == pytest.approx(2.0)


def test_parametric_draft_is_calibrated_by_default():
    """a = 1 unless given: the target accepts each draft rank with the draft's own probability."""
    m = ParametricDraft(1.2, 0.9, D=3, K=8)
    assert m.a == 1.0
    np.testing.assert_allclose(m.p(), m.q())
    np.testing.assert_allclose(ParametricDraft(1.2, 0.9, 0.5, 3, 8).p(), 0.5 * m.q())


def test_no_speculation_has_no_tau_uncertainty():
    src = from_table({16: 6.0, 32: 7.0}, sigmas={16: 0.3, 32: 0.4})
    assert src.tau_sigma(0) == 0.0 and src.tau_sigma(16) == pytest.approx(0.3)


def test_chain_from_a_file_uses_the_first_b_depths(tmp_path):
    """Chain structure from q/p: the top-1 acceptances .5, .4, .2 by depth: tau(1) = 1.5,
    tau(2) = 1 + .5 + .2 = 1.7, tau(B >= 3) = 1.7 + .5 x .4 x .2 = 1.74; the file's tau is
    measured."""
    f = tmp_path / "c.json"
    f.write_text(json.dumps({"q": [[0.9], [0.9], [0.9]], "p": [[0.5], [0.4], [0.2]]}))
    src = from_calibration_json(str(f), structure="chain", text=f.read_text())
    assert (src.tau(1), src.tau(2), src.tau(3), src.tau(10)) == pytest.approx((1.5, 1.7, 1.74, 1.74))
    assert src.measured is True and src.kind == "calibration-file"
    assert "D=3, K=1" in src.description


def test_scalar_alpha_says_its_depth_cap():
    assert "gamma = min(B, 15)" in from_scalar_alpha(0.8, depth=15).description
    assert from_scalar_alpha(0.8).description.endswith("gamma = B)")
    assert from_scalar_alpha(0.8, depth=3).tau(10) == pytest.approx(1 + 0.8 + 0.64 + 0.512)


def test_a_table_entry_with_a_second_colon_is_refused():
    with pytest.raises(ValueError, match="bad table entry"):
        acceptance_from_cli("table:16=6.1:7", 15)


def test_ddtree_equal_scores_pop_first_in_first_out():
    """q = p = [.5, .25, .25] at both depths (powers of two: the log sums tie exactly). By hand,
    with each pop pushing its sibling, then its first child, and ties taken in push order:
      pop d1r0 (.5)            push d1r1 (.25, #1), d2r0<-0 (.25, #2)
      pop d1r1 (#1)            push d1r2 (.25, #3), d2r0<-1 (.125, #4)
      pop d2r0<-0 (#2)         push d2r1<-0 (.125, #5)  (depth 2 is the last: no child)
      pop d1r2 (#3)            push d2r0<-3 (.125, #6)  (rank 2 is the last: no sibling)
      pop d2r0<-1 (#4), then d2r1<-0 (#5): six nodes.
    tau(6) = 1 + .5 + .25 + .25 + .25 + .125 + .125 = 2.5."""
    from perfmodel.model.acceptance import ddtree_build

    q = [[0.5, 0.25, 0.25], [0.5, 0.25, 0.25]]
    t = ddtree_build(q, q, 6)
    assert t.depth.tolist() == [1, 1, 2, 1, 2, 2]
    assert t.rank.tolist() == [0, 1, 0, 2, 0, 1]
    assert t.parent.tolist() == [-1, -1, 0, -1, 1, 0]
    assert ddtree_tau_curve(q, q, 6)[6] == pytest.approx(2.5)


def test_derived_presets_reproduce_their_published_figures():
    """derive_presets' unrounded output hits the figures it is fitted to: the DFlash chain of 15
    drafts gives tau 6.36 (sglang PR #16818), the DDTree paper preset mean(tau(64), tau(128)) =
    10.13 (DDTree paper), both to the bisection's precision."""
    from perfmodel.model.acceptance import DDTREE_PAPER_TAU, DFLASH_CHAIN_TAU

    got = derive_presets()
    assert got["dflash_default"].chain_tau(15) == pytest.approx(DFLASH_CHAIN_TAU, abs=1e-10)
    c = ddtree_tau_curve(got["ddtree_paper"].q(), got["ddtree_paper"].p(), 128)
    assert (c[64] + c[128]) / 2 == pytest.approx(DDTREE_PAPER_TAU, abs=1e-10)
    # a custom draft with a preset's s1 and decay is that preset: the defaults are its a = 1, D = 15, K = 1024
    m = PRESETS["dflash_default"]
    assert parametric({"s1": m.s1, "decay": m.decay}).tau(64) == parametric("dflash_default").tau(64)


def test_acceptance_limits_at_one_and_zero_draft_nodes():
    """Budget 0: no speculation, tau = 1 exactly and no uncertainty; budget 1: one draft node,
    whose acceptance is already uncertain (5% of tau - 1 = 5% of alpha). A table may start at
    one node. No drafts leave only tau = 1 to fit."""
    from perfmodel.model.acceptance import ddtree_build

    q = [[0.6, 0.3], [0.5, 0.2]]
    assert len(ddtree_build(q, q, 0)) == 0 and ddtree_tau_curve(q, q, 0).tolist() == [1.0]
    src = from_scalar_alpha(0.8)
    assert src.tau_sigma(1) == pytest.approx(0.05 * 0.8)
    t = from_table({1: 1.8, 4: 3.0})
    assert t.tau(1) == 1.8 and t.tau(2) == pytest.approx(2.4)  # halfway in log2(B)
    assert fit_s1_for_chain(1.0, 0, 1.0) == pytest.approx(0.0, abs=1e-9)  # tau(0 drafts) = 1 for every s1
    with pytest.raises(ValueError, match="outside"):
        fit_s1_for_chain(1.5, 0, 1.0)


def test_eagle_tree_is_no_deeper_than_the_draft():
    """An EAGLE tree asked for depth 5 from a 2-deep draft stops at depth 2: top-1 at both
    depths, a chain of two nodes with gains .5 and .5 x .4."""
    t = eagle_build([[0.6, 0.3, 0.1], [0.5, 0.3, 0.2]], [[0.5, 0.2, 0.1], [0.4, 0.3, 0.1]], 1, 5)
    assert t.depth.tolist() == [1, 2] and t.gain.tolist() == pytest.approx([0.5, 0.2])


def test_bad_probabilities_and_empty_specs_are_named():
    """A draft probability above 1 is refused as such (not only as a row summing past 1); an
    empty or missing acceptance spec says it is empty."""
    from perfmodel.model.acceptance import ddtree_build

    with pytest.raises(ValueError, match=r"every q\[d\]\[r\] must be a finite probability"):
        ddtree_build([[1.5]], [[0.5]], 1)
    with pytest.raises(ValueError, match=r"every p\[d\]\[r\] must be a finite probability"):
        ddtree_build([[0.5]], [[1.5]], 1)
    for bad in ("", "   ", None):
        with pytest.raises(ValueError, match="empty acceptance spec"):
            acceptance_from_cli(bad, 15)
