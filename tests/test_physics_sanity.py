"""The physical checks of sanity.py against hand-worked figures and their limits.

The bandwidth floor of a decode step: Llama 3.1 8B's KV cache is 128 KiB a token (32 layers x
8 KV heads x 128 x 2 (K, V) x 2 B; Llama 3 Herd of Models, arXiv 2407.21783, Table 3), so on an
H200 (4,800 GB/s datasheet) each token of context adds 131072 / 4.8e9 s = 0.0273067 us to the
floor of one sequence, and C sequences add C times that; the weights it streams are its
8,030,261,248 parameters (the model page's count) less the 65 RMSNorm vectors of 4096 the
model leaves out and the 128256 x 4096 embedding table (one row is read), at 2 B each.
"""

import re

import pytest
from test_physics_step import tiny_model

from perfmodel.api import projector
from perfmodel.model import sanity
from perfmodel.model.layers import Layout
from perfmodel.request import ProjectionError
from perfmodel.scenario import Request
from perfmodel.specs import registry
from perfmodel.specs.schema import DrafterSpec

KV_8B = 32 * 8 * 128 * 2 * 2  # bytes a token
H200_BW = 4800.0  # GB/s


def test_observed_floor_scales_with_context_and_concurrency():
    m, g = registry.load_model("llama-3.1-8b"), registry.load_gpu("h200")

    def floor(C, L):
        return sanity.observed_floor_us(m, g, Layout("tp", 1), C, L)

    per_token_us = KV_8B / (H200_BW * 1e3)
    assert floor(1, 2048) - floor(1, 1024) == pytest.approx(1024 * per_token_us, rel=1e-9)
    assert floor(4, 2048) - floor(4, 1024) == pytest.approx(4 * 1024 * per_token_us, rel=1e-9)
    weights = (8_030_261_248 - 65 * 4096 - 128256 * 4096) * 2
    assert weights / (H200_BW * 1e3) < floor(1, 1) < 1.001 * weights / (H200_BW * 1e3)
    # TP2 halves every GPU's weight shard and KV heads: about half the floor (replicated norms aside)
    assert floor(1, 1024) / 2 < sanity.observed_floor_us(m, g, Layout("tp", 2), 1, 1024) < 0.51 * floor(1, 1024)


def _tiny_drafted(heads=6):
    """The tiny model with a 2-layer drafter of `heads` query heads, block size 4 (depth 3)."""
    return tiny_model(drafter=DrafterSpec(name="tiny-draft", source="hand-written test drafter", n_layers=2,
                                          hidden_size=64, n_heads=heads, n_kv_heads=2, head_dim=32,
                                          intermediate_size=128, block_size=4))


@pytest.mark.parametrize("spec, budget, q, tau_max", [
    ("none", None, 1, 1),  # one token a step
    ("chain", None, 4, 4),  # the chain verifies a block of 4 and yields at most 4
    ("ddtree", 8, 9, 4),  # 9 verify tokens, but at most the block's 4 along one path
    ("ddtree", 2, 3, 3),  # a 2-node tree: at most B + 1 = 3
    ("ddtree", 1, 2, 2),  # a 1-node tree: at most 2
])
def test_observed_faster_than_physics_is_refused(spec, budget, q, tau_max):
    """tok/s per stream is at most tau_max / (bytes of a q-token step / peak bandwidth): just
    below that bound is accepted, just above it is refused, naming the bound."""
    m, g = _tiny_drafted(), registry.load_gpu("h200")
    floor = sanity.observed_floor_us(m, g, Layout("tp", 1), 1, 100, q)
    limit = tau_max * 1e6 / floor
    o = dict(gpus=1, concurrency=1, parallel="tp", tokens_per_s=0.0, spec=spec, budget=budget)
    sanity.check_observed("obs", dict(o, tokens_per_s=limit * (1 - 1e-6)), m, g, 100)
    with pytest.raises(ProjectionError, match="faster than physics allows"):
        sanity.check_observed("obs", dict(o, tokens_per_s=limit * (1 + 1e-6)), m, g, 100)


