"""The small ops shared by the elementwise bench and the e2e stack, so the two time the same
implementation: RMSNorm (plain and fused with the residual add), RoPE and the router top-k
are one Triton kernel each (perfmodel.kernels, as engines fuse them); SiLU*mul, the plain
residual add and the vocab argmax are torch ops. The model prices each as one call.

The `torch_*` ops and `sdpa_attend` are the same steps as an engine built on PyTorch's own ops
runs them (the kernel set "torch", `perfmodel.profile.KERNEL_SETS`): the elementwise and
attention benches time them beside perfmodel's kernels, and the torch-only decode stack
(`foreign.py`) is built from them."""

from __future__ import annotations

import warnings

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


# ------------------------------------------------------------------ prefill attention
# The SDPA backends the prefill bench times (torch.nn.attention.SDPBackend member names).
SDPA_BACKENDS = {"flash": "FLASH_ATTENTION", "cudnn": "CUDNN_ATTENTION"}


def causal_attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, backend: str | None = None) -> torch.Tensor:
    """Causal attention of T new tokens after P = S - T cached ones, as an engine's prefill (or
    chunked-prefill) kernel runs it: new token i sees the whole prefix and new tokens 0..i
    (bottom-right aligned). q [N, hq, T, D]; k [N, hkv, S, D]; v [N, hkv, S, Dv] -> [N, hq, T, Dv];
    GQA natively (`enable_gqa`, no KV heads expanded). `backend` ("flash", "cudnn") restricts SDPA
    to one backend; None leaves SDPA its choice.

    Without a prefix (S = T) this is SDPA's `is_causal`. With one, `is_causal` is top-left aligned
    in SDPA's math and flash paths, so the flash path takes the lower-right causal bias
    (`torch.nn.attention.bias.causal_lower_right`), which runs the flash kernel itself (its causal
    mask is bottom-right aligned) where it applies. cuDNN gets `is_causal`, whose alignment for
    S > T depends on the torch build: `causal_check` says whether a backend computes this function
    at given head shapes, and the prefill bench times only those that do."""
    from contextlib import nullcontext

    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.attention.bias import causal_lower_right

    T, S = q.shape[2], k.shape[2]
    gqa = q.shape[1] != k.shape[1]
    bias = causal_lower_right(T, S) if S != T and backend != "cudnn" else None
    with sdpa_kernel([getattr(SDPBackend, SDPA_BACKENDS[backend])]) if backend else nullcontext():
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, is_causal=bias is None, enable_gqa=gqa)


def causal_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """`causal_attend` in fp32 with the mask written out and the KV heads expanded."""
    T, S = q.shape[2], k.shape[2]
    g = q.shape[1] // k.shape[1]
    qf, kf, vf = q.float(), k.float().repeat_interleave(g, dim=1), v.float().repeat_interleave(g, dim=1)
    s = (qf @ kf.transpose(-1, -2)) / q.shape[-1] ** 0.5
    s = s.masked_fill(~torch.ones(T, S, dtype=torch.bool, device=q.device).tril(diagonal=S - T), float("-inf"))
    return torch.softmax(s, dim=-1) @ vf


def _flash_runs(q, k, v) -> bool:
    """Whether the flash kernel accepts these inputs (the lower-right causal bias runs it only then,
    else the memory-efficient kernel or a written-out mask)."""
    from torch.backends.cuda import SDPAParams, can_use_flash_attention

    return bool(can_use_flash_attention(SDPAParams(q, k, v, None, 0.0, False, q.shape[1] != k.shape[1])))


def causal_check(backend: str | None, hq: int, hkv: int, D: int, Dv: int, P: int, *, N: int = 1, T: int = 64,
                 device: str = "cuda", dtype=torch.bfloat16) -> str | None:
    """None if `causal_attend(..., backend)` computes bottom-right causal attention at these head
    shapes, with (P > 0) or without a cached prefix, within bf16 rounding of the fp32 reference
    (and, for flash with a prefix on a GPU, through the flash kernel); else the reason, one line."""
    g = torch.Generator(device=device).manual_seed(hq * 1000 + D + P)
    S = P + T
    q, k, v = (torch.randn(N, h, n, d, device=device, generator=g).to(dtype)
               for h, n, d in ((hq, T, D), (hkv, S, D), (hkv, S, Dv)))
    try:
        with warnings.catch_warnings():  # a backend's refusal warns before it raises: the reason returned says it
            warnings.simplefilter("ignore")
            out = causal_attend(q, k, v, backend)
    except RuntimeError as e:
        return f"{type(e).__name__}: {str(e).strip().splitlines()[0][:120] if str(e).strip() else ''}"
    ref = causal_reference(q, k, v)
    err = float((out.float() - ref).norm() / ref.norm())
    if not err < 2e-2:  # bf16 operands: ~4e-3; top-left alignment or a wrong head mapping: O(1)
        return f"differs from bottom-right causal attention (relative error {err:.1e})"
    if backend == "flash" and P and q.is_cuda:
        try:
            runs = _flash_runs(q, k, v)
        except Exception as e:  # noqa: BLE001 - this torch cannot say: the points would be of an unknown kernel
            return f"cannot tell whether the flash kernel runs ({type(e).__name__})"
        if not runs:
            return "the lower-right causal bias would not run the flash kernel at these shapes"
    return None
