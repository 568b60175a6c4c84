"""Any batch an engine runs: decode, verify and prefill groups, mixed, priced by `batch_estimate`.

Hand-worked figures use the one-layer tiny model and the round-number profile of
test_physics_step (every kernel class t0 = 10 us, 1000 GB/s, 100 TF/s); the rest checks
properties on the embedded H200 profile: a pure decode batch prices exactly as
`step_estimate`, more prefill work never costs less, the compute roof of a prefill call is the
GPU's dense-GEMM rate of the right dtype, and where the laws lack a prefill-size sample the
estimate says so.
"""

import math

import pytest
from pydantic import ValidationError
from test_physics_step import ONE, hand_machine, hand_profile, tiny_model

from perfmodel.api import projector as Projector
from perfmodel.model.layers import Batch, Decode, Layout, Prefill, Verify, batch_ops, causal_pairs, decode_ops, parse_group
from perfmodel.model.step import batch_estimate, step_estimate
from perfmodel.profile import KernelFit
from perfmodel.scenario import Request
from perfmodel.specs import registry


def _pj(target="h200", gpus=8, model="kimi-k2.6", parallel="tp", profile=None):
    return Projector(Request(target=target, gpus=gpus, model=model, parallel=parallel, concurrency=[1], profile=profile))


def _moe_us(est) -> float:
    """The routed experts' time in a step: their calls' totals, floors included."""
    return sum(e.total_us for e in est.ops if e.name.startswith("routed_experts"))


def _batch(*groups, logits="last"):
    return Batch(groups=tuple(groups), logits=logits)


# ----------------------------------------------------------------------------- by hand

def test_causal_pairs_by_hand():
    # 4 new tokens, nothing cached: 1 + 2 + 3 + 4 keys
    assert causal_pairs(4, 0) == 10
    # 3 new tokens after 5 cached: 6 + 7 + 8 = 3 x 5 + 3 x 4 / 2
    assert causal_pairs(3, 5) == 21
    # a window of 4: positions 3..6 see 3, 4, 4, 4 keys
    assert causal_pairs(4, 2, window=4) == 15
    # all past the window: 2 tokens x 4 keys
    assert causal_pairs(2, 10, window=4) == 8
    # a window longer than the sequence changes nothing
    assert causal_pairs(4, 2, window=100) == causal_pairs(4, 2)


def test_gqa_prefill_attention_by_hand():
    """Tiny model (4 query heads, 2 KV heads of dim 32), 2 sequences x 8 new tokens after 3 cached:
    each sequence has 8 x 3 + 8 x 9 / 2 = 60 causal pairs; flops 4 x heads x pairs x dim; bytes:
    K and V of the 11 context tokens once, Q in and O out of the new tokens, the new K and V
    written."""
    ops, _ = batch_ops(tiny_model(), ONE, _batch(Prefill(n=2, tokens=8, prefix=3)))
    core = next(o for o in ops if o.name == "attention_prefill_full")
    assert core.flops == 4.0 * 2 * 4 * 60 * 32
    assert core.bytes == 2 * 11 * 2 * 2 * 32 * 2 + 2 * 16 * 4 * 32 * 2 + 16 * 2 * 2 * 32 * 2
    assert core.variant == "prefill" and core.probe is None
    # the projections run over every new token of the batch: 16 here
    qkv = next(o for o in ops if o.name == "qkv_proj")
    assert qkv.flops == 2.0 * 16 * 64 * (4 + 2 * 2) * 32
    # logits: the last token of each sequence (2 rows), or all 16
    lm = next(o for o in ops if o.name == "lm_head")
    assert lm.flops == 2.0 * 2 * 64 * 256
    lm_all = next(o for o in batch_ops(tiny_model(), ONE, _batch(Prefill(n=2, tokens=8, prefix=3), logits="all"))[0]
                  if o.name == "lm_head")
    assert lm_all.flops == 2.0 * 16 * 64 * 256


def test_mixed_batch_has_one_attention_call_per_group_and_shares_the_projections():
    """Decode 3 @ 99 + prefill 1 x 5 @ 0: one decode attention call (as decode_ops prices it), one
    prefill call; the GEMMs and norms see 3 + 5 = 8 tokens; the logits 3 + 1 rows."""
    m = tiny_model()
    ops, _ = batch_ops(m, ONE, _batch(Decode(n=3, context=99), Prefill(n=1, tokens=5)))
    dec = next(o for o in decode_ops(m, ONE, 3, 1, 99)[0] if o.name == "attention_core_full")
    assert [o for o in ops if o.name == "attention_core_full"] == [dec]
    pre = next(o for o in ops if o.name == "attention_prefill_full")
    assert pre.flops == 4.0 * 4 * causal_pairs(5, 0) * 32
    assert next(o for o in ops if o.name == "o_proj").flops == 2.0 * 8 * 4 * 32 * 64
    assert next(o for o in ops if o.name == "lm_head").flops == 2.0 * 4 * 64 * 256


