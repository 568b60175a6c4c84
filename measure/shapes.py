"""Model shapes used by the benches, from perfmodel/modelspecs/SOURCES.md §1
(Kimi K2 family config; Qwen3-30B-A3B and Llama-3.1-8B configs). One place, shared by the
benches and their tests."""

from __future__ import annotations

KIMI = dict(
    name="kimi-k2.6", hidden=7168, n_heads=64, q_lora=1536, kv_lora=512, qk_nope=128, qk_rope=64, v_head=128,
    n_experts=384, top_k=8, moe_inter=2048, shared_inter=2048, vocab=163840,
)
QWEN3_30B = dict(name="qwen3-30b-a3b", hidden=2048, n_heads=32, n_kv_heads=4, head_dim=128, n_experts=128, top_k=8, moe_inter=768, vocab=151936)
LLAMA3_8B = dict(name="llama-3.1-8b", hidden=4096, n_heads=32, n_kv_heads=8, head_dim=128)


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
