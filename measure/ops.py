"""The small torch ops shared by the elementwise bench and the e2e stack, so the two time
the same implementation. Each is what one decode op costs in plain torch; the kernel count
per op is recorded in the bench notes (the model prices an op as one elementwise call)."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def rmsnorm(x: torch.Tensor, w: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    # torch's fused rms_norm (one kernel on CUDA in recent torch)
    return F.rms_norm(x, (x.shape[-1],), w, eps)


def silu_mul(gu: torch.Tensor) -> torch.Tensor:
    g, u = gu.chunk(2, dim=-1)
    return F.silu(g) * u


def residual_add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    # out of place, as a graph-captured step must not grow its static input across replays
    return x + y


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate-half RoPE on the last dim of x [..., 64] with cos/sin broadcastable [..., 32]."""
    x1, x2 = x[..., ::2], x[..., 1::2]
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)


def router_topk(logits: torch.Tensor, k: int):
    """Sigmoid scores, top-k, renormalised (Kimi/DeepSeek noaux_tc with n_group=1)."""
    s = logits.float().sigmoid()
    w, ids = s.topk(k, dim=-1)
    return ids, w / w.sum(-1, keepdim=True)


def argmax_sample(logits: torch.Tensor) -> torch.Tensor:
    return logits.argmax(dim=-1)
