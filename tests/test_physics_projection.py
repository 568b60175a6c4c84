"""Projection laws against published and hand-computed figures, one test per branch.

Published figures (cited where used): KV-cache bytes per token of Llama 3 8B / 70B from their
configs (Llama 3 Herd of Models, arXiv 2407.21783, Table 3: 32 / 80 layers, 8 KV heads of
dim 128), the MLA latent of Kimi K2 / DeepSeek-V3 ((512 + 64) x 2 B x 61 layers), and the
total / active parameter counts on the model cards (Kimi K2.6: 1T / 32B, moonshotai/Kimi-K2.6
README "Model Summary"; DeepSeek-V3: 671B / 37B, deepseek-ai/DeepSeek-V3 README; gpt-oss-120b:
117B / 5.1B, OpenAI gpt-oss model card; Qwen3-30B-A3B: 30.5B / 3.3B, Qwen/Qwen3-30B-A3B card;
Llama 3.1 8B / 70B: 8.03B / 70.6B, meta-llama model cards), all as collected in the facts the
model specs cite (perfmodel/modelspecs/*.yaml `source:`).
"""

import json
import math
from importlib import resources

import numpy as np
import pytest

from perfmodel.api import project, projector
from perfmodel.model.layers import Layout, decode_ops, expected_distinct
from perfmodel.model.memory import memory_use, param_counts
from perfmodel.model.step import step_estimate
from perfmodel.profile import load_profile, save_profile
from perfmodel.request import TWO_GPU_PROFILE, shipped_profile_path
from perfmodel.scenario import Request
from perfmodel.specs import registry

Z90 = 1.645
KIB = 1024


def _embedded():
    return load_profile(str(resources.files("perfmodel").joinpath("data", "h200-sxm.json")))


def _kv_per_token(model, parallel="tp", n=1, kv=None):
    m = registry.load_model(model)
    if kv:
        m = m.model_copy(update={"dtypes": m.dtypes.model_copy(update={"kv_cache": kv})})
    return memory_use(m, registry.load_gpu("b300"), Layout(parallel, n), 1).kv_per_seq_GB * 1e9


# ----------------------------------------------------------------------------- memory
def test_kv_bytes_per_token_published():
    # Llama 3 8B: 32 layers x 8 KV heads x 128 x 2 (K, V) x 2 B = 128 KiB; 70B: 80 layers = 320 KiB
    assert _kv_per_token("llama-3.1-8b") == 128 * KIB
    assert _kv_per_token("llama-3.1-70b") == 320 * KIB
    assert _kv_per_token("llama-3.1-70b", kv="fp8") == 160 * KIB
    assert _kv_per_token("llama-3.1-70b", "tp", 8) == 40 * KIB  # one KV head per GPU at TP8
    # MLA latent: 61 x (512 + 64) x 2 B = 70,272 B, replicated on every TP rank, split by DP attention
    assert _kv_per_token("kimi-k2.6") == _kv_per_token("deepseek-v3") == 61 * 576 * 2
    assert _kv_per_token("kimi-k2.6", "tp", 8) == 61 * 576 * 2
    assert _kv_per_token("kimi-k2.6", "ep", 8) == 61 * 576 * 2 / 8
    # Qwen3-30B-A3B: head_dim 128 while hidden / heads = 2048 / 32 = 64: 48 x 2 x 4 x 128 x 2 = 96 KiB
    assert _kv_per_token("qwen3-30b-a3b") == 96 * KIB


def test_param_counts_match_model_cards():
    def total_active(name):
        m = registry.load_model(name)
        pc = param_counts(m)
        tot = sum(pc.values())
        routed_idle = pc.get("routed_experts", 0.0) * (1 - m.moe.top_k / m.moe.n_routed_experts) if m.moe else 0.0
        return tot, tot - routed_idle - pc["embedding"]  # active excludes the embedding lookup

    t, a = total_active("deepseek-v3")
    assert t == pytest.approx(671e9, rel=0.002) and a == pytest.approx(37e9, rel=0.02)
    t, a = total_active("kimi-k2.6")  # card: 1T / 32B; facts [D]: 1026.4B / 31.7B
    assert t == pytest.approx(1026.4e9, rel=0.001) and a == pytest.approx(31.7e9, rel=0.005)
    assert round(t / 1e12) == 1 and round(a / 1e9) == 32
    t, a = total_active("gpt-oss-120b")
    assert t == pytest.approx(117e9, rel=0.005) and a == pytest.approx(5.1e9, rel=0.02)
    t, a = total_active("qwen3-30b-a3b")  # card's 3.3B activated counts the embedding
    assert t == pytest.approx(30.5e9, rel=0.003) and a + param_counts(registry.load_model("qwen3-30b-a3b"))[
        "embedding"] == pytest.approx(3.3e9, rel=0.02)
    # Llama 3.1 8B / 70B: 8,030,261,248 and 70,553,706,496 parameters (the Hugging Face model
    # pages' counts), less the RMSNorm vectors the model leaves out (2 per layer + the final one)
    assert total_active("llama-3.1-8b")[0] == 8_030_261_248 - 65 * 4096
    assert total_active("llama-3.1-70b")[0] == 70_553_706_496 - 161 * 8192


def test_kimi_components_match_facts():
    """models-specdec.md 1a [D]: routed 1014.7B, attention 6.17B, shared 2.64B, dense 0.40B,
    router 0.17B, embedding + head 2.35B."""
    pc = param_counts(registry.load_model("kimi-k2.6"))
    want = {"routed_experts": 1014.7e9, "attention": 6.17e9, "shared_experts": 2.64e9, "dense_mlp": 0.40e9,
            "router": 0.17e9}
    for k, v in want.items():
        assert pc[k] == pytest.approx(v, rel=0.03 if v < 1e9 else 0.002), k
    assert pc["embedding"] + pc["lm_head"] == pytest.approx(2.35e9, rel=0.002)