def test_observed_q_grows_the_floor():
    """More verify tokens read more activations and logits: the floor grows with q."""
    m, g = _tiny_drafted(), registry.load_gpu("h200")
    f = [sanity.observed_floor_us(m, g, Layout("tp", 1), 1, 100, q) for q in (1, 3, 4, 9, 10)]
    assert f == sorted(f) and len(set(f)) == 5


def test_observed_guards():
    m, g = _tiny_drafted(), registry.load_gpu("h200")
    o = dict(gpus=1, concurrency=1, parallel="tp", spec="none", budget=None)
    sanity.check_observed("obs", dict(o, tokens_per_s=0.5), m, g, 100)  # slow but possible
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ProjectionError, match="positive number"):
            sanity.check_observed("obs", dict(o, tokens_per_s=bad), m, g, 100)
    sanity.check_observed("obs", dict(o, tokens_per_s=1e-3), m, g, 10_000_000)
    with pytest.raises(ProjectionError, match="ctx 10000001 must be between 1 and 10000000"):
        sanity.check_observed("obs", dict(o, tokens_per_s=1.0), m, g, 10_000_001)
    # a model without a drafter, not speculating: one token a step
    llama = registry.load_model("llama-3.1-8b")
    floor = sanity.observed_floor_us(llama, g, Layout("tp", 1), 1, 100)
    sanity.check_observed("obs", dict(o, tokens_per_s=1e6 / floor * (1 - 1e-6)), llama, g, 100)
    with pytest.raises(ProjectionError, match="faster than physics"):
        sanity.check_observed("obs", dict(o, tokens_per_s=1e6 / floor * (1 + 1e-6)), llama, g, 100)
    with pytest.raises(ProjectionError, match="≥ 1"):
        sanity.check_observed("obs", dict(o, tokens_per_s=1.0, concurrency=0), m, g, 100)
    # the observed layout's heads must split; the drafter's heads are not the observed figure's concern
    sanity.check_observed("obs", dict(o, tokens_per_s=1.0, gpus=4), m, g, 100)  # 4 heads / 4, drafter 6 / 4
    with pytest.raises(ProjectionError, match="4 attention heads"):
        sanity.check_observed("obs", dict(o, tokens_per_s=1.0, gpus=3), m, g, 100)


def test_layout_problem_and_divisors():
    m = registry.load_model("llama-3.1-8b")  # 32 heads, 8 KV heads
    assert sanity.layout_problem(m, "tp", 1) is None and sanity.layout_problem(m, "tp", 8) is None
    msg = sanity.layout_problem(m, "tp", 6)
    assert "(1, 2, 4, 8, 16, 32)" in msg
    assert sanity.layout_problem(m, "tp", 16) is None  # 16 % 8 == 0: each KV head replicated on 2 GPUs
    assert sanity.layout_notes(m, "tp", 16) == [
        "TP 16 > 8 KV heads: each KV head is replicated on 2 GPUs (one KV head per GPU, as vLLM and SGLang do); "
        "the KV cache is priced per GPU that way"]
    assert sanity.layout_notes(m, "tp", 8) == []
    t = _tiny_drafted(6)  # 4 heads (2 KV), drafter 6 heads
    assert sanity.layout_problem(t, "tp", 4) is None  # the drafter is only checked when it runs
    assert "drafter" in sanity.layout_problem(t, "tp", 4, drafter=True)
    k = registry.load_model("kimi-k2.6")  # 384 routed experts
    msg = sanity.layout_problem(k, "ep", 7)
    assert "384 / 7 = 54.86" in msg and "(1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 384)" in msg
    assert sanity.layout_problem(k, "ep", 8) is None


