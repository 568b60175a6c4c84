"""MoE router: sigmoid scores, top-k, renormalised weights (Kimi K2 / DeepSeek-V3 noaux_tc
with one group and no correction bias), one token row per program: k rounds of
arg-max-and-mask over the E scores held in registers. Returns ids int32 [T, k] (descending
score) and weights fp32 [T, k] summing to 1. Bytes: logits in (T*E*2) + ids and weights
out (T*k*8)."""
from __future__ import annotations

import torch

from ._launch import FastLauncher, next_pow2

__all__ = ["router_topk", "router_topk_reference"]


def router_topk_reference(logits: torch.Tensor, k: int):
    s = logits.float().sigmoid()
    w, ids = s.topk(k, dim=-1)
    return ids.to(torch.int32), w / w.sum(-1, keepdim=True)


_KERNEL = None


def _kernel():
    global _KERNEL
    if _KERNEL is None:
        import triton
        import triton.language as tl

        @triton.jit
        def _router_kernel(logits_ptr, ids_ptr, w_ptr, E, stride_l, K: tl.constexpr, BLOCK_K: tl.constexpr,
                           BLOCK_E: tl.constexpr):
            t = tl.program_id(0).to(tl.int64)
            offs = tl.arange(0, BLOCK_E)
            kk = tl.arange(0, BLOCK_K)
            x = tl.load(logits_ptr + t * stride_l + offs, mask=offs < E, other=float("-inf")).to(tl.float32)
            s = tl.where(offs < E, 1.0 / (1.0 + tl.exp(-x)), -1.0)  # sigmoid; padding below any score
            ids = tl.zeros((BLOCK_K,), tl.int32)
            w = tl.zeros((BLOCK_K,), tl.float32)
            for j in tl.static_range(K):
                best = tl.max(s, axis=0)
                idx = tl.min(tl.where(s == best, offs, BLOCK_E), axis=0)  # lowest index on ties
                ids = tl.where(kk == j, idx, ids)
                w = tl.where(kk == j, best, w)
                s = tl.where(offs == idx, -2.0, s)
            w = w / tl.sum(w, axis=0)
            tl.store(ids_ptr + t * K + kk, ids, mask=kk < K)
            tl.store(w_ptr + t * K + kk, w, mask=kk < K)

        _KERNEL = FastLauncher(_router_kernel)
    return _KERNEL


def router_topk(logits: torch.Tensor, k: int):
    T, E = logits.shape
    if logits.stride(-1) != 1:
        logits = logits.contiguous()
    ids = torch.empty((T, k), dtype=torch.int32, device=logits.device)
    w = torch.empty((T, k), dtype=torch.float32, device=logits.device)
    _kernel()[(T,)](logits, ids, w, E, logits.stride(0), K=k, BLOCK_K=next_pow2(k),
                    BLOCK_E=next_pow2(E),
                    num_warps=4 if E > 256 else 1)
    return ids, w
