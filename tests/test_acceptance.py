"""Tests for perfmodel.model.acceptance (fast, numpy only)."""

import itertools
import json
import math
import subprocess
import sys

import numpy as np
import pytest

from perfmodel.model import acceptance as acc
from perfmodel.model.acceptance import (
    PRESETS,
    AcceptanceSource,
    ParametricDraft,
    acceptance_from_cli,
    chain_tau,
    chain_tau_per_depth,
    ddtree_build,
    ddtree_tau_curve,
    derive_presets,
    eagle_build,
    eagle_tau_curve,
    from_calibration_json,
    from_scalar_alpha,
    from_table,
    parametric,
)


# ----------------------------------------------------------------------------- helpers
def random_qp(rng, D, V, calibrated=False, trunc=1.0):
    """Random sorted draft rows q (continuous -> no score ties) and agreement p (rows <= 1)."""
    q = rng.dirichlet(np.ones(V + 1), size=D)[:, :V] * trunc  # leave some mass outside the top-V
    q = -np.sort(-q, axis=1)
    if calibrated:
        p = q.copy()
    else:
        p = rng.dirichlet(np.ones(V + 1), size=D)[:, :V]  # unrelated to q, rows sum < 1
    return q, p


def brute_force_tau(q, p, B):
    """Enumerate every rank path up to depth D, take the exact top-B by draft score."""
    D, V = q.shape
    paths = []
    for d in range(1, D + 1):
        for ranks in itertools.product(range(V), repeat=d):
            score = sum(math.log(q[i, r]) for i, r in enumerate(ranks))
            gain = math.prod(p[i, r] for i, r in enumerate(ranks))
            paths.append((score, ranks, gain))
    paths.sort(key=lambda x: -x[0])
    top = paths[:B]
    chosen = {r for _, r, _ in top}
    for _, r, _ in top:  # top-B by score is ancestor-closed
        assert r[:-1] in chosen or len(r) == 1
    return 1.0 + sum(g for _, _, g in top)


def children_map(tree):
    ch = {-1: []}
    for i in range(len(tree)):
        ch.setdefault(int(tree.parent[i]), []).append(i)
        ch.setdefault(i, [])
    return ch


def exact_walk_tau(tree, p):
    """Exact expectation of the follow_verified_tree walk over target outcomes.

    At a node at depth d the target token at depth d+1 equals the draft's rank-r token with
    prob p[d, r] (else something not drafted); the walk moves to the child with that rank if
    the tree has one, otherwise stops. tau = 1 (bonus) + number of accepted nodes."""
    ch = children_map(tree)

    def E(v):
        tot = 0.0
        for c in ch[v]:
            tot += p[tree.depth[c] - 1, tree.rank[c]] * (1.0 + E(c))
        return tot

    return 1.0 + E(-1)


def mc_walk_tau(tree, p, n, rng):
    ch = children_map(tree)
    by_rank = {v: {int(tree.rank[c]): c for c in cs} for v, cs in ch.items()}
    D, K = p.shape
    probs = np.concatenate([p, 1.0 - p.sum(axis=1, keepdims=True)], axis=1)  # last = "other"
    total = 0
    for _ in range(n):
        v, d, acc_n = -1, 0, 1
        while d < D:
            t = rng.choice(K + 1, p=probs[d])
            nxt = by_rank[v].get(int(t))
            if nxt is None:
                break
            v, d, acc_n = nxt, d + 1, acc_n + 1
        total += acc_n
    return total / n


# ----------------------------------------------------------------------------- chain
@pytest.mark.parametrize("alpha", [0.0, 0.3, 0.855, 1.0])
@pytest.mark.parametrize("gamma", [0, 1, 4, 9])
def test_chain_formula_vs_enumeration(alpha, gamma):
    exp = 0.0
    for outcome in itertools.product([0, 1], repeat=gamma):
        pr = math.prod(alpha if o else 1 - alpha for o in outcome)
        lead = next((i for i, o in enumerate(outcome) if not o), gamma)
        exp += pr * (1 + lead)
    assert chain_tau(alpha, gamma) == pytest.approx(exp, abs=1e-12)
    assert chain_tau_per_depth([alpha] * gamma) == pytest.approx(exp, abs=1e-12)


def test_chain_per_depth_vs_enumeration():
    alphas = [0.9, 0.7, 0.95, 0.4, 0.6]
    exp = 0.0
    for outcome in itertools.product([0, 1], repeat=len(alphas)):
        pr = math.prod(a if o else 1 - a for a, o in zip(alphas, outcome))
        lead = next((i for i, o in enumerate(outcome) if not o), len(alphas))
        exp += pr * (1 + lead)
    assert chain_tau_per_depth(alphas) == pytest.approx(exp, abs=1e-12)


