"""Fused MoE with bf16 weights, top-k routing: gate_up -> SiLU*mul -> down.

  w13 [E, 2I, H] bf16 (rows 0..I-1 gate, I..2I-1 up), w2 [E, H, I] bf16.
The Triton grouped GEMM and align step of kernels/_moe_common.py. `grouped_mm_moe_torch` is the PyTorch-native baseline via torch._grouped_mm.

Bytes per DISTINCT expert touched: 3*H*I*2 (Kimi H=7168, I=2048: 88.1 MB), plus x in and out
(2*T*H*2 B). FLOPs: 6*T*k*H*I.
"""
from __future__ import annotations

import torch

from ._moe_common import (
    MoEGemmConfig,
    activation_bytes,
    as_config,
    default_moe_configs,
    launch_moe_gemm,
    moe_flops,
    num_distinct_experts,
    run_fused_moe,
)

__all__ = [
    "fused_moe_bf16",
    "fused_moe_bf16_reference",
    "grouped_mm_moe_torch",
    "default_configs",
    "bytes_moved",
    "flops",
    "MoEGemmConfig",
]


def fused_moe_bf16_reference(x, w13, w2, topk_ids, topk_weights) -> torch.Tensor:
    """Plain torch, fp32 accumulate, loop over touched experts."""
    T, H = x.shape
    I = w2.shape[2]
    xf = x.float()
    out = torch.zeros((T, H), dtype=torch.float32, device=x.device)
    for e in torch.unique(topk_ids).tolist():
        tok, slot = torch.nonzero(topk_ids == e, as_tuple=True)
        gu = xf[tok] @ w13[e].float().T
        h = torch.nn.functional.silu(gu[:, :I]) * gu[:, I:]
        out.index_add_(0, tok, (h @ w2[e].float().T) * topk_weights[tok, slot].float()[:, None])
    return out.to(x.dtype)


def grouped_mm_moe_torch(x, w13, w2, topk_ids, topk_weights) -> torch.Tensor:
    """torch._grouped_mm over expert-sorted pairs (the PyTorch-native MoE path).

    Note: torch._grouped_mm needs the group end-offsets as int32 on the device; on CUDA it
    requires sm90+ and 16-byte aligned strides (H, I multiples of 8)."""
    if not hasattr(torch, "_grouped_mm"):
        raise NotImplementedError(f"torch {torch.__version__} has no torch._grouped_mm")
    T, H = x.shape
    E, two_i, _ = w13.shape
    I = two_i // 2
    k = topk_ids.shape[1]
    flat = topk_ids.reshape(-1).to(torch.int64)
    order = torch.argsort(flat, stable=True)
    # scatter_add, not bincount (which syncs with the host): the baseline must be graph-capturable
    # to be timed the same way as the Triton kernel.
    counts = torch.zeros(E, dtype=torch.int64, device=x.device).scatter_add_(0, flat, torch.ones_like(flat))
    offs = torch.cumsum(counts, 0).to(torch.int32)
    xs = x[order // k]  # [T*k, H], expert-contiguous
    gu = torch._grouped_mm(xs, w13.transpose(1, 2), offs=offs)  # [T*k, 2I]
    h = (torch.nn.functional.silu(gu[:, :I].float()) * gu[:, I:].float()).to(x.dtype)
    y = torch._grouped_mm(h, w2.transpose(1, 2), offs=offs).float()  # [T*k, H]
    y = y * topk_weights.reshape(-1)[order].float()[:, None]
    out = torch.zeros((T, H), dtype=torch.float32, device=x.device)
    out.index_add_(0, order // k, y)
    return out.to(x.dtype)


def default_configs(T: int, k: int, E: int, H: int, I: int, num_sms: int = 132):
    """(block_m, gate_up MoEGemmConfig, down MoEGemmConfig) used when none is given."""
    return default_moe_configs(T, k, E, H, I, int4=False, num_sms=num_sms)


def fused_moe_bf16(
    x: torch.Tensor,
    w13: torch.Tensor,
    w2: torch.Tensor,
    topk_ids: torch.Tensor,
    topk_weights: torch.Tensor,
    *,
    block_m: int | None = None,
    gate_up_config: MoEGemmConfig | dict | None = None,
    down_config: MoEGemmConfig | dict | None = None,
) -> torch.Tensor:
    T, H = x.shape
    E, two_i, _ = w13.shape
    I = two_i // 2
    k = topk_ids.shape[1]
    bm, gu, dn = default_configs(T, k, E, H, I)
    weights = {"w13": w13, "w2": w2}

    def gemm(a, which, c, tw, routing, **kw):
        launch_moe_gemm(a, weights[which], c, tw, routing, **kw)

    return run_fused_moe(
        x, topk_ids, topk_weights, gemm, num_experts=E, inter=I, block_m=block_m or bm,
        gate_up_cfg=as_config(gate_up_config, gu), down_cfg=as_config(down_config, dn),
    )

def bytes_moved(topk_ids: torch.Tensor, E: int, H: int, I: int) -> float:
    T = topk_ids.shape[0]
    return num_distinct_experts(topk_ids) * 3.0 * H * I * 2 + activation_bytes(T, H)


def flops(T: int, k: int, H: int, I: int) -> float:
    return moe_flops(T, k, H, I)
