"""EAGLE trees as SGLang runs them (topk > 1): each draft step after the first runs topk tokens per
sequence through the drafter, the tree is reranked to the verify's nodes and its mask built, then
one verify of the kept nodes + 1 tokens. Checked against the shapes: the draft grows with
topk x steps, the verify runs --budget + 1 tokens, the tree's build grows with context x width."""

import pytest

import perfmodel
from perfmodel.api import resolve
from perfmodel.model.layers import Layout
from perfmodel.model.machine import build_machine
from perfmodel.model.step import chain_draft_ops, eagle_tree_ops, step_estimate
from perfmodel.scenario import Request
from perfmodel.specs.schema import tree_candidates

SGLANG_4716 = dict(target="h100-sxm", gpus=8, model="llama-3.1-70b", spec="chain", drafter="eagle3", draft_tokens=8,
                   draft_topk=8, budget=63, acceptance_length=5.88, concurrency=[1], context=1200)


@pytest.fixture(scope="module")
def h100():
    rs = resolve(Request(target="h100-sxm", gpus=1, model="llama-3.1-8b", concurrency=[1], context=1200))
    mach = build_machine(rs.gpu, 1, rs.link, rs.profile, rs.source_gpu, rs.mk, 1.0, True, "perfmodel")
    return rs.model.with_drafter("eagle3"), mach


def _with_topk(m, topk: int, steps: int):
    return m.model_copy(update={"drafter": m.drafter.model_copy(update={"topk": topk, "num_speculative_tokens": steps})})


def test_draft_forwards_run_topk_tokens_after_the_first(h100):
    m, _ = h100
    lay = Layout("tp", 1)
    for topk, steps in ((1, 4), (4, 4), (8, 3)):
        ops, _ = chain_draft_ops(_with_topk(m, topk, steps), lay, 2, 1200, steps, topk)
        d = m.drafter

        def rows(name, k, n):
            return sum(op.flops * op.count for op in ops if op.name == name) / (2 * k * n)

        # the head's o_proj: once over the k + 1 verified tokens, then once per later step over topk tokens
        assert rows("o_proj", d.n_heads * d.head_dim, d.hidden_size) == pytest.approx(2 * (steps + 1) + 2 * topk * (steps - 1))
        # logits: 1 row per sequence first, then topk rows per sequence in each later step
        assert rows("lm_head", d.hidden_size, d.draft_vocab_size) == pytest.approx(2 + 2 * topk * (steps - 1))


def test_draft_cost_grows_with_topk_and_steps(h100):
    m, mach = h100
    lay = Layout("tp", 1)

    def draft_ms(topk, steps, C=8):
        mt = _with_topk(m, topk, steps)
        return step_estimate(mt, mach, lay, C, 16, 1200, draft=True).breakdown_us["draft"] / 1e3

    by_topk = [draft_ms(t, 6) for t in (2, 4, 8, 16)]  # topk 1 is a chain: its k is the verify width - 1
    by_steps = [draft_ms(4, s) for s in (2, 3, 5, 8)]
    assert all(b > a for a, b in zip(by_topk, by_topk[1:])), by_topk
    assert all(b > a for a, b in zip(by_steps, by_steps[1:])), by_steps


def test_verify_runs_the_kept_nodes_plus_one(h100):
    m, mach = h100
    lay = Layout("tp", 1)
    mt = _with_topk(m, 4, 5)
    widths = [step_estimate(mt, mach, lay, 4, b + 1, 1200, draft=True) for b in (7, 15, 31)]
    # the same draft (5 steps of topk 4) for every width: only the verify and the tree's mask grow
    drafts = [e.breakdown_us["draft"] for e in widths]
    assert drafts == pytest.approx([drafts[0]] * 3)
    assert widths[0].step_us < widths[1].step_us < widths[2].step_us
    # projected: --budget 63 is SGLang's 64 draft tokens, the verify of 64 tokens per sequence
    rs = resolve(Request(**SGLANG_4716))
    one = perfmodel.project(Request(**SGLANG_4716)).points[0]
    assert one.budget == 63 and one.tau == pytest.approx(5.88)
    est = step_estimate(rs.model, perfmodel.projector(rs).machine, Layout("tp", 8), 1, 64, 1200, draft=True)
    assert one.step_ms == pytest.approx(est.step_us / 1e3)


def test_tree_build_grows_with_context_and_width_and_is_absent_from_a_chain(h100):
    m, mach = h100
    lay = Layout("tp", 1)
    chain = step_estimate(_with_topk(m, 1, 4), mach, lay, 4, 5, 1200, draft=True)
    assert "tree_build" not in chain.breakdown_us
    mt = _with_topk(m, 4, 4)
    tb = {(L, w): step_estimate(mt, mach, lay, 4, w, L, draft=True).breakdown_us["tree_build"]
          for L in (1024, 65536) for w in (8, 32)}
    assert tb[(65536, 8)] > tb[(1024, 8)] and tb[(1024, 32)] > tb[(1024, 8)] and tb[(65536, 32)] > tb[(65536, 8)]
    # the mask: one byte per draft token per key, L x W + W^2 per sequence, over 4 sequences
    mask = [op for op in eagle_tree_ops(mt, lay, 4, 65536, 4, 4, 32) if op.name == "eagle_tree_mask_fill"][0]
    assert mask.bytes == pytest.approx(4 * (65536 * 32 + 32 * 32), rel=1e-3)


def test_tree_candidates_bound_the_budget():
    assert tree_candidates(8, 8) == 8 + 7 * 64
    assert tree_candidates(1, 5) == 5  # a chain scores its k drafts
    r = dict(SGLANG_4716, budget=tree_candidates(8, 8))
    assert perfmodel.project(Request(**r)).points[0].budget == tree_candidates(8, 8)
    with pytest.raises(perfmodel.ProjectionError, match="scores 456 draft nodes"):
        perfmodel.project(Request(**dict(r, budget=457)))


def test_acceptance_length_is_read_at_the_tree_it_was_measured_at():
    # given at the request's own tree, tau is that length; measured at 63 nodes and carried to a
    # tree of 15 nodes (same topk and depth), fewer nodes accept fewer tokens, more than a chain's one
    at_tree = perfmodel.project(Request(**SGLANG_4716)).points[0].tau
    smaller = perfmodel.project(Request(**dict(SGLANG_4716, budget=15, acceptance_at=63))).points[0].tau
    assert at_tree == pytest.approx(5.88)
    assert 2.0 < smaller < 5.88


def test_step_prices_a_tree_verify_with_its_draft():
    # `perfmodel step --verify NxW`: the tree's kept nodes are W - 1, its steps --draft-tokens
    kw = dict(target="h100-sxm", gpus=8, model="llama-3.1-70b", spec="chain", drafter="eagle3", draft_tokens=5)
    tree = perfmodel.step(Request(**kw, draft_topk=4), verify=["4x8@2000"])
    chain = perfmodel.step(Request(**kw), verify=["4x6@2000"])
    assert tree.breakdown_ms["tree_build"] > 0 and "tree_build" not in chain.breakdown_ms
    assert tree.breakdown_ms["draft"] > chain.breakdown_ms["draft"]  # 4 tokens a step after the first, not 1
