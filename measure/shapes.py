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
    return dict(d, **_moe(m), vocab=m.vocab_size) if moe else d


KIMI = _mla_moe("kimi-k2.6")
QWEN3_30B = _gqa("qwen3-30b-a3b", moe=True)
LLAMA3_8B = _gqa("llama-3.1-8b", moe=False)


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
