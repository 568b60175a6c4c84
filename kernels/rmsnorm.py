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

from ._launch import FastLauncher, next_pow2

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


_KW: dict = {}  # (H, add) -> the launch's constexprs and options


def _launch_kw(H: int, add: bool) -> dict:
    kw = _KW.get((H, add))
    if kw is None:
        block = next_pow2(H)
        kw = _KW[(H, add)] = dict(ADD=add, BLOCK=block, num_warps=max(1, min(16, block // 512)))
    return kw


def _run(x, r, w, eps, out=None):
    H = x.shape[-1]
    add = r is not None
    if out is not None and (out.shape != x.shape or out.dtype != x.dtype or not out.is_contiguous()):
        raise ValueError(f"out: {tuple(out.shape)} {out.dtype} (contiguous: {out.is_contiguous()}) "
                         f"must be a contiguous {tuple(x.shape)} {x.dtype} tensor")
    if x.is_contiguous() and w.is_contiguous() and (not add or r.is_contiguous() and r.shape == x.shape):
        # the eager fast path: no reshapes (every row stride is H), one allocation per output,
        # and the compiled kernel's C launcher called at once (kernels/_launch.py launch_direct;
        # launch_keyed compiles and caches it under the same key on the first call)
        out = torch.empty_like(x) if out is None else out
        s = torch.empty_like(x) if add else out
        px, pw, po, ps = x.data_ptr(), w.data_ptr(), out.data_ptr(), s.data_ptr()
        pr = r.data_ptr() if add else px
        if not (px | pw | po | ps | pr) & 15:
            kl = _KERNEL or _kernel()
            sr = H if add else 0
            key = (x.dtype, w.dtype, r.dtype if add else None, H, x.is_cuda and w.is_cuda)
            ptrs = (px, pr, pw, po, ps, H, H, sr, H, H, eps)
            rows = x.numel() // H
            if not kl.launch_direct(key, (rows, 1, 1), ptrs):
                kl.launch_keyed(key, (rows,), (x, r if add else x, w, out, s, H, H, sr, H, H, eps), ptrs,
                                _launch_kw(H, add))
            return out, s
    rows = x.reshape(-1, H)
    if rows.stride(-1) != 1:
        rows = rows.contiguous()
    rr = None
    if add:
        rr = r.reshape(-1, H)
        if rr.stride(-1) != 1:
            rr = rr.contiguous()
    o = torch.empty(rows.shape, dtype=x.dtype, device=x.device)
    s = torch.empty(rows.shape, dtype=x.dtype, device=x.device) if add else o
    _kernel()[(rows.shape[0],)](
        rows, rr if rr is not None else rows, w, o, s, H, rows.stride(0),
        rr.stride(0) if rr is not None else 0, o.stride(0), s.stride(0), eps, **_launch_kw(H, add),
    )
    if out is not None:
        out.copy_(o.reshape(x.shape))
        return out, s.reshape(x.shape)
    return o.reshape(x.shape), s.reshape(x.shape)


def rmsnorm(x: torch.Tensor, w: torch.Tensor, eps: float = 1e-6, *, out: torch.Tensor | None = None) -> torch.Tensor:
    """`out`: a caller-provided output (contiguous, x's shape and dtype), as engines' RMSNorm
    ops take one (vLLM's rms_norm(out, x, w, eps)); saves the allocation of an eager call."""
    return _run(x, None, w, eps, out)[0]


def add_rmsnorm(x: torch.Tensor, r: torch.Tensor, w: torch.Tensor, eps: float = 1e-6):
    """(rmsnorm(x + r, w), x + r) in one pass."""
    return _run(x, r, w, eps)


def bytes_moved(T: int, H: int, fused_add: bool, elem_bytes: int = 2) -> float:
    return (4 if fused_add else 2) * T * H * elem_bytes + H * elem_bytes