def test_prefill_attention_takes_the_dense_gemm_compute_roof_of_the_right_dtype():
    """Hand profile with decode attention at 10 TF/s and GEMMs at 100 TF/s: a compute-bound
    prefill attention call runs at the GEMM's 100 TF/s (x the dtype's peak ratio), and the
    estimate lists that assumption; a decode call keeps its class law."""
    prof = hand_profile()
    fits = dict(prof.fits)
    for c in ("attention_gqa", "attention_mla"):
        fits[c] = KernelFit(t0_us=10.0, bw_GBps=1000.0, tflops=10.0, source="hand-made test profile")
    mach = hand_machine(profile=prof.model_copy(update={"fits": fits}))
    b = _batch(Prefill(n=1, tokens=2048))
    est = batch_estimate(tiny_model(), mach, ONE, b)
    core = next(e for e in est.ops if e.name == "attention_prefill_full")
    flops = 4.0 * 4 * causal_pairs(2048, 0) * 32
    assert core.bound == "compute"
    assert core.compute_us == pytest.approx(flops / (100.0 * 1e6))
    assert any("attention_gqa at prefill size" in a for a in est.assumptions)
    dec = step_estimate(tiny_model(), mach, ONE, 1, 1, 100)
    assert dec.assumptions == []
    # the fp8 rate of a W8A8 GEMM: the machine's fp8 scale (datasheet ratio x measured efficiency)
    pj = _pj(model="deepseek-v3")
    assert pj.model.dtypes.attention == "fp8"
    e = batch_estimate(pj.model, pj.machine, pj.layout, _batch(Prefill(n=1, tokens=8192)))
    qb = next(x for x in e.ops if x.name == "q_b")
    op = next(o for o in batch_ops(pj.model, pj.layout, _batch(Prefill(n=1, tokens=8192)))[0] if o.name == "q_b")
    rate = pj.machine.laws["gemm_bf16"].tflops * pj.machine.flops_scale("fp8")
    assert pj.machine.flops_scale("fp8") > 1.5
    assert op.probe is None  # the profile timed bf16 GEMMs only: the law prices it
    assert qb.compute_us == pytest.approx(op.flops * op.count / (rate * 1e6))


def test_mla_prefill_runs_uncompressed_attention_over_the_context():
    """MLA prefill: the latent of the prefix and the new tokens up-projected (kv_b_proj over
    P + T tokens), then attention with qk = 192 and v = 128 per head over the causal pairs;
    the decode group of the same batch keeps the absorbed form."""
    m = registry.load_model("deepseek-v3")
    a = m.attention
    lay = Layout("tp", 8)
    ops, _ = batch_ops(m, lay, _batch(Decode(n=4, context=1000), Prefill(n=1, tokens=2048, prefix=4096)))
    by = {o.name: o for o in ops}
    h = a.n_heads // 8
    assert by["mla_kv_b_proj"].flops == 2.0 * (4096 + 2048) * a.kv_lora_rank * h * (a.qk_nope_head_dim + a.v_head_dim)
    qk = a.qk_nope_head_dim + a.qk_rope_head_dim
    assert by["attention_prefill"].flops == 2.0 * h * causal_pairs(2048, 4096) * (qk + a.v_head_dim)
    assert by["w_uk_absorb"].flops == 2.0 * 4 * h * a.qk_nope_head_dim * a.kv_lora_rank  # decode tokens only
    assert by["attention_core"].variant == ""


# ----------------------------------------------------------------------------- step_estimate as a special case

@pytest.mark.parametrize("model,gpus,parallel", [("kimi-k2.6", 8, "tp"), ("llama-3.1-8b", 1, "tp"),
                                                 ("deepseek-v3", 8, "ep"), ("gpt-oss-120b", 8, "tp-attn-ep-moe")])
