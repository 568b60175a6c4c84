"""The small ops shared by the elementwise bench and the e2e stack, so the two time the same
implementation: RMSNorm (plain and fused with the residual add), RoPE and the router top-k
are one Triton kernel each (perfmodel.kernels, as engines fuse them); SiLU*mul, the plain
residual add and the vocab argmax are torch ops. The model prices each as one call."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def rmsnorm(x: torch.Tensor, w: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    from perfmodel.kernels.rmsnorm import rmsnorm as k

    return k(x, w, eps)


def add_rmsnorm(x: torch.Tensor, r: torch.Tensor, w: torch.Tensor, eps: float = 1e-6):
    """(rmsnorm(x + r), x + r): the residual add fused into the next sublayer's norm."""
    from perfmodel.kernels.rmsnorm import add_rmsnorm as k

    return k(x, r, w, eps)


def silu_mul(gu: torch.Tensor) -> torch.Tensor:
    g, u = gu.chunk(2, dim=-1)
    return F.silu(g) * u


def residual_add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    # out of place, as a graph-captured step must not grow its static input across replays
    return x + y


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoPE on the rotary part of q, x [..., heads, 64] with cos/sin [..., 1, 32] per token."""
    from perfmodel.kernels.rope import rope as k

    return k(x, cos, sin)


def router_topk(logits: torch.Tensor, k: int):
    """Sigmoid scores, top-k, renormalised (Kimi/DeepSeek noaux_tc with n_group=1)."""
    from perfmodel.kernels.router_topk import router_topk as kern

    return kern(logits, k)


def argmax_sample(logits: torch.Tensor) -> torch.Tensor:
    return logits.argmax(dim=-1)
