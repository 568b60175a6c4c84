"""RoPE on the rotary part of q (interleaved pairs in, rotate-half layout out, as DeepSeek/
Kimi MLA's q_pe): x [T, heads, 2d] (any token/head strides, unit last stride), cos/sin
[T, d] per token shared by all heads -> [T, heads, 2d] contiguous,
    out[..., i] = x[2i] cos_i - x[2i+1] sin_i,  out[..., d + i] = x[2i] sin_i + x[2i+1] cos_i.
One program per token, all heads at once. Bytes: read and write x, read cos and sin."""
from __future__ import annotations

import torch

from ._launch import FastLauncher, next_pow2

__all__ = ["rope", "rope_reference"]


def rope_reference(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [..., 2d], cos/sin broadcastable to [..., d]."""
    x1, x2 = x[..., ::2].float(), x[..., 1::2].float()
    c, s = cos.float(), sin.float()
    return torch.cat((x1 * c - x2 * s, x1 * s + x2 * c), dim=-1).to(x.dtype)


_KERNEL = None


def _kernel():
    global _KERNEL
    if _KERNEL is None:
        import triton
        import triton.language as tl

        @triton.jit
        def _rope_kernel(x_ptr, cos_ptr, sin_ptr, out_ptr, NH, stride_xt, stride_xh, stride_ct,
                         HALF: tl.constexpr, BLOCK_H: tl.constexpr):
            t = tl.program_id(0).to(tl.int64)
            h = tl.arange(0, BLOCK_H)
            i = tl.arange(0, HALF)
            ok = (h < NH)[:, None]
            base = x_ptr + t * stride_xt + h[:, None] * stride_xh + 2 * i[None, :]
            x1 = tl.load(base, mask=ok, other=0.0).to(tl.float32)
            x2 = tl.load(base + 1, mask=ok, other=0.0).to(tl.float32)
            c = tl.load(cos_ptr + t * stride_ct + i).to(tl.float32)[None, :]
            s = tl.load(sin_ptr + t * stride_ct + i).to(tl.float32)[None, :]
            o = out_ptr + t * NH * 2 * HALF + h[:, None] * 2 * HALF + i[None, :]
            tl.store(o, (x1 * c - x2 * s).to(out_ptr.dtype.element_ty), mask=ok)
            tl.store(o + HALF, (x1 * s + x2 * c).to(out_ptr.dtype.element_ty), mask=ok)

        _KERNEL = FastLauncher(_rope_kernel)
    return _KERNEL


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [*tok, heads, 2d] with cos/sin [*tok, (1,) d] (one row per token) -> same shape."""
    *tok, nh, two_d = x.shape
    half = two_d // 2
    T = 1
    for n in tok:
        T *= n
    xv = x.reshape(T, nh, two_d) if x.is_contiguous() else x.view(T, nh, two_d)
    assert xv.stride(-1) == 1, "the rotary dim must be contiguous"
    c = cos.reshape(T, half).contiguous()
    s = sin.reshape(T, half).contiguous()
    out = torch.empty((T, nh, two_d), dtype=x.dtype, device=x.device)
    _kernel()[(T,)](xv, c, s, out, nh, xv.stride(0), xv.stride(1), c.stride(0),
                    HALF=half, BLOCK_H=next_pow2(nh), num_warps=1 if nh * half <= 512 else 4)
    return out.reshape(x.shape)
