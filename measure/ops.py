"""The small ops shared by the elementwise bench and the e2e stack, so the two time the same
implementation: RMSNorm (plain and fused with the residual add), RoPE and the router top-k
are one Triton kernel each (perfmodel.kernels, as engines fuse them); SiLU*mul, the plain
residual add and the vocab argmax are torch ops. The model prices each as one call.

The `torch_*` ops and `sdpa_attend` are the same steps as an engine built on PyTorch's own ops
runs them (the kernel set "torch", `perfmodel.profile.KERNEL_SETS`): the elementwise and
attention benches time them beside perfmodel's kernels, and the torch-only decode stack
(`foreign.py`) is built from them."""

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


# ------------------------------------------------------------------ kernel set "torch"
def torch_rmsnorm(x: torch.Tensor, w: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    return F.rms_norm(x, (x.shape[-1],), w, eps)


def torch_add_rmsnorm(x: torch.Tensor, r: torch.Tensor, w: torch.Tensor, eps: float = 1e-6):
    s = x + r
    return F.rms_norm(s, (s.shape[-1],), w, eps), s


def torch_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate-half RoPE as plain tensor arithmetic; cos/sin at the full rotary width."""
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


def torch_router_topk(logits: torch.Tensor, k: int):
    """Softmax scores, top-k, renormalised (Qwen3/Mixtral routing)."""
    wts, ids = torch.topk(F.softmax(logits.float(), dim=-1), k, dim=-1)
    return (wts / wts.sum(-1, keepdim=True)).to(logits.dtype), ids


def verify_mask(q: int, L: int, device: str = "cpu"):
    """q new tokens against the L-token prefix and causally among themselves (bottom-right
    aligned); None for q = 1 (no mask: SDPA's unmasked decode path)."""
    return torch.ones(q, L + q, device=device, dtype=torch.bool).tril(diagonal=L) if q > 1 else None


def sdpa_attend(qh: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask) -> torch.Tensor:
    """GQA attention through `F.scaled_dot_product_attention`. qh [C, q, hq, D]; k, v
    [C, hkv, S, D]; mask None (q = 1) or [q, S] bool. Decode (no mask): SDPA's GQA-native path
    (`enable_gqa`, the flash backend). Verification (a mask): each KV head's query group folded
    into the query rows ([C, hkv, q*g, D] against [C, hkv, S, D]), since the masked backends
    would otherwise expand the KV heads; the mask repeats per group row. An engine's decode and
    verify kernels differ like this too. Returns [C*q, hq*D]."""
    C, q, hq, D = qh.shape
    hkv = k.shape[1]
    if mask is None:
        a = F.scaled_dot_product_attention(qh.transpose(1, 2), k, v, enable_gqa=hq != hkv)
        return a.transpose(1, 2).reshape(C * q, hq * D)
    g = hq // hkv
    qf = qh.view(C, q, hkv, g, D).permute(0, 2, 1, 3, 4).reshape(C, hkv, q * g, D)
    a = F.scaled_dot_product_attention(qf, k, v, attn_mask=mask.repeat_interleave(g, dim=0))
    return a.view(C, hkv, q, g, D).permute(0, 2, 1, 3, 4).reshape(C * q, hq * D)
