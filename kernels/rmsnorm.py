"""RMSNorm, optionally fused with the residual add before it (one row per program).

    rmsnorm(x, w)          -> x * rsqrt(mean(x^2) + eps) * w
    add_rmsnorm(x, r, w)   -> (rmsnorm(x + r, w), x + r)

The fused form is what serving engines run between sublayers (vLLM's fused_add_rms_norm,
FlashInfer's fused_add_rmsnorm): one read of x and r, one write of the sum and the
normalised row, instead of an add kernel and a norm kernel. Out of place: a CUDA-graph
replayed step must not grow its static input. Statistics in fp32; outputs in x's dtype.

Bytes (2-byte dtype): rmsnorm 2*T*H*2 + H*2; add_rmsnorm 4*T*H*2 + H*2.
"""
from __future__ import annotations

import torch

from ._launch import FastLauncher

__all__ = ["rmsnorm", "add_rmsnorm", "rmsnorm_reference", "add_rmsnorm_reference"]


def rmsnorm_reference(x: torch.Tensor, w: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)


def add_rmsnorm_reference(x, r, w, eps: float = 1e-6):
    s = (x.float() + r.float()).to(x.dtype)  # the residual stream is stored in x's dtype
    return rmsnorm_reference(s, w, eps), s


_KERNEL = None


def _kernel():
    global _KERNEL
    if _KERNEL is None:
        import triton
        import triton.language as tl

        @triton.jit
        def _rmsnorm_kernel(x_ptr, r_ptr, w_ptr, out_ptr, sum_ptr, H, stride_x, stride_r, stride_o, stride_s, eps,
                            ADD: tl.constexpr, BLOCK: tl.constexpr):
            row = tl.program_id(0).to(tl.int64)
            offs = tl.arange(0, BLOCK)
            ok = offs < H
            x = tl.load(x_ptr + row * stride_x + offs, mask=ok, other=0.0)
            if ADD:
                x = (x.to(tl.float32) + tl.load(r_ptr + row * stride_r + offs, mask=ok, other=0.0).to(tl.float32))
                x = x.to(sum_ptr.dtype.element_ty)
                tl.store(sum_ptr + row * stride_s + offs, x, mask=ok)
            xf = x.to(tl.float32)
            inv = tl.rsqrt(tl.sum(xf * xf, axis=0) / H + eps)
            w = tl.load(w_ptr + offs, mask=ok, other=0.0).to(tl.float32)
            tl.store(out_ptr + row * stride_o + offs, (xf * inv * w).to(out_ptr.dtype.element_ty), mask=ok)

        _KERNEL = FastLauncher(_rmsnorm_kernel)
    return _KERNEL


def _run(x, r, w, eps):
    import triton

    H = x.shape[-1]
    rows = x.reshape(-1, H)
    if rows.stride(-1) != 1:
        rows = rows.contiguous()
    rr = None
    if r is not None:
        rr = r.reshape(-1, H)
        if rr.stride(-1) != 1:
            rr = rr.contiguous()
    out = torch.empty(rows.shape, dtype=x.dtype, device=x.device)
    s = torch.empty(rows.shape, dtype=x.dtype, device=x.device) if r is not None else out
    block = triton.next_power_of_2(H)
    _kernel()[(rows.shape[0],)](
        rows, rr if rr is not None else rows, w, out, s, H, rows.stride(0),
        rr.stride(0) if rr is not None else 0, out.stride(0), s.stride(0), eps,
        ADD=r is not None, BLOCK=block, num_warps=max(1, min(16, block // 512)),
    )
    return out.reshape(x.shape), s.reshape(x.shape)


def rmsnorm(x: torch.Tensor, w: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    return _run(x, None, w, eps)[0]


def add_rmsnorm(x: torch.Tensor, r: torch.Tensor, w: torch.Tensor, eps: float = 1e-6):
    """(rmsnorm(x + r, w), x + r) in one pass."""
    return _run(x, r, w, eps)


def bytes_moved(T: int, H: int, fused_add: bool, elem_bytes: int = 2) -> float:
    return (4 if fused_add else 2) * T * H * elem_bytes + H * elem_bytes