def test_weights_per_gpu_by_hand():
    """Llama 3.1 8B on one H200: 8,029,995,008 bf16 matrix weights = 16.06 GB; usable = 141 GB x 0.9."""
    m = registry.load_model("llama-3.1-8b")
    mem = memory_use(m, registry.load_gpu("h200"), Layout("tp", 1), 8192)
    assert mem.weights_GB == pytest.approx(8_029_995_008 * 2 / 1e9)
    assert mem.usable_GB == pytest.approx(141 * 0.9)
    assert mem.kv_per_seq_GB == pytest.approx(128 * KIB * 8192 / 1e9)
    # TP2 halves everything (embedding and lm_head are vocab-parallel)
    mem2 = memory_use(m, registry.load_gpu("h200"), Layout("tp", 2), 8192)
    assert mem2.weights_GB == pytest.approx(mem.weights_GB / 2)


def test_max_concurrency_is_the_largest_that_fits():
    """(126.9 - 16.0605) GB / 1.0737 GB per sequence = 103.2 -> 103 sequences."""
    res = project(Request(target="h200", gpus=1, model="llama-3.1-8b", concurrency=[103, 104], context=8192))
    assert res["max_concurrency_that_fits"] == 103
    assert [p["fits_in_memory"] for p in res["points"]] == [True, False]
    mem = memory_use(registry.load_model("llama-3.1-8b"), registry.load_gpu("h200"), Layout("tp", 1), 8192)
    assert mem.fits(mem.max_concurrency) and not mem.fits(mem.max_concurrency + 1)


def test_kv_reserved_for_speculative_tokens():
    """A verify step of budget B holds B + 1 extra tokens per sequence in the KV cache."""
    p = project(Request(target="b300", gpus=8, spec="ddtree", budget=16, concurrency=[4]))["points"][0]
    assert p["budget"] == 16
    assert p["memory_GB"]["kv"] == pytest.approx(4 * 61 * 576 * 2 * (8192 + 17) / 1e9)
    # the drafter's weights (3.48B bf16 = 6.96 GB, models-specdec.md 2 [D]) are split over 8 GPUs
    base = project(Request(target="b300", gpus=8, concurrency=[4]))["points"][0]
    assert p["memory_GB"]["weights"] - base["memory_GB"]["weights"] == pytest.approx(6.96 / 8, rel=0.01)


# ----------------------------------------------------------------------------- collectives
# the shipped 2-GPU profile (the embedded one was taken on 1 GPU, without collectives)
X2 = str(shipped_profile_path(TWO_GPU_PROFILE))


def _fit(op, graph):
    return next(c for c in load_profile(X2).collectives if c.op == op and c.graph == graph and c.n_gpus == 2)


@pytest.mark.parametrize("graphs", [True, False])
def test_measured_collective_fit_at_2_gpus_prices_as_measured(graphs):
    """2 H200 over NVLink4 were measured: each collective costs the fit's own law, latency +
    bytes per GPU / algbw (the bus factor cancels). Qwen3-30B-A3B TP2, C=1: 2 x 48 all-reduces
    of 2048 x 2 B and one 8 B logit gather."""
    ar = _fit("all_reduce", graphs)
    p = project(Request(target="h200", gpus=2, model="qwen3-30b-a3b", concurrency=[1], graphs=graphs,
                        profile=X2))["points"][0]
    want = 97 * ar.latency_us + (96 * 4096 + 8) / (ar.bw_GBps * 1e3)
    assert p["breakdown_ms"]["collectives"] * 1e3 == pytest.approx(want, rel=1e-9)


def test_measured_all_to_all_at_2_gpus_for_ep():
    """EP2, C=2: each GPU's one sequence sends its token to 8 experts' owners, dispatch and
    combine per MoE layer: 96 all-to-alls of 8 x 2048 x 2 B, plus one 16 B all-reduce."""
    a2a, ar = _fit("all_to_all", True), _fit("all_reduce", True)
    p = project(Request(target="h200", gpus=2, model="qwen3-30b-a3b", parallel="ep", concurrency=[2],
                        profile=X2))["points"][0]
    want = 96 * (a2a.latency_us + 32768 / (a2a.bw_GBps * 1e3)) + ar.latency_us + 16 / (ar.bw_GBps * 1e3)
    assert p["breakdown_ms"]["collectives"] * 1e3 == pytest.approx(want, rel=1e-9)


def test_tp_attention_ep_moe_all_reduces_twice_per_layer():
    ar = _fit("all_reduce", True)
    p = project(Request(target="h200", gpus=2, model="qwen3-30b-a3b", parallel="tp-attn-ep-moe",
                        concurrency=[1], profile=X2))["points"][0]
    assert p["breakdown_ms"]["collectives"] * 1e3 == pytest.approx(
        97 * ar.latency_us + (96 * 4096 + 8) / (ar.bw_GBps * 1e3), rel=1e-9)


def test_drafter_all_reduces_twice_per_drafter_layer():
    """Kimi's drafter (6 layers, hidden 7168, block 16) at TP8 on B300 (NVLink5 spec): the draft
    term grows by 12 all-reduces of C x 16 x 7168 x 2 B priced latency + bytes x 2(7/8)/busbw."""
    pj = projector(Request(target="b300", gpus=8, concurrency=[2]))
    m = pj.model
    kw = dict(draft=True, tree_budget=16)
    on = step_estimate(m, pj.machine, Layout("tp", 8), 2, 17, 8192, **kw).breakdown_us["draft"]
    off = step_estimate(m, pj.machine, Layout("tp", 8, comm=False), 2, 17, 8192, **kw).breakdown_us["draft"]
    c = registry.load_link("nvlink5-nvswitch").calibrated
    per = c.allreduce_latency_us.value + 2 * 16 * 7168 * 2 * 1.75 / (c.allreduce_busbw_GBps.value * 1e3)
    assert on - off == pytest.approx(12 * per, rel=1e-9)