def test_a_decode_batch_prices_exactly_as_step_estimate(model, gpus, parallel):
    pj = _pj(gpus=gpus, model=model, parallel=parallel)
    for C, q, L in [(1, 1, 0), (7, 1, 4093), (64, 1, 1024), (32, 5, 2000), (128, 17, 100)]:
        for graph in (True, False):
            g = Decode(n=C, context=L) if q == 1 else Verify(n=C, width=q, context=L)
            a = step_estimate(pj.model, pj.machine, pj.layout, C, q, L, graph=graph)
            b = batch_estimate(pj.model, pj.machine, pj.layout, _batch(g), graph=graph)
            assert (b.step_us, b.sigma_us, b.n_kernels, b.breakdown_us) == (a.step_us, a.sigma_us, a.n_kernels, a.breakdown_us)


def test_a_verify_batch_with_the_drafter_prices_as_step_estimate():
    pj = _pj()
    a = step_estimate(pj.model, pj.machine, pj.layout, 8, 9, 1000, draft=True, tree_budget=8)
    b = batch_estimate(pj.model, pj.machine, pj.layout, _batch(Verify(n=8, width=9, context=1000)), draft=True, tree_budget=8)
    assert (b.step_us, b.sigma_us, b.breakdown_us) == (a.step_us, a.sigma_us, a.breakdown_us)
    assert b.breakdown_us["draft"] > 0 and b.breakdown_us["tree_build"] > 0


def test_memo_changes_nothing():
    pj = _pj()
    memo: dict = {}
    b = _batch(Decode(n=30, context=1500), Prefill(n=2, tokens=3000, prefix=1000))
    plain = batch_estimate(pj.model, pj.machine, pj.layout, b)
    for _ in range(2):
        again = batch_estimate(pj.model, pj.machine, pj.layout, b, memo=memo)
        assert (again.step_us, again.sigma_us, again.breakdown_us) == (plain.step_us, plain.sigma_us, plain.breakdown_us)
    assert memo


# ----------------------------------------------------------------------------- physics

@pytest.mark.parametrize("model,gpus", [("kimi-k2.6", 8), ("llama-3.1-8b", 1), ("gpt-oss-120b", 1)])
def test_more_prefill_tokens_never_cost_less(model, gpus):
    """Over a range that crosses the profile's largest GEMM / MoE / elementwise samples (4096
    tokens): no step is cheaper than a smaller one, and the samples' edge does not jump."""
    pj = _pj(model=model, gpus=gpus)
    prev = 0.0
    for T in [16, 128, 1024, 2048, 4000, 4096, 4097, 4200, 8192, 16384, 32768]:
        t = batch_estimate(pj.model, pj.machine, pj.layout, _batch(Prefill(n=1, tokens=T))).step_us
        assert t >= prev, T
        if T == 4097:
            assert t == pytest.approx(prev, rel=0.01)
        prev = t
    # a longer cached prefix costs more attention, never less
    prev = 0.0
    for P in [0, 1000, 8000, 30000]:
        t = batch_estimate(pj.model, pj.machine, pj.layout, _batch(Prefill(n=1, tokens=2048, prefix=P))).step_us
        assert t > prev
        prev = t


def test_prompts_of_one_step_spread_over_the_attention_dp_ranks():
    """With data-parallel attention the prompts of a step run on different ranks, one a rank, so the
    busiest rank's attention side is the longest prompt's, whatever the lengths: eight prompts of
    1000 to 1007 tokens on DeepSeek-V3 over 8 x H200 (attention DP 8, experts EP 8) cost what eight of
    1007 tokens cost, within their routed experts' share, not eight prompts on one rank. With
    attention TP they all run on every GPU: at least eight of the shortest (each its own attention call)."""
    dp = _pj(model="deepseek-v3", parallel="dp-attn+ep")
    assert dp.layout.dp_attn == 8
    mixed = _batch(*(Prefill(n=1, tokens=1000 + i) for i in range(8)))
    est = lambda pj, b: batch_estimate(pj.model, pj.machine, pj.layout, b)  # noqa: E731
    spread, longest, shortest = (est(dp, b) for b in (mixed, _batch(Prefill(n=8, tokens=1007)),
                                                       _batch(Prefill(n=8, tokens=1000))))
    assert shortest.step_us <= spread.step_us <= longest.step_us
    nine = est(dp, _batch(*(Prefill(n=1, tokens=1000 + i) for i in range(9))))  # the 9th shares the longest's rank
    assert nine.step_us > longest.step_us
    assert nine.step_us == pytest.approx(est(dp, _batch(Prefill(n=9, tokens=1008))).step_us, rel=0.05)
    tp = _pj(model="deepseek-v3", parallel="tp")
    assert est(tp, mixed).step_us >= est(tp, _batch(Prefill(n=8, tokens=1000))).step_us