# ----------------------------------------------------------------------------- DDTree
@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("D,V", [(1, 4), (2, 3), (3, 4), (4, 2), (4, 3)])
def test_ddtree_equals_brute_force(seed, D, V):
    rng = np.random.default_rng(1000 * seed + 10 * D + V)
    q, p = random_qp(rng, D, V, calibrated=bool(seed % 2))
    total = sum(V**d for d in range(1, D + 1))
    bmax = total + 3
    curve = ddtree_tau_curve(q, p, bmax)
    assert curve.shape == (bmax + 1,) and curve[0] == 1.0
    for B in range(0, bmax + 1):
        assert curve[B] == pytest.approx(brute_force_tau(q, p, B), abs=1e-12), B
    # truncated K = min(max_budget, V) must not change small budgets
    for bm in range(1, V + 1):
        np.testing.assert_allclose(ddtree_tau_curve(q, p, bm), curve[: bm + 1], atol=1e-12)


@pytest.mark.parametrize("seed", range(5))
def test_ddtree_verify_walk_exact_and_mc(seed):
    rng = np.random.default_rng(seed)
    q, p = random_qp(rng, 4, 4, calibrated=seed % 2 == 0)
    curve = ddtree_tau_curve(q, p, 60)
    for B in (1, 3, 7, 15, 30, 60):
        t = ddtree_build(q, p, B)
        assert len(t) == B
        assert exact_walk_tau(t, p) == pytest.approx(curve[B], abs=1e-12)
    # Monte-Carlo walk on the B=15 tree, fixed seed, 5 sigma tolerance
    t = ddtree_build(q, p, 15)
    n = 4000
    mc = mc_walk_tau(t, p, n, np.random.default_rng(123 + seed))
    assert abs(mc - curve[15]) < 5 * 2.0 / math.sqrt(n)  # tau in [1, 5] -> sd <= 2


def test_ddtree_tree_structure_ancestor_closed_and_sorted():
    m = PRESETS["dflash_default"]
    t = ddtree_build(m.q(), m.p(), 256)
    assert np.all(np.diff(t.logw) <= 1e-12)  # best-first pop order
    for i in range(len(t)):
        par = t.parent[i]
        assert par < i
        assert (par == -1 and t.depth[i] == 1) or t.depth[par] == t.depth[i] - 1


def test_ddtree_degenerates_to_chain_when_k1():
    rng = np.random.default_rng(7)
    D = 15
    q = np.ones((D, 1))
    p = rng.uniform(0.3, 0.99, size=(D, 1))
    curve = ddtree_tau_curve(q, p, 20)
    for B in range(0, D + 1):
        assert curve[B] == pytest.approx(chain_tau_per_depth(p[:B, 0]), abs=1e-12)
    assert curve[20] == curve[D]  # exhausted: flat
    # i.i.d. case equals Leviathan's closed form
    c2 = ddtree_tau_curve(np.ones((D, 1)), np.full((D, 1), 0.855), D)
    assert c2[D] == pytest.approx(chain_tau(0.855, D), abs=1e-12)
    # K = 1 truncation of a wide q also gives the chain: max_budget=1 takes only rank 0
    m = PRESETS["dflash_default"]
    assert ddtree_tau_curve(m.q(), m.p(), 1)[1] == pytest.approx(1 + m.p()[0, 0])


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_tree_ge_chain_at_equal_node_count(name):
    m = PRESETS[name]
    curve = ddtree_tau_curve(m.q(), m.p(), 64)
    alphas = m.p()[:, 0]
    for B in range(1, 65):
        assert curve[B] >= chain_tau_per_depth(alphas[: min(B, m.D)]) - 1e-12
    rng = np.random.default_rng(3)
    for _ in range(5):  # calibrated random drafts (p = q): the top-B set is optimal
        q, p = random_qp(rng, 6, 5, calibrated=True)
        c = ddtree_tau_curve(q, p, 6)
        for B in range(1, 7):
            assert c[B] >= chain_tau_per_depth(p[:B, 0]) - 1e-12


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_preset_curves_monotone_concave(name):
    m = PRESETS[name]
    c = ddtree_tau_curve(m.q(), m.p(), 512)
    g = np.diff(c)
    assert np.all(g >= 0)
    assert np.all(np.diff(g) <= 1e-12)  # a = 1: gains = exp(score), popped best-first


