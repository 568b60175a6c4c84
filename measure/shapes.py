"""Model shapes used by the benches, read from the model presets (`perfmodel/modelspecs/*.yaml`
through `perfmodel.specs.registry`), so each size lives in one place. The dicts keep the benches'
short field names."""

from __future__ import annotations

from perfmodel.specs import GQASpec, MLASpec, ModelSpec, load_model


def _moe(m: ModelSpec) -> dict:
    e = m.moe
    return dict(n_experts=e.n_routed_experts, top_k=e.top_k, moe_inter=e.expert_intermediate_size)


def _mla_moe(name: str) -> dict:
    m = load_model(name)
    a, e = m.attention, m.moe
    assert isinstance(a, MLASpec) and e is not None, f"{name}: the benches need an MLA + MoE preset"
    return dict(name=m.name, hidden=m.hidden_size, n_heads=a.n_heads, q_lora=a.q_lora_rank, kv_lora=a.kv_lora_rank,
                qk_nope=a.qk_nope_head_dim, qk_rope=a.qk_rope_head_dim, v_head=a.v_head_dim, **_moe(m),
                shared_inter=e.shared_intermediate_size or e.expert_intermediate_size * e.n_shared_experts, vocab=m.vocab_size)


def _gqa(name: str, moe: bool) -> dict:
    m = load_model(name)
    a = m.attention
    assert isinstance(a, GQASpec), f"{name}: the benches need a GQA preset"
    d = dict(name=m.name, hidden=m.hidden_size, n_heads=a.n_heads, n_kv_heads=a.n_kv_heads, head_dim=a.head_dim)
    return dict(d, **_moe(m), vocab=m.vocab_size) if moe else dict(d, inter=m.dense_intermediate_size)


KIMI = _mla_moe("kimi-k2.6")
DEEPSEEK_V3 = _mla_moe("deepseek-v3")
QWEN3_30B = _gqa("qwen3-30b-a3b", moe=True)
LLAMA3_8B = _gqa("llama-3.1-8b", moe=False)
LLAMA3_70B = _gqa("llama-3.1-70b", moe=False)


def kimi_gemm_shapes(tp: int) -> list[tuple[str, int, int]]:
    """(name, N out, K in) of Kimi's dense projections on one GPU of a TP=`tp` deployment."""
    k = KIMI
    H, nh = k["hidden"], k["n_heads"]
    return [
        ("q_a", k["q_lora"], H),
        ("q_b", nh * (k["qk_nope"] + k["qk_rope"]) // tp, k["q_lora"]),
        ("kv_a", k["kv_lora"] + k["qk_rope"], H),
        ("o_proj", H, nh * k["v_head"] // tp),
        ("shared_gate_up", 2 * k["shared_inter"] // tp, H),
        ("shared_down", H, k["shared_inter"] // tp),
        ("lm_head", k["vocab"] // tp, H),
        ("router", k["n_experts"], H),
    ]


def mla_prefill_gemm_shapes(m: dict, tp: int) -> list[tuple[str, int, int]]:
    """(name, N out, K in) of an MLA + MoE model's dense projections at prefill on one GPU of a
    TP=`tp` deployment: the attention projections, the prefill's up-projection of the latent to
    per-head K_nope and V (kv_b_proj: the uncompressed form prefill runs in) and the shared expert."""
    H, nh = m["hidden"], m["n_heads"] // tp
    return [
        ("q_a", m["q_lora"], H),
        ("q_b", nh * (m["qk_nope"] + m["qk_rope"]), m["q_lora"]),
        ("kv_a", m["kv_lora"] + m["qk_rope"], H),
        ("kv_b", nh * (m["qk_nope"] + m["v_head"]), m["kv_lora"]),
        ("o_proj", H, nh * m["v_head"]),
        ("shared_gate_up", 2 * m["shared_inter"] // tp, H),
        ("shared_down", H, m["shared_inter"] // tp),
    ]


def gqa_prefill_gemm_shapes(m: dict, tp: int) -> list[tuple[str, int, int]]:
    """(name, N out, K in) of a dense GQA model's projections on one GPU of a TP=`tp` deployment."""
    H, D = m["hidden"], m["head_dim"]
    hq, hkv = m["n_heads"] // tp, max(1, m["n_kv_heads"] // tp)
    return [
        ("qkv", (hq + 2 * hkv) * D, H),
        ("o_proj", H, hq * D),
        ("gate_up", 2 * m["inter"] // tp, H),
        ("down", H, m["inter"] // tp),
    ]


def prefill_gemm_shapes() -> list[tuple[str, int, int]]:
    """The prefill bench's dense GEMMs: Kimi K2.6 and DeepSeek-V3 at TP8, Llama-3.1-8B at TP1 and
    Llama-3.1-70B at TP8, each (N, K) once (the first model's name kept)."""
    out, seen = [], set()
    models = (("kimi", "_tp8", mla_prefill_gemm_shapes(KIMI, 8)), ("dsv3", "_tp8", mla_prefill_gemm_shapes(DEEPSEEK_V3, 8)),
              ("llama8b", "", gqa_prefill_gemm_shapes(LLAMA3_8B, 1)), ("llama70b", "_tp8", gqa_prefill_gemm_shapes(LLAMA3_70B, 8)))
    for model, tag, shapes in models:
        for name, N, K in shapes:
            if (N, K) not in seen:
                seen.add((N, K))
                out.append((f"{model}_{name}{tag}", N, K))
    return out