def test_a_prefill_chunk_never_makes_a_decode_step_cheaper():
    """Adding prefill tokens to a decode batch adds time; in particular the routed experts of a
    mixed step (priced at prefill size) cost at least what the decode tokens alone cost."""
    pj = _pj()
    for C in (8, 256, 1024):
        dec = batch_estimate(pj.model, pj.machine, pj.layout, _batch(Decode(n=C, context=2000)))
        for T in (1, 64, 2048):
            mix = batch_estimate(pj.model, pj.machine, pj.layout, _batch(Decode(n=C, context=2000), Prefill(n=1, tokens=T)))
            assert mix.step_us > dec.step_us, (C, T)
            assert _moe_us(mix) >= _moe_us(dec) - 1e-9, (C, T)


def test_prefill_is_compute_bound_and_says_where_it_lacks_samples():
    pj = _pj()
    est = batch_estimate(pj.model, pj.machine, pj.layout, _batch(Prefill(n=1, tokens=8192)))
    by = {e.name: e for e in est.ops}
    for name in ("routed_experts", "attention_prefill", "o_proj", "shared_gate_up"):
        assert by[name].bound == "compute", name
    text = " ".join(est.assumptions)
    assert "at prefill size" not in text  # the embedded profile measured its prefill laws
    old = _pj(profile="h200-sxm-x2-0565ba9")  # a profile measured before the prefill bench existed
    old_text = " ".join(batch_estimate(old.model, old.machine, old.layout, _batch(Prefill(n=1, tokens=8192))).assumptions)
    assert "attention_mla at prefill size" in old_text and "moe_w4a16 at prefill size" in old_text
    assert "gemm_bf16 past its largest sampled M (4096)" in text
    assert step_estimate(pj.model, pj.machine, pj.layout, 64, 1, 4000).assumptions == []


def test_prefill_time_is_of_the_order_of_its_flops_over_the_gemm_rate():
    """Llama-3.1-8B prefill of 8192 tokens on one GPU: at least the GEMM flops (2 x params x
    tokens) at the GPU's measured dense rate, and at most twice that (attention and the
    bandwidth-bound rest add the remainder)."""
    pj = _pj(model="llama-3.1-8b", gpus=1)
    from perfmodel.model.memory import param_counts

    pc = param_counts(pj.model)
    n = sum(v for k, v in pc.items() if k != "embedding")
    t = batch_estimate(pj.model, pj.machine, pj.layout, _batch(Prefill(n=1, tokens=8192))).step_us
    ideal = 2.0 * n * 8192 / (pj.machine.laws["gemm_bf16"].tflops * 1e6)
    assert ideal < t < 2 * ideal


def test_batch_inputs_are_checked():
    for bad in (dict(groups=()), dict(groups=(Decode(n=1, context=0),), logits="some")):
        with pytest.raises(ValidationError):
            Batch(**bad)
    with pytest.raises(ValidationError):
        Prefill(n=1, tokens=0)
    with pytest.raises(ValidationError):
        Decode(n=0, context=10)
    # the discriminated union reads plain dicts, as a JSON request would hold them
    b = Batch(groups=({"kind": "prefill", "n": 2, "tokens": 100, "prefix": 5}, {"kind": "decode", "n": 3, "context": 9}))
    assert isinstance(b.groups[0], Prefill) and b.has_prefill
    assert math.isclose(causal_pairs(100, 5), 100 * 5 + 100 * 101 / 2)


def test_the_command_line_notation_of_groups():
    assert parse_group("decode", "64@1024") == Decode(n=64, context=1024)
    assert parse_group("prefill", "2x4096@1000") == Prefill(n=2, tokens=4096, prefix=1000)
    assert parse_group("prefill", "1x8192") == Prefill(n=1, tokens=8192)
    assert parse_group("verify", "8x9@2000") == Verify(n=8, width=9, context=2000)
    for kind, text in [("decode", "64"), ("decode", "a@3"), ("prefill", "0x5"), ("verify", "8x9"), ("decode", "-1@5"),
                       ("prefill", "2x3x4@1"), ("tree", "1@1")]:
        with pytest.raises(ValueError) as e:
            parse_group(kind, text)
        assert "\n" not in str(e.value) and (text in str(e.value) or kind in str(e.value))