def test_miscalibrated_curve_concave_ish():
    m = ParametricDraft(s1=3.0, decay=0.9, a=0.8, D=15, K=256)
    c = ddtree_tau_curve(m.q(), m.p(), 512)
    assert np.all(np.diff(c) >= 0)
    inc = [c[2 * b] - c[b] for b in (4, 8, 16, 32, 64, 128, 256)]
    per_node = [x / b for x, b in zip(inc, (4, 8, 16, 32, 64, 128, 256))]
    assert all(a >= b for a, b in zip(per_node, per_node[1:]))


# ----------------------------------------------------------------------------- EAGLE
def eagle_reference(q, p, topk, depth):
    """Plain-Python EAGLE-2 pool: list of (logw, gain, path)."""
    k = min(topk, q.shape[1])
    pool = [(math.log(q[0, r]), p[0, r], (r,)) for r in range(k)]
    frontier = list(pool)
    for d in range(1, min(depth, q.shape[0])):
        cand = [(lw + math.log(q[d, r]), g * p[d, r], path + (r,)) for lw, g, path in frontier for r in range(k)]
        pool += cand
        frontier = sorted(cand, key=lambda x: -x[0])[:k]
    return sorted(pool, key=lambda x: -x[0])


@pytest.mark.parametrize("seed", range(4))
def test_eagle_vs_reference_and_walk(seed):
    rng = np.random.default_rng(50 + seed)
    q, p = random_qp(rng, 4, 5)
    topk, depth = 3, 4
    ref = eagle_reference(q, p, topk, depth)
    n = len(ref)
    assert n == 3 + 3 * 9
    curve = eagle_tau_curve(q, p, topk, depth, n + 2)
    for N in range(n + 3):
        assert curve[N] == pytest.approx(1 + sum(g for _, g, _ in ref[:N]), abs=1e-12)
    t = eagle_build(q, p, topk, depth)
    assert exact_walk_tau(t, p) == pytest.approx(curve[n], abs=1e-12)
    for i in range(len(t)):
        assert t.parent[i] < i and (t.parent[i] == -1) == (t.depth[i] == 1)


def test_eagle_le_ddtree_when_calibrated():
    m = PRESETS["dflash_default"]
    e = eagle_tau_curve(m.q(), m.p(), 8, 15, 128)
    d = ddtree_tau_curve(m.q(), m.p(), 128)
    assert np.all(e <= d + 1e-12)
    assert e[60] > chain_tau_per_depth(m.p()[:15, 0])


# ----------------------------------------------------------------------------- presets
def test_presets_rederived():
    derived = derive_presets()
    assert set(derived) == set(PRESETS)
    for name, m in PRESETS.items():
        d = derived[name]
        assert (d.decay, d.a, d.D, d.K) == (m.decay, m.a, m.D, m.K)
        assert d.s1 == pytest.approx(m.s1, abs=1e-4)
    m = PRESETS["dflash_default"]
    assert 6.29 <= m.chain_tau(15) <= 6.44
    c = ddtree_tau_curve(m.q(), m.p(), 128)
    assert 8.0 < c[64] < c[128] < 10.72  # what the family gives; under the DDTree paper numbers
    t = PRESETS["ddtree_paper"]
    c = ddtree_tau_curve(t.q(), t.p(), 128)
    assert 0.5 * (c[64] + c[128]) == pytest.approx(acc.DDTREE_PAPER_TAU, abs=1e-3)
    assert 9.3 < c[64] < c[128] < 11.0


def test_parametric_arrays():
    m = ParametricDraft(s1=2.0, decay=0.9, a=0.7, D=4, K=10)
    q, p = m.q(), m.p()
    assert q.shape == (4, 10)
    np.testing.assert_allclose(q.sum(axis=1), 1.0)
    assert np.all(np.diff(q, axis=1) <= 0)
    np.testing.assert_allclose(p, 0.7 * q)
    np.testing.assert_allclose(q[1, 0] / q[1, 1], 2 ** (2.0 * 0.9))
    with pytest.raises(ValueError):
        ParametricDraft(s1=2.0, decay=0.9, a=1.5)