# ----------------------------------------------------------------------------- experts
def _routed(model, parallel, n, C):
    ops, _ = decode_ops(registry.load_model(model), Layout(parallel, n), C, 1, 4096)
    return next(o for o in ops if o.name == "routed_experts")


def test_distinct_experts_limits():
    assert expected_distinct(384, 8, 1) == pytest.approx(8)  # one token touches k experts
    assert expected_distinct(384, 8, 1e5) == pytest.approx(384)  # many tokens touch them all
    assert expected_distinct(384, 8, 2) == pytest.approx(384 * (1 - (376 / 384) ** 2))


def test_busiest_gpu_experts_against_a_hand_enumeration():
    """One token picks 2 distinct of 16 experts, 8 on each of 2 GPUs: both on one GPU with
    probability 2 x C(8,2) / C(16,2) = 56/120 (the busiest then has 2), else 1 each: the
    busiest GPU touches 2 x 56/120 + 64/120 = 176/120 experts on average. The normal
    approximation is within its stated 7% at T = 1; every token touching every expert
    (k = E) gives exactly E/n; no cap is passed (m = E/n, k x T)."""
    from perfmodel.model.layers import expected_max_distinct_per_gpu

    exact = 176 / 120
    assert expected_max_distinct_per_gpu(16, 2, 1, 2) == pytest.approx(exact, rel=0.07)
    assert expected_max_distinct_per_gpu(16, 16, 3, 2) == pytest.approx(8.0)
    assert expected_max_distinct_per_gpu(16, 2, 1, 1) == pytest.approx(2.0)  # one GPU: the token's 2
    assert expected_max_distinct_per_gpu(16, 2, 1e6, 4) == pytest.approx(4.0)  # all touched: E/n


def test_tp_routed_expert_bytes_by_hand():
    """Kimi INT4 g32 expert: 3 x 7168 x 2048 x (0.5 + 2/32) B = 24.77 MB (models-specdec.md 1b);
    C=1 at TP8 reads 8 experts' eighths, plus the token's 8 rows in and out."""
    op = _routed("kimi-k2.6", "tp", 8, 1)
    assert op.kernel_class == "moe_w4a16" and op.compute_dtype == "bf16"
    assert op.bytes == pytest.approx(8 * 24_772_608 / 8 + 1 * 8 / 8 * 2 * 7168 * 2)
    assert op.flops == pytest.approx(2.0 * 8 * 3 * 7168 * 2048 / 8)