def test_request_limits_at_their_ends():
    """The limits a request is held to, each at its end and one past it: 1,000,000 sequences,
    10,000,000 tokens of context, a host 100x slower, a 4,096-node tree, 65,536 GPUs."""
    m = registry.load_model("llama-3.1-8b")

    def check(**kw):
        sanity.check_request(Request(**dict(dict(target="h200", gpus=1, model="llama-3.1-8b"), **kw)), m)

    check(concurrency=[1_000_000])
    with pytest.raises(ProjectionError, match="--concurrency 1000001: must be ≤ 1000000"):
        check(concurrency=[1, 1_000_001])
    check(context=10_000_000)
    with pytest.raises(ProjectionError, match="--context 10000001: must be between 1 and 10000000"):
        check(context=10_000_001)
    check(host_cpu_factor=100.0)
    with pytest.raises(ProjectionError, match=re.escape("--host-cpu-factor 100.5: must be a finite number in (0, 100]")):
        check(host_cpu_factor=100.5)
    check(budget=4096)
    with pytest.raises(ProjectionError, match="--budget 4097: must be between 1 and 4096"):
        check(budget=4097)
    from perfmodel.specs.schema import GQASpec

    wide = tiny_model(attention=GQASpec(n_heads=65536, n_kv_heads=65536, head_dim=32),  # made up: one head a GPU
                      dense_intermediate_size=65536)
    sanity.check_request(Request(target="h200", gpus=65536, model=wide), wide)
    with pytest.raises(ProjectionError, match="--gpus 65537: must be between 1 and 65536"):
        check(gpus=65537)
    with pytest.raises(ProjectionError, match="--gpus 6 --parallel tp"):
        check(gpus=6)
    from perfmodel.request import resolve_specs

    with pytest.raises(ProjectionError, match="--link"):  # an input to load: checked where it is loaded
        resolve_specs(Request(gpus=8, link="no-such-link"))


def test_the_drafter_must_split_only_when_it_runs():
    t = _tiny_drafted(6)  # 4 heads, drafter 6 heads: 4 GPUs split the target, not the drafter
    sanity.check_request(Request(target="h200", gpus=4, model=t), t)
    with pytest.raises(ProjectionError, match="drafter tiny-draft's 6 attention heads"):
        sanity.check_request(Request(target="h200", gpus=4, model=t, spec="ddtree"), t)


def test_layouts_at_two_gpus():
    """Three heads do not split over 2 GPUs; one KV head (MQA) is replicated on both, and the
    output says so; Mixtral's 8 experts are split by TP16 (each expert sliced) but cannot be
    placed whole on 16 GPUs by EP16."""
    from perfmodel.specs.schema import GQASpec

    odd = tiny_model(attention=GQASpec(n_heads=3, n_kv_heads=1, head_dim=32), dense_intermediate_size=192)
    assert "3 attention heads" in sanity.layout_problem(odd, "tp", 2)
    assert sanity.layout_problem(odd, "tp", 3) is None
    mqa = tiny_model(attention=GQASpec(n_heads=4, n_kv_heads=1, head_dim=32))
    assert sanity.layout_problem(mqa, "tp", 2) is None
    assert sanity.layout_notes(mqa, "tp", 2)[0].startswith("TP 2 > 1 KV heads: each KV head is replicated on 2 GPUs")
    assert sanity.layout_notes(mqa, "tp", 1) == []
    mix = registry.load_model("mixtral-8x7b")
    assert sanity.layout_problem(mix, "tp", 16) is None
    assert "8 / 16 = 0.50 per GPU" in sanity.layout_problem(mix, "ep", 16)


def test_missing_tree_build_fit_names_what_the_profile_has():
    from test_physics_step import hand_profile

    prof = hand_profile().model_copy(update={"treebuild": {}})
    req = Request(target="h200", gpus=1, model=_tiny_drafted(), spec="ddtree", tree_build="cpu")
    with pytest.raises(ProjectionError, match=re.escape("has no 'cpu' tree-build fit (treebuild fits: none)")):
        sanity.check_treebuild(req, prof, "hand")
    only_gpu = hand_profile().model_copy(update={"treebuild": {"gpu": hand_profile().treebuild["gpu"]}})
    with pytest.raises(ProjectionError, match=re.escape("(treebuild fits: gpu)")):
        sanity.check_treebuild(req, only_gpu, "hand")
    sanity.check_treebuild(Request(target="h200", gpus=1, model=_tiny_drafted(), spec="chain", tree_build="cpu"),
                           prof, "hand")  # a chain builds no tree


