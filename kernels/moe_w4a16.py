"""Fused MoE with INT4 group-32 weights and bf16 activations (W4A16), top-k routing.

Layout (compressed-tensors "pack-quantized", as Kimi K2-Thinking/K2.6 routed experts):
  w13_packed [E, 2I, H//8] int32, w13_scales [E, 2I, H//32] bf16  (rows 0..I-1 gate, I..2I-1 up)
  w2_packed  [E, H, I//8]  int32, w2_scales  [E, H, I//32]  bf16
Nibble convention: word j of a row holds k = 8j..8j+7; element 8j+i sits in bits 4i..4i+3,
stored as the unsigned nibble q+8 (q in [-8, 7], offset binary, as compressed-tensors'
pack_to_int32). Symmetric: w ~= q * scale, scale = absmax(group of 32)/7, q = round(w/scale)
clamped to [-7, 7] (compressed-tensors divides by 7.5 and uses -8 too; both decode the same).

Per token: out = sum_k topk_weights[k] * W2[e_k] @ (silu(W1[e_k] x) * (W3[e_k] x)).

Bytes (decode is weight-streaming), per DISTINCT expert touched:
  w13: 2I*H/2 (nibbles) + 2I*H/32*2 (bf16 scales) = 2*H*I*0.5625 B
  w2 :  H*I/2           +  H*I/32*2               =   H*I*0.5625 B
  -> 3*H*I*0.5625 B per expert (Kimi H=7168, I=2048: 24.77 MB), plus x in and out (2*T*H*2 B).
FLOPs: 6*T*k*H*I (2 per MAC; gate+up 2I*H MACs, down H*I MACs per pair).
"""
from __future__ import annotations

import torch

from ._moe_common import (
    MoEGemmConfig,
    activation_bytes,
    as_config,
    default_moe_configs,
    moe_flops,
    num_distinct_experts,
    run_fused_moe,
)

GROUP = 32
PACK = 8

__all__ = [
    "quantize_int4_g32",
    "dequantize_int4_g32",
    "fused_moe_w4a16",
    "fused_moe_w4a16_reference",
    "default_configs",
    "bytes_moved",
    "flops",
    "MoEGemmConfig",
]


def quantize_int4_g32(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """w [E, N, K] (K % 32 == 0) -> (packed int32 [E, N, K//8], scales bf16 [E, N, K//32])."""
    E, N, K = w.shape
    assert K % GROUP == 0, f"K={K} must be a multiple of {GROUP}"
    wg = w.float().reshape(E, N, K // GROUP, GROUP)
    scales = (wg.abs().amax(-1) / 7.0).clamp_min(1e-8).to(torch.bfloat16)  # what the kernel reads
    q = torch.round(wg / scales.float()[..., None]).clamp(-7, 7).to(torch.int32) + 8  # 1..15
    q = q.reshape(E, N, K // PACK, PACK)
    shifts = torch.arange(PACK, device=w.device, dtype=torch.int32) * 4
    packed = (q << shifts).sum(-1, dtype=torch.int64)  # disjoint bits: sum == or
    packed = torch.where(packed >= 2**31, packed - 2**32, packed).to(torch.int32)
    return packed.contiguous(), scales.contiguous()


def dequantize_int4_g32(packed: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """(packed [E, N, K//8] int32, scales [E, N, K//32]) -> bf16 [E, N, K]."""
    E, N, KW = packed.shape
    shifts = torch.arange(PACK, device=packed.device, dtype=torch.int32) * 4
    q = ((packed[..., None] >> shifts) & 0xF) - 8  # [E, N, K//8, 8]
    q = q.reshape(E, N, KW * PACK // GROUP, GROUP).float()
    w = q * scales.float()[..., None]
    return w.reshape(E, N, KW * PACK).to(torch.bfloat16)


def fused_moe_w4a16_reference(
    x, w13_packed, w13_scales, w2_packed, w2_scales, topk_ids, topk_weights
) -> torch.Tensor:
    """Plain torch: dequantise, then per touched expert gate_up -> silu*mul -> down, fp32."""
    T, H = x.shape
    I = w2_packed.shape[2] * PACK
    xf = x.float()
    out = torch.zeros((T, H), dtype=torch.float32, device=x.device)
    for e in torch.unique(topk_ids).tolist():
        tok, slot = torch.nonzero(topk_ids == e, as_tuple=True)
        w13 = dequantize_int4_g32(w13_packed[e : e + 1], w13_scales[e : e + 1])[0].float()
        w2 = dequantize_int4_g32(w2_packed[e : e + 1], w2_scales[e : e + 1])[0].float()
        gu = xf[tok] @ w13.T  # [n, 2I]
        h = torch.nn.functional.silu(gu[:, :I]) * gu[:, I:]
        y = (h @ w2.T) * topk_weights[tok, slot].float()[:, None]
        out.index_add_(0, tok, y)
    return out.to(x.dtype)


def default_configs(T: int, k: int, E: int, H: int, I: int, num_sms: int = 132):
    """(block_m, gate_up MoEGemmConfig, down MoEGemmConfig) used when none is given."""
    return default_moe_configs(T, k, E, H, I, int4=True, num_sms=num_sms)


def fused_moe_w4a16(
    x: torch.Tensor,
    w13_packed: torch.Tensor,
    w13_scales: torch.Tensor,
    w2_packed: torch.Tensor,
    w2_scales: torch.Tensor,
    topk_ids: torch.Tensor,
    topk_weights: torch.Tensor,
    *,
    block_m: int | None = None,
    gate_up_config: MoEGemmConfig | dict | None = None,
    down_config: MoEGemmConfig | dict | None = None,
) -> torch.Tensor:
    """Two Triton launches (gate_up with fused SiLU*mul, down with routed weight + top-k sum)
    after a vectorised torch align step. Knobs default to `default_configs(T, k, E, H, I)`;
    configs may be given as MoEGemmConfig or as a dict of the fields to override."""
    T, H = x.shape
    E, two_i, _ = w13_packed.shape
    I = two_i // 2
    k = topk_ids.shape[1]
    assert H % GROUP == 0 and I % GROUP == 0, f"H={H}, I={I} must be multiples of {GROUP}"
    bm, gu, dn = default_configs(T, k, E, H, I)
    gu, dn = as_config(gate_up_config, gu), as_config(down_config, dn)
    for name, c in (("gate_up", gu), ("down", dn)):
        assert c.block_k % GROUP == 0, f"{name}: block_k={c.block_k} must be a multiple of {GROUP}"
    return run_fused_moe(
        x, w13_packed, w13_scales, w2_packed, w2_scales, topk_ids, topk_weights,
        num_experts=E, inter=I, block_m=block_m or bm, gate_up_cfg=gu, down_cfg=dn,
    )


def expert_bytes(H: int, I: int) -> float:
    """INT4 weights (0.5 B) + one bf16 scale per 32 weights (0.0625 B) for 3*H*I weights."""
    return 3.0 * H * I * (0.5 + 2.0 / GROUP)


def bytes_moved(topk_ids: torch.Tensor, E: int, H: int, I: int) -> float:
    T = topk_ids.shape[0]
    return num_distinct_experts(topk_ids) * expert_bytes(H, I) + activation_bytes(T, H)


def flops(T: int, k: int, H: int, I: int) -> float:
    return moe_flops(T, k, H, I)