@pytest.mark.parametrize("parallel", ["ep", "tp-attn-ep-moe"])
def test_ep_prices_the_busiest_gpu(parallel):
    """EP8, 8 tokens: the step waits for the GPU whose 48 local experts are touched most,
    against simulated uniform routings (not the mean, 60.3 / 8 = 7.5)."""
    C = 8
    op = _routed("kimi-k2.6", parallel, 8, C)
    T = C if parallel == "tp-attn-ep-moe" else C  # every GPU sees all C tokens' routing
    act = T * 8 / 8 * 2 * 7168 * 2
    touched = (op.bytes - act) / 24_772_608
    rng = np.random.default_rng(0)
    sims = [np.bincount(np.unique(np.argsort(rng.random((T, 384)), axis=1)[:, :8]) // 48, minlength=8).max()
            for _ in range(1500)]
    assert touched == pytest.approx(np.mean(sims), rel=0.05)
    assert touched > 1.3 * expected_distinct(384, 8, T) / 8


# ----------------------------------------------------------------------------- dtypes
@pytest.mark.parametrize("model,override,cls,cdt,bpw", [
    ("kimi-k2.6", None, "moe_w4a16", "bf16", 0.5 + 2 / 32),
    ("deepseek-v3", None, "moe_fp8", "fp8", 1 + 4 / 128**2),
    ("deepseek-v3", "nvfp4", "moe_nvfp4", "fp4", 0.5 + 1 / 16),
    ("deepseek-v3", "mxfp4", "moe_mxfp4", "bf16", 0.5 + 1 / 32),
    ("deepseek-v3", "int8", "moe_bf16", "bf16", 1 + 2 / 128),
    ("qwen3-30b-a3b", None, "moe_bf16", "bf16", 2.0),
])
def test_expert_dtype_paths(model, override, cls, cdt, bpw):
    m = registry.load_model(model)
    if override:
        m = m.model_copy(update={"dtypes": m.dtypes.model_copy(update={"routed_experts": override})})
    e = m.moe
    op = next(o for o in decode_ops(m, Layout("tp", 1), 1, 1, 4096)[0] if o.name == "routed_experts")
    assert (op.kernel_class, op.compute_dtype) == (cls, cdt)
    assert op.bytes == pytest.approx(e.top_k * 3 * m.hidden_size * e.expert_intermediate_size * bpw
                                     + e.top_k * 2 * m.hidden_size * 2)


def test_fp8_and_fp4_run_at_their_peak_ratio_on_b200():
    """Compute-bound expert GEMMs (C=512 x 16 tokens): FP4 on B200 (9 PF vs 2.25 PF bf16 dense) is
    faster than FP8, FP8 faster than bf16-rate MXFP4; same bytes for nvfp4 and int4 would not
    show it, so compare the moe term's compute part through the projection."""
    def moe_ms(dt):
        r = Request(target="b200", gpus=8, model="deepseek-v3", concurrency=[64], context=1024,
                    dtypes={"routed_experts": dt})
        pj = projector(r)
        est = step_estimate(pj.model, pj.machine, pj.layout, 512, 16, 1024)
        return next(o for o in est.ops if o.name == "routed_experts").compute_us

    fp4, fp8, mx = moe_ms("nvfp4"), moe_ms("fp8"), moe_ms("mxfp4")
    b200 = registry.load_gpu("b200").compute
    assert mx / fp8 == pytest.approx(b200.fp8_dense_TFLOPS.value / b200.bf16_dense_TFLOPS.value
                                     * projector(Request(target="b200", gpus=8, model="deepseek-v3",
                                                         concurrency=[1])).machine.dtype_efficiency["fp8"], rel=1e-9)
    assert fp8 > fp4


# ----------------------------------------------------------------------------- speculative decoding
def test_spec_split_adds_up_and_tree_build_is_per_node_times_c():
    """draft + tree build + verify + other = the step; the GPU tree build is the embedded fit
    t0 + per_node x C x B (C = 8, B = 16)."""
    tb = _embedded().treebuild["gpu"]
    p = project(Request(target="b300", gpus=8, spec="ddtree", budget=16, concurrency=[8]))["points"][0]
    s = p["spec_split"]
    assert s["draft_ms"] + s["tree_build_ms"] + s["verify_ms"] + s["other_ms"] == pytest.approx(p["step_ms"], rel=1e-12)
    assert s["tree_build_ms"] == pytest.approx((tb.t0_us + tb.per_node_us * 8 * 16) / 1e3, rel=1e-12)
    assert s["other_ms"] == pytest.approx(_embedded().overheads.host_step_us / 1e3)
    assert 0.1 < s["draft_ms"] < 0.5 * p["step_ms"]  # a 6-layer drafter: a fraction of a 61-layer verify
    assert p["tokens_per_s_per_stream"] == pytest.approx(p["tau"] / p["step_ms"] * 1e3)
    assert p["tokens_per_s"] == pytest.approx(8 * p["tokens_per_s_per_stream"])
    # chain speculation has no tree build
    c = project(Request(target="b300", gpus=8, spec="chain", concurrency=[8]))["points"][0]
    assert c["spec_split"]["tree_build_ms"] == 0.0 and c["budget"] == 15


def _spec_point(acc, budget=16):
    return project(Request(target="b300", gpus=8, spec="ddtree", budget=budget, concurrency=[1],
                           acceptance=acc))["points"][0]


def test_acceptance_sources(tmp_path):
    assert _spec_point("table:16=6.1,32=7.0")["tau"] == pytest.approx(6.1)
    assert _spec_point("table:16=6.1,32=7.0", 32)["tau"] == pytest.approx(7.0)
    # scalar alpha 0.8, chain capped at the 15-token block: (1 - 0.8^16) / 0.2
    assert _spec_point("0.8")["tau"] == pytest.approx((1 - 0.8**16) / 0.2)
    # a calibration file: 2 depths x 2 ranks; DDTree best-first pops (d1 r0: q .6, p .5),
    # (d2 r0 under it: q .36, gain .25), (d1 r1: q .3, gain .2) -> tau(3) = 1 + .5 + .25 + .2
    f = tmp_path / "calib.json"
    f.write_text(json.dumps({"q": [[0.6, 0.3], [0.6, 0.3]], "p": [[0.5, 0.2], [0.5, 0.2]]}))
    assert _spec_point(f"file:{f}", 3)["tau"] == pytest.approx(1.95)
    assert _spec_point(f"file:{f}", 2)["tau"] == pytest.approx(1.75)
    # the math preset reproduces DFlash's published chain acceptance on GSM8K, 6.29-6.44 (sgl-project/sglang#16818)
    p = project(Request(target="b300", gpus=8, spec="chain", acceptance="dflash_default", concurrency=[1]))["points"][0]
    assert 6.29 <= p["tau"] <= 6.44


def test_budget_auto_picks_the_best_and_can_pick_none():
    res = project(Request(target="b300", gpus=8, spec="ddtree", concurrency=[1], acceptance="0.0"))
    p = res["points"][0]
    assert p["budget"] == 0 and p["tau"] == 1.0  # alpha 0: speculation never pays
    assert p["spec_split"] is None and "no speculation" in p["budget_note"]


# ----------------------------------------------------------------------------- interval
def test_interval_widens_with_the_self_check_error(tmp_path):
    """The 90% interval is +-1.645 x hypot(sigma, self-check error x step): a profile whose
    end-to-end points are 40% slower than its components predict gets a wider interval, at
    least 1.645 x its error wide on each side."""
    prof = _embedded()
    slow = prof.model_copy(update={"e2e": [p.model_copy(update={"step_ms": p.step_ms * 1.4}) for p in prof.e2e]})
    path = tmp_path / "slow.json"
    save_profile(slow, path)
    r0 = project(Request(target="h200", gpus=1, model="llama-3.1-8b", concurrency=[1]))
    r1 = project(Request(target="h200", gpus=1, model="llama-3.1-8b", concurrency=[1], profile=str(path)))
    err0, err1 = r0["self_check"]["median_abs_err"], r1["self_check"]["median_abs_err"]
    assert r0["self_check"]["n_points"] == sum(p.n_gpus == 1 for p in prof.e2e)  # the 1-GPU points only
    assert err1 > 0.2 > 0.05 > err0
    p0, p1 = r0["points"][0], r1["points"][0]
    assert p1["step_ms"] == pytest.approx(p0["step_ms"])  # same components, same estimate
    w0 = p0["interval"]["step_ms"][1] - p0["step_ms"]
    w1 = p1["interval"]["step_ms"][1] - p1["step_ms"]
    assert w1 > w0
    assert w1 >= Z90 * err1 * p1["step_ms"] * (1 - 1e-9)
    assert w1 <= Z90 * math.hypot(err1 * p1["step_ms"], w0 / Z90) * (1 + 1e-9)
    lo, hi = p1["interval"]["tokens_per_s_per_stream"]
    assert lo == pytest.approx(1e3 / p1["interval"]["step_ms"][1]) and hi == pytest.approx(1e3 / p1["interval"]["step_ms"][0])
    assert p1["interval"]["step_ms"][0] == pytest.approx(p1["step_ms"] - w1)  # symmetric in step time


def test_validate_error_sign(tmp_path):
    """err = predicted / measured - 1: the same profile with every end-to-end step measured 40%
    slower gets, point by point, the same prediction and the error (1 + err) / 1.4 - 1 < 0."""
    from perfmodel.validate import run_validation

    prof = _embedded()
    slow = prof.model_copy(update={"e2e": [p.model_copy(update={"step_ms": p.step_ms * 1.4}) for p in prof.e2e]})
    a_path, b_path = tmp_path / "a.json", tmp_path / "b.json"
    save_profile(prof, a_path)
    save_profile(slow, b_path)
    a = [r for r in run_validation([str(a_path)], published=False)["rows"] if r["kind"].startswith("e2e")]
    b = [r for r in run_validation([str(b_path)], published=False)["rows"] if r["kind"].startswith("e2e")]
    assert len(a) == len(b) == len(prof.e2e)
    for x, y in zip(a, b):
        assert y["predicted"] == pytest.approx(x["predicted"], rel=1e-12)
        assert y["measured"] == pytest.approx(1.4 * x["measured"])
        assert y["err"] == pytest.approx((1 + x["err"]) / 1.4 - 1, rel=1e-9)
        assert (x["err"] > 0) == (x["predicted"] > x["measured"])
        assert y["err"] < 0


def test_measured_samples_price_their_ops_on_the_profile_gpu():
    """On the H200 the profile was taken on, an op the profile timed (same kernel and shape)
    costs its raw sample, times its count: Kimi at TP8 shard shapes on one GPU (the self-check
    stack), C=1, L=1024 — q_a GEMM (M=1, N=1536, K=7168), MLA attention (8 heads), the
    fused add+RMSNorm (H=7168); and Kimi's unsharded INT4 experts (I=2048) at T=1."""
    prof = _embedded()
    h200 = registry.load_gpu("h200")
    from perfmodel.model.machine import build_machine

    mach = build_machine(h200, 1, None, prof, h200, registry.load_memory_kinds())

    def sample(bench, provider, **shape):
        return next(s.median_ms * 1e3 for s in prof.benches[bench].samples
                    if s.provider == provider and all(s.shape.get(k) == v for k, v in shape.items()))

    m = registry.load_model("kimi-k2.6")
    node = prof.overheads.graph_node_us  # each kernel's graph node is priced apart, as dispatch
    ops = {o.name: o for o in step_estimate(m, mach, Layout("tp", 1, tp_shape=8, comm=False), 1, 1, 1024,
                                             host=False).ops}
    assert ops["q_a"].total_us == pytest.approx(61 * (sample("gemm", "torch.matmul", M=1, N=1536, K=7168) - node))
    assert ops["attention_core"].total_us == pytest.approx(
        61 * (sample("attention", "triton", kind="mla", C=1, q=1, L=1024, H=8) - 2 * node))
    assert ops["attn_norm"].total_us == pytest.approx(
        61 * (sample("elementwise", "triton", op="add_rmsnorm", T=1, H=7168) - node))
    ops1 = {o.name: o for o in step_estimate(m, mach, Layout("tp", 1, comm=False), 1, 1, 1024, host=False).ops}
    assert ops1["routed_experts"].total_us == pytest.approx(
        60 * (sample("moe", "triton_w4a16", E=384, H=7168, I=2048, k=8, T=1) - 4 * node))
    # outside the measured range (L = 10^6) the nearest sample carried by the law's ratio prices it,
    # never below streaming its bytes at the law's rate
    lay = Layout("tp", 1, tp_shape=8, comm=False)
    far = {o.name: o for o in step_estimate(m, mach, lay, 1, 1, 10**6, host=False).ops}["attention_core"]
    op = next(o for o in decode_ops(m, lay, 1, 1, 10**6)[0] if o.name == "attention_core")
    f = prof.fits["attention_mla"]
    assert far.total_us >= 61 * op.bytes / (f.bw_GBps * 1e3) * (1 - 1e-9)
    assert far.total_us > 10 * ops["attention_core"].total_us  # 10^6 positions against 1024


def test_mla_ops_by_hand():
    """Kimi K2.6 MLA at TP8 (8 of 64 heads per GPU), C=2 sequences x q=3 tokens, L=4093 (S=4096):
    the latent (512 + 64) x 2 B is read once per sequence (tree tokens share the prefix); the
    absorbed W_UK / W_UV are 8 x 128 x 512 bf16 weights; the scores and values run over the
    576- and 512-wide latent."""
    m = registry.load_model("kimi-k2.6")
    by = {o.name: o for o in decode_ops(m, Layout("tp", 8), 2, 3, 4093)[0]}
    T, h = 6, 8
    core = by["attention_core"]
    assert core.bytes == 2 * 4096 * 576 * 2 + 2 * T * h * 512 * 2 + T * h * 576 * 2
    assert core.flops == 2.0 * T * h * 4096 * (576 + 512)
    assert by["w_uk_absorb"].bytes == h * 128 * 512 * 2 + T * h * (128 + 512) * 2
    assert by["w_uk_absorb"].flops == 2.0 * T * h * 128 * 512
    assert by["w_uv"].bytes == h * 128 * 512 * 2 + T * h * (128 + 512) * 2
    assert by["latent_transposes"].bytes == 2 * T * h * (512 + 128) * 2
    assert by["q_a"].bytes == 7168 * 1536 * 2 + T * (7168 + 1536) * 2
    assert by["q_b"].bytes == 1536 * h * 192 * 2 + T * (1536 + h * 192) * 2
    assert by["kv_a"].bytes == 7168 * 576 * 2 + T * (7168 + 576) * 2
    assert by["o_proj"].bytes == h * 128 * 7168 * 2 + T * (h * 128 + 7168) * 2
    assert by["q_rope"].bytes == 2 * T * h * 64 * 2 + T * 2 * 64 and by["kv_norm"].bytes == 2 * T * 512 * 2 + 512 * 2
    assert all(by[n].count == 61 for n in ("attention_core", "q_a", "o_proj"))
    # router and shared expert (TP-split 2048 columns -> 256 per GPU), 60 MoE layers
    assert by["router"].bytes == 7168 * 384 * 2 + T * (7168 + 384) * 2 and by["router"].count == 60
    assert by["shared_gate_up"].bytes == 7168 * 512 * 2 + T * (7168 + 512) * 2
    assert by["shared_down"].bytes == 256 * 7168 * 2 + T * (256 + 7168) * 2
    assert by["topk"].bytes == T * 384 * 2 + T * 8 * 8  # scores read, 8 (id, weight) pairs written
    # the dense first layer's MLP, 18432 / 8 = 2304 columns per GPU
    assert by["dense_gate_up"].bytes == 7168 * 4608 * 2 + T * (7168 + 4608) * 2 and by["dense_gate_up"].count == 1


# ----------------------------------------------------------------------------- requests
def test_observed_figure_calibrates_toward_it():
    """--observed 'h200,tp8,c=1,50tok/s': the uncalibrated figure is the model's own H200 TP8 C=1
    projection (1000 / step ms), and the calibration moves the prediction from it to near 50."""
    from perfmodel.errors import ProjectionError

    h = project(Request(target="h200", gpus=8, concurrency=[1]))["points"][0]["step_ms"]
    o = project(Request(target="b300", gpus=8, concurrency=[1], observed="h200,tp8,c=1,50tok/s"))["observed"]
    assert o["uncalibrated_tokens_per_s_per_stream"] == pytest.approx(1e3 / h)
    assert abs(o["calibrated_tokens_per_s_per_stream"] / 50 - 1) < 0.05
    with pytest.raises(ProjectionError, match="--observed"):
        project(Request(target="b300", gpus=8, concurrency=[1], observed="h200,tp8,50tok/s"))


def test_observed_figure_is_per_stream_at_any_concurrency():
    """An --observed figure is tokens per second per stream (OBSERVED.yaml's `tokens_per_s`), at
    C=8 as at C=1: the calibration moves the C=8 prediction to near 40 per stream, not 40 / 8."""
    o = project(Request(target="b300", gpus=8, concurrency=[8], observed="h200,tp8,c=8,40tok/s"))["observed"]
    assert o["observed_tokens_per_s_per_stream"] == 40
    assert abs(o["calibrated_tokens_per_s_per_stream"] / 40 - 1) < 0.05


@pytest.mark.parametrize("kw,needle", [
    (dict(gpus=0), "gpus"), (dict(context=-1), "context"), (dict(concurrency=[]), "concurrency"),
    (dict(model="llama-3.1-8b", parallel="ep"), "needs an MoE"), (dict(host_cpu_factor=0.0), "host_cpu_factor"),
    (dict(spec="ddtree", budget=0), "budget"), (dict(spec="chain", model="llama-3.1-8b"), "drafter"),
    (dict(gpus=1), "does not fit"),
])
def test_bad_requests_name_the_bad_value(kw, needle):
    base = dict(target="b300", gpus=8, concurrency=[1])
    with pytest.raises(ValueError, match=needle):  # ProjectionError, or the Request's own validation
        project(Request(**(base | kw)))


def test_points_past_memory_are_marked_with_the_numbers():
    res = project(Request(target="h200", gpus=1, model="llama-3.1-8b", concurrency=[200], context=8192))
    p = res["points"][0]
    assert p["fits_in_memory"] is False
    assert p["memory_GB"]["kv"] == pytest.approx(200 * 128 * KIB * 8192 / 1e9)
    assert f"KV {p['memory_GB']['kv']:.1f} GB" in p["note"]
    # speculative: nothing fits either, for any budget
    s = project(Request(target="b300", gpus=8, spec="ddtree", budget=16, concurrency=[100000]))["points"][0]
    assert s["fits_in_memory"] is False and "does not fit" in s["note"]
    assert s["memory_GB"]["kv"] == pytest.approx(100000 * 61 * 576 * 2 * (8192 + 17) / 1e9)  # with the B + 1 tokens
    # C=280 fits without speculation (0.576 GB of KV a sequence) but not with a 512-node tree and
    # the drafter: the note's inequality must hold for the figures it prints
    t = project(Request(target="b300", gpus=8, spec="ddtree", budget=512, concurrency=[280]))["points"][0]
    g = t["memory_GB"]
    assert t["fits_in_memory"] is False and g["weights"] + g["kv"] > g["usable"]
    assert g["kv"] == pytest.approx(280 * 61 * 576 * 2 * (8192 + 513) / 1e9)


def test_projection_reports_its_rules_and_sources():
    res = project(Request(target="b300", gpus=8, model="deepseek-v3", concurrency=[1]))
    assert res["target"] | {} == {"gpu": "b300-sxm", "display_name": res["target"]["display_name"], "n_gpus": 8,
                                  "memory_kind": "HBM3e", "link": "nvlink5-nvswitch", "link_kind": "nvlink5"}
    assert "calibrated spec" in res["rules"]["all_reduce"] and "fp8" in res["rules"]["compute_dtypes"]
    assert res["profile"]["kind"] == "measured" and res["profile"]["path"] == "h200-sxm.json"
    one = project(Request(target="h200", gpus=1, model="llama-3.1-8b", concurrency=[1]))
    assert one["target"]["link"] is None and one["rules"]["all_reduce"] is None


def test_kimi_weights_per_gpu_from_the_published_size():
    """models-specdec.md 1b [D]: routed 1014.7B x (0.5 + 2/32) B + the bf16 rest = 594 GB. At TP8
    every part splits 8 ways but the 0.165B-parameter router, replicated in bf16 on each GPU;
    under EP8 attention, the dense MLP and the shared expert are whole on every GPU (DP
    attention) and only the experts, embedding and lm_head split."""
    m = registry.load_model("kimi-k2.6")
    b300 = registry.load_gpu("b300")
    router = 60 * 384 * 7168
    tp = memory_use(m, b300, Layout("tp", 8), 8192)
    assert tp.weights_GB == pytest.approx(594 / 8 + router * 2 * 7 / 8 / 1e9, rel=0.003)
    assert tp.usable_GB == pytest.approx(270 * 0.9)  # the B300's stated usable 270 GB, less the 10% reserve
    pc = param_counts(m)
    ep = memory_use(m, b300, Layout("ep", 8), 8192)
    whole = (pc["attention"] + pc["dense_mlp"] + pc["shared_experts"] + pc["router"]) * 2
    split = pc["routed_experts"] * (0.5 + 2 / 32) + (pc["embedding"] + pc["lm_head"]) * 2
    assert ep.weights_GB == pytest.approx((whole + split / 8) / 1e9, rel=1e-9)
    # tp-attn-ep-moe: attention and shared expert TP, experts EP: the TP8 footprint
    mix = memory_use(m, b300, Layout("tp-attn-ep-moe", 8), 8192)
    assert mix.weights_GB == pytest.approx(tp.weights_GB, rel=1e-9)
    # DeepSeek-V3 FP8 (1 B + a 4 B scale per 128x128 block) but bf16 embedding and head
    d = registry.load_model("deepseek-v3")
    pd = param_counts(d)
    fp8 = 1 + 4 / 128**2
    want = (sum(pd.values()) - pd["embedding"] - pd["lm_head"] - pd["router"]) * fp8 / 8 \
        + (pd["embedding"] + pd["lm_head"]) * 2 / 8 + pd["router"] * 2
    assert memory_use(d, b300, Layout("tp", 8), 8192).weights_GB == pytest.approx(want / 1e9, rel=1e-9)


def test_drafter_weights_by_hand():
    """Kimi's DFlash drafter: 6 layers x 528.5M + the fc fusing 6 target layers (6 x 7168 x 7168)
    = 3.48B bf16 params (models-specdec.md 2 [D]), split over the GPUs."""
    m = registry.load_model("kimi-k2.6")
    b300 = registry.load_gpu("b300")
    with_d = memory_use(m, b300, Layout("tp", 8), 8192, drafter=True).weights_GB
    without = memory_use(m, b300, Layout("tp", 8), 8192).weights_GB
    per_layer = 7168 * (64 + 16) * 128 + 64 * 128 * 7168 + 3 * 7168 * 18432
    assert (with_d - without) * 1e9 == pytest.approx((6 * per_layer + 6 * 7168 * 7168) * 2 / 8)
    assert (with_d - without) * 8 == pytest.approx(6.96, rel=0.01)


def test_memory_fit_boundary():
    from perfmodel.model.memory import MemoryUse

    mu = MemoryUse(weights_GB=10.0, kv_per_seq_GB=2.0, usable_GB=20.0)
    assert mu.max_concurrency == 5 and mu.fits(5) and not mu.fits(6)  # exactly full still fits
    assert mu.kv_GB(3) == 6.0
    assert MemoryUse(10.0, 2.0, 21.9).max_concurrency == 5
    assert MemoryUse(30.0, 2.0, 20.0).max_concurrency == 0
    assert MemoryUse(10.0, 0.5, 20.0).max_concurrency == 20


def test_elementwise_ops_counted_as_the_bench_counts_them():
    """The per-op laws were fitted on the bytes and flops the elementwise bench recorded with
    each sample (measure/elementwise.py); the model's ops of the same shape must carry the same
    counts, or the law is applied to a different op. Kimi at TP8 shard shapes, T = 8 tokens:
    add+RMSNorm over 7168, SiLU*mul over the 2048-wide expert, top-k over 384 experts (k = 8),
    RoPE over 8 heads x 64, argmax over a 163840/8 vocab shard."""
    prof = _embedded()
    bench = {s.shape["op"]: s for s in prof.benches["elementwise"].samples if s.shape["T"] == 8}
    m = registry.load_model("kimi-k2.6")
    tp8 = {o.name: o for o in decode_ops(m, Layout("tp", 1, tp_shape=8, comm=False), 8, 1, 1024)[0]}
    one = {o.name: o for o in decode_ops(m, Layout("tp", 1, comm=False), 8, 1, 1024)[0]}
    for op, variant in ((tp8["attn_norm"], "add_rmsnorm"), (one["shared_silu_mul"], "silu_mul"),
                        (tp8["topk"], "router_topk"), (tp8["q_rope"], "rope"), (tp8["sample_argmax"], "argmax_vocab")):
        assert (op.bytes, op.flops) == (bench[variant].bytes, bench[variant].flops), variant
    # plain RMSNorm: the bench ran it over 7168, the model over q's 1536-wide rank; per element alike
    b, q = bench["rmsnorm"], tp8["q_norm"]
    assert (q.bytes / 1536, q.flops / 1536) == (b.bytes / 7168, b.flops / 7168)


def test_ep_layout_ops_by_hand():
    """EP8 (DP attention), C=9 sequences: this GPU runs ceil(9/8) = 2 sequences' attention,
    dense MLP and shared expert on whole (unsplit) weights, and the routed experts of all 9
    tokens on its 48 experts; dispatch + combine all-to-alls carry each local token's hidden
    state to its 8 experts' owners."""
    m = registry.load_model("kimi-k2.6")
    ops, colls = decode_ops(m, Layout("ep", 8), 9, 1, 4095)
    by = {o.name: o for o in ops}
    assert by["attention_core"].bytes == 2 * 4096 * 576 * 2 + 2 * 2 * 64 * 512 * 2 + 2 * 64 * 576 * 2
    assert by["q_b"].bytes == 1536 * 64 * 192 * 2 + 2 * (1536 + 64 * 192) * 2  # all 64 heads
    assert by["dense_gate_up"].bytes == 7168 * 36864 * 2 + 2 * (7168 + 36864) * 2
    assert by["shared_down"].bytes == 2048 * 7168 * 2 + 2 * (2048 + 7168) * 2
    assert by["lm_head"].bytes == 20480 * 7168 * 2 + 2 * (7168 + 20480) * 2  # vocab still split 8 ways
    a2a = next(c for c in colls if c.op == "all_to_all")
    assert (a2a.count, a2a.bytes_per_gpu) == (120, 2 * 8 * 7168 * 2)
    assert {c.name for c in colls} == {"ep_alltoall", "logits_gather"}


def test_expected_max_of_normals_published_values():
    """E[max of n standard normals]: 0 (n=1), 1/sqrt(pi) = 0.5642 (n=2), 1.0294 (n=4), 1.4236 (n=8)
    (order-statistics tables, e.g. Harter 1961)."""
    from perfmodel.model.layers import expected_max_std_normal

    assert expected_max_std_normal(1) == 0.0
    assert expected_max_std_normal(2) == pytest.approx(1 / math.sqrt(math.pi), abs=1e-4)
    assert expected_max_std_normal(4) == pytest.approx(1.0294, abs=1e-3)
    assert expected_max_std_normal(8) == pytest.approx(1.4236, abs=1e-3)


def test_mla_variants_by_hand():
    """W_UV's flops; one head per GPU (64 heads at TP64); an MLA model without the low-rank q
    (q_lora_rank 0, as DeepSeek-V2-Lite): one q projection 7168 -> heads x 192."""
    m = registry.load_model("kimi-k2.6")
    by = {o.name: o for o in decode_ops(m, Layout("tp", 8), 2, 3, 4093)[0]}
    assert by["w_uv"].flops == 2.0 * 6 * 8 * 128 * 512
    one = {o.name: o for o in decode_ops(m, Layout("tp", 64), 1, 1, 100)[0]}
    assert one["q_b"].bytes == 1536 * 192 * 2 + (1536 + 192) * 2
    nolora = m.model_copy(update={"attention": m.attention.model_copy(update={"q_lora_rank": 0})})
    by0 = {o.name: o for o in decode_ops(nolora, Layout("tp", 8), 1, 1, 100)[0]}
    assert "q_a" not in by0 and "q_b" not in by0
    assert by0["q_proj"].bytes == 7168 * 8 * 192 * 2 + (7168 + 8 * 192) * 2
    pc = param_counts(nolora)["attention"] / 61
    assert pc == 7168 * 64 * 192 + 7168 * 576 + 512 * 64 * 256 + 64 * 128 * 7168


def test_lookup_lower_bound_uses_the_largest_sampled_concurrency():
    """Above the largest sampled C the op takes at least that curve's time (more sequences
    never take less); samples of another kind do not count as sampled concurrencies."""
    from perfmodel.model.lookup import Probe, SampleTable
    from perfmodel.profile import BenchResult, Profile, Provenance, Sample

    pts = [(1, 10.0), (2, 20.0), (4, 40.0)]
    samples = [Sample(shape={"C": c, "L": L, "kind": "x"}, median_ms=t * L / 8 / 1e3, provider="triton")
               for c, t in pts for L in (8, 16)]
    samples.append(Sample(shape={"C": 16, "L": 8, "kind": "z"}, median_ms=1.0, provider="triton"))
    tab = SampleTable(Profile(provenance=Provenance(kind="measured", gpu_name="g", timestamp="t"),
                              benches={"attention": BenchResult(status="ok", samples=samples)}))
    pr = lambda c, L: Probe("attention", (("kind", "x"),), "L", L, "triton", "C", c)  # noqa: E731
    assert tab.edge(pr(8, 16))[1] == pytest.approx(80.0)  # the C=4 curve at L=16
    assert tab.edge(pr(3, 16)) is None and tab.lookup(pr(8, 16)) is None
    assert tab.lookup(pr(3, 8)) == pytest.approx(math.exp(math.log(20) + math.log(1.5) / math.log(2) * math.log(2)))


def test_budget_one_speculates():
    """A one-node tree still speculates: tau(1) > 1, with a draft and a tree build."""
    res = project(Request(target="b300", gpus=8, spec="ddtree", budget=1, concurrency=[1, 8]))
    p = res["points"][0]
    assert p["budget"] == 1 and p["tau"] > 1 and p["spec_split"]["draft_ms"] > 0
    assert res.point(8)["concurrency"] == 8


def test_budget_curve_and_the_speculation_does_not_fit_note():
    """Kimi TP8 on B300 at C=292: plain decode fits (0.576 GB of KV a sequence), the smallest tree
    (B=4, +5 tokens) with the drafter's weights does not: auto picks no speculation and says why.
    Each curve entry's tok/s is tau / step."""
    p = project(Request(target="b300", gpus=8, spec="ddtree", concurrency=[292, 8]))["points"]
    assert p[0]["budget"] == 0 and p[0]["budget_note"].startswith("speculation does not fit")
    for c in p[1]["budget_curve"]:
        if c["fits_in_memory"]:
            assert c["tokens_per_s_per_stream"] == pytest.approx(c["tau"] / c["step_ms"] * 1e3, rel=1e-12)


def test_a_copy_does_no_arithmetic_and_one_head_per_gpu_is_one():
    """MLA's latent transposes are copies: bytes, no flops. The tiny GQA model (4 heads of 32,
    2 KV heads) at TP4: one query head per GPU and one KV head (replicated): qkv_proj is
    64 x (1 + 2) x 32 weights, C = 1, L = 100."""
    from perfmodel.specs.schema import GQASpec, ModelSpec

    ops, _ = decode_ops(registry.load_model("kimi-k2.6"), Layout("tp", 8), 1, 1, 100)
    lt = next(o for o in ops if o.name == "latent_transposes")
    assert lt.flops == 0.0 and lt.bytes > 0
    tiny = ModelSpec(name="tiny", display_name="tiny", source="hand-written test model", n_layers=1,
                     n_dense_layers=1, hidden_size=64, vocab_size=256,
                     attention=GQASpec(n_heads=4, n_kv_heads=2, head_dim=32), dense_intermediate_size=128)
    by = {o.name: o for o in decode_ops(tiny, Layout("tp", 4), 1, 1, 100)[0]}
    assert by["qkv_proj"].bytes == 64 * 3 * 32 * 2 + 1 * (64 + 3 * 32) * 2
    assert by["attention_core_full"].flops == 4.0 * 1 * 1 * 101 * 32  # 4 T hq S D