@pytest.mark.parametrize("table, ok, why", [
    ("table:2=3.0", True, None),  # tau = B + 1: every drafted node accepted
    ("table:2=3.01", False, "B+1 = 3"),
    ("table:15=16", True, None),  # B = depth: the block size 16 is also B + 1
    ("table:15=16.5", False, "B+1 = 16"),
    ("table:64=16,128=16.2", False, "the block size 16"),  # a 64-node tree still yields at most a block
    ("table:16=6.1±0.3,32=7.0+-0.4", True, None),  # standard errors are allowed
    ("table:16=16.4±0.1", False, "the block size 16"),
])
def test_acceptance_table_capped_by_budget_and_block(table, ok, why):
    if ok:
        sanity.check_acceptance(table, 15)
    else:
        with pytest.raises(ProjectionError, match=re.escape(why)):
            sanity.check_acceptance(table, 15)


def test_capped_tau_never_credits_more_than_drafted():
    class Flat:
        def tau(self, b):
            return 10.0

    assert sanity.capped_tau(Flat(), 4, 15) == 5.0  # B + 1
    assert sanity.capped_tau(Flat(), 64, 5) == 6.0  # depth + 1
    assert sanity.capped_tau(Flat(), 64, 15) == 10.0


def test_table_with_standard_errors_projects():
    """The documented 'table:16=6.1±0.3' form: tau 6.1 with a 0.3 sigma."""
    p = projector(Request(target="b300", gpus=8, spec="ddtree", budget=16, concurrency=[1],
                          acceptance="table:16=6.1±0.3")).run()["points"][0]
    assert p["tau"] == pytest.approx(6.1) and p["tau_sigma"] == pytest.approx(0.3)


def test_tp_must_split_every_mlp_evenly():
    """TP shards the dense MLP, the shared experts and the drafter's MLP along their
    intermediate size (vLLM's ColumnParallelLinear needs output_size % TP == 0): 4 heads split
    over 4 GPUs, but a 130-wide MLP does not; EP does not shard the dense MLP at all. The
    registry's models split over every GPU count their heads allow (intermediates are
    multiples of 2048)."""
    from perfmodel.specs.schema import GQASpec

    odd = tiny_model(dense_intermediate_size=130)
    assert sanity.layout_problem(odd, "tp", 2) is None  # 130 = 2 x 65
    msg = sanity.layout_problem(odd, "tp", 4)
    assert "tiny's dense MLP intermediate size 130" in msg and "divides 130" in msg
    with pytest.raises(ProjectionError, match="--gpus 4 --parallel tp: tensor parallelism splits tiny's dense MLP"):
        sanity.check_request(Request(target="h200", gpus=4, model=odd), odd)
    drafted = tiny_model(drafter=DrafterSpec(name="tiny-draft", source="hand-written test drafter", n_layers=2,
                                             hidden_size=64, n_heads=4, n_kv_heads=2, head_dim=32,
                                             intermediate_size=130, block_size=4))
    assert sanity.layout_problem(drafted, "tp", 4) is None  # the drafter is checked only when it runs
    assert "the drafter tiny-draft's MLP intermediate size 130" in sanity.layout_problem(drafted, "tp", 4, drafter=True)
    ds = registry.load_model("deepseek-v3")  # one shared expert of 2048
    shared = ds.model_copy(update={"moe": ds.moe.model_copy(update={"shared_intermediate_size": 2050})})
    assert "shared experts' intermediate size 2050" in sanity.layout_problem(shared, "tp-attn-ep-moe", 4)
    assert sanity.layout_problem(shared, "ep", 4) is None  # EP keeps the shared experts whole
    # no shared size given: n_shared x the expert size, 2 x 1000 = 2000 = 16 x 125 splits over 16
    two = ds.model_copy(update={"moe": ds.moe.model_copy(update={"n_shared_experts": 2, "expert_intermediate_size": 1000})})
    assert sanity.layout_problem(two, "tp-attn-ep-moe", 16) is None
    assert "shared experts' intermediate size 2000" in sanity.layout_problem(two, "tp-attn-ep-moe", 32)
    wide = tiny_model(attention=GQASpec(n_heads=8, n_kv_heads=8, head_dim=32))  # 128 % 8 == 0
    assert sanity.layout_problem(wide, "tp", 8) is None
    for name in registry.list_models():
        m = registry.load_model(name)
        heads = m.attention.n_heads
        for n in (d for d in range(2, heads + 1) if heads % d == 0 and d <= 128):
            p = sanity.layout_problem(m, "tp", n, drafter=True)
            assert p is None or "KV heads" in p, (name, n, p)