# ----------------------------------------------------------------------------- sources / CLI
def test_cli_sources():
    s = acceptance_from_cli("auto", 15)
    assert isinstance(s, AcceptanceSource) and s.kind == "parametric:dflash_default"
    assert "s1=" in s.description and "\n" not in s.description
    assert s.tau(0) == 1.0
    c = ddtree_tau_curve(PRESETS["dflash_default"].q(), PRESETS["dflash_default"].p(), 600)
    assert s.tau(64) == pytest.approx(c[64]) and s.tau(600) == pytest.approx(c[600])
    assert acceptance_from_cli("ddtree_paper", 15).kind == "parametric:ddtree_paper"
    assert acceptance_from_cli("parametric:dflash_default", 7).max_depth == 7
    ch = acceptance_from_cli("auto", 15, structure="chain")
    assert ch.tau(15) == pytest.approx(PRESETS["dflash_default"].chain_tau(15))
    assert ch.tau(40) == ch.tau(15)
    sc = acceptance_from_cli("0.8", 15)
    assert sc.kind == "scalar" and sc.tau(15) == pytest.approx(chain_tau(0.8, 15))
    assert sc.tau(100) == sc.tau(15)
    tb = acceptance_from_cli("table:16=6.1,32=7.0,64=7.8", 15)
    assert tb.kind == "measured-table"
    assert tb.tau(16) == pytest.approx(6.1) and tb.tau(64) == pytest.approx(7.8)
    assert tb.tau(8) == pytest.approx(6.1) and tb.tau(1000) == pytest.approx(7.8)
    assert tb.tau(math.sqrt(16 * 32)) == pytest.approx(6.55)
    assert tb.tau(48) == pytest.approx(7.0 + 0.8 * math.log2(1.5))
    e = parametric("dflash_default", structure="eagle")
    assert e.tau(32) <= acceptance_from_cli("auto", 15).tau(32) + 1e-12


def test_calibration_file_roundtrip(tmp_path):
    m = ParametricDraft(s1=2.5, decay=0.95, a=0.9, D=5, K=16)
    f = tmp_path / "cal.json"
    f.write_text(json.dumps({"q": m.q().tolist(), "p": m.p().tolist(), "description": "test cal"}))
    s = acceptance_from_cli(f"file:{f}", 5, read_file=lambda path: open(path).read())  # the edge reads the file
    assert s.kind == "calibration-file" and "test cal" in s.description
    c = ddtree_tau_curve(m.q(), m.p(), 40)
    assert s.tau(40) == pytest.approx(c[40])
    assert from_calibration_json(f, structure="chain", text=f.read_text()).tau(5) == pytest.approx(m.chain_tau(5))


def _one_line_error(fn, *args, **kw):
    with pytest.raises(ValueError) as ei:
        fn(*args, **kw)
    msg = str(ei.value)
    assert msg and "\n" not in msg
    return msg


@pytest.mark.parametrize(
    "content",
    [
        "not json {",
        json.dumps([1, 2]),
        json.dumps({"q": [[0.5, 0.2]]}),
        json.dumps({"q": [[0.5, 0.2], [0.3]], "p": [[0.5, 0.2], [0.3]]}),
        json.dumps({"q": [[0.5, 0.2]], "p": [[0.5, 0.2], [0.1, 0.1]]}),
        json.dumps({"q": [[0.5, 0.2]], "p": [[1.5, 0.2]]}),
        json.dumps({"q": [[0.8, 0.7]], "p": [[0.5, 0.2]]}),
        json.dumps({"q": [["a", 0.2]], "p": [[0.5, 0.2]]}),
        json.dumps({"q": [], "p": []}),
    ],
)
def test_calibration_file_errors(tmp_path, content):
    f = tmp_path / "bad.json"
    f.write_text(content)
    _one_line_error(from_calibration_json, f)


def test_loader_errors_one_line(tmp_path):
    _one_line_error(from_calibration_json, tmp_path / "missing.json")
    _one_line_error(from_table, {16: 6.1, 32: 5.0})
    _one_line_error(from_table, {})
    _one_line_error(from_table, {0: 1.0})
    _one_line_error(from_table, {16: 0.5})
    _one_line_error(from_table, {"x": 1.0})
    _one_line_error(from_scalar_alpha, 1.5)
    _one_line_error(from_scalar_alpha, "abc")
    _one_line_error(parametric, "nope")
    for spec in ["", "bogus", "table:16", "table:16=a", "table:", "table:16=6,16=7", "file:",
                 "1.2", "-0.1", "parametric:nope", "table:32=7,16=8"]:
        _one_line_error(acceptance_from_cli, spec, 15)
    _one_line_error(ddtree_tau_curve, np.ones((2, 2)), np.ones((2, 3)), 4)
    _one_line_error(acceptance_from_cli("auto", 15).tau, -1)


def test_import_is_light():
    code = ("import sys, time; t=time.time(); import perfmodel.model.acceptance as a; "
            "a.acceptance_from_cli('auto', 15).tau(64); dt=time.time()-t; "
            "bad=[m for m in ('torch','scipy','matplotlib','triton') if m in sys.modules]; "
            "print(dt, bad); assert not bad and dt < 1.0, (dt, bad)")
    subprocess.run([sys.executable, "-c", code], check=True)
