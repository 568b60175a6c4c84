"""Tree-verify attention vs (C sequences, q tree tokens, L prefix) with
perfmodel.kernels.tree_attention:
  * MLA (absorbed, latent 512 + rope 64): H = 8 heads (Kimi at TP8) and H = 64 (TP1) -> `attention_mla`
  * GQA: Qwen3-30B-A3B (32/4 heads, D=128) and Llama-3.1-8B (32/8, D=128) per GPU at TP1 -> `attention_gqa`
Tree masks are random ancestor-closed trees (a random parent for each node).
Bytes/FLOPs from the kernel module's own gqa/mla_bytes_moved and gqa/mla_flops."""

from __future__ import annotations

import math

from perfmodel.profile import KERNEL_SETS, BenchResult, attention_units, fit_key, wave_bytes

from .common import BenchContext, BenchOutput, make_sample, pct, randn
from .fits import fit_kernel_law, fit_unit_law, launcher_of
from .shapes import LLAMA3_8B, QWEN3_30B
from .timing import rotation_copies, time_fn


def random_tree_mask(C: int, Q: int, seed: int = 0, device: str = "cuda"):
    """[C, Q, Q] bool ancestor-or-self mask of random trees (node 0 is the root)."""
    import numpy as np
    import torch

    rng = np.random.default_rng(seed)
    m = np.zeros((C, Q, Q), dtype=bool)
    for c in range(C):
        parent = [-1] + [int(rng.integers(0, i)) for i in range(1, Q)]
        for i in range(Q):
            j = i
            while j >= 0:
                m[c, i, j] = True
                j = parent[j]
    return torch.from_numpy(m).to(device)


def _grid(quick: bool, big: bool):
    if quick:
        return [(C, q, L) for C in (1, 32) for q in (1, 17) for L in (1024, 8192)]
    Cs, qs, Ls = (1, 8, 32, 128), (1, 9, 17, 65), (1024, 4096, 8192, 32768)
    if not big:  # secondary shapes: a sparser grid
        Cs, qs, Ls = (1, 8, 32, 128), (1, 17, 65), (1024, 8192, 32768)
    return [(C, q, L) for C in Cs for q in qs for L in Ls]


MAX_KV_BYTES = 12e9  # keep one config's cache under this
GQA_SHAPES = {
    "gqa_qwen3_30b": dict(Hq=QWEN3_30B["n_heads"], Hkv=QWEN3_30B["n_kv_heads"], D=QWEN3_30B["head_dim"]),
    "gqa_llama3_8b": dict(Hq=LLAMA3_8B["n_heads"], Hkv=LLAMA3_8B["n_kv_heads"], D=LLAMA3_8B["head_dim"]),
}
SDPA = KERNEL_SETS["torch"]["attention"]


def _sdpa_grid(quick: bool):
    """The kernel set "torch" (SDPA): decode (q = 1) and chain verification (q = 4, 16), on a grid
    of its own (C and L between the points a decode stack usually runs at)."""
    if quick:
        return [(C, q, L) for C in (1, 16) for q in (1, 4) for L in (512, 16384)]
    return [(C, q, L) for C in (1, 4, 16, 64) for q in (1, 4, 16) for L in (512, 2048, 16384)]


def _sdpa(ctx, read, tk, copies, notes) -> list:
    """GQA attention through `F.scaled_dot_product_attention` (measure/ops.py `sdpa_attend`, as
    the torch-only decode stack calls it), provider "torch.sdpa"."""
    import torch

    from perfmodel.kernels import tree_attention as ta

    from .ops import sdpa_attend, verify_mask

    out = []
    for name, hp in GQA_SHAPES.items():
        ctx.settle_clock(f"attention sdpa {name}")
        Hq, Hkv, D = hp["Hq"], hp["Hkv"], hp["D"]
        for C, q, L in _sdpa_grid(ctx.quick):
            if ctx.over_budget():
                notes.append(f"{name} sdpa stopped (time budget)")
                return out
            S = L + q
            if 2 * C * S * Hkv * D * 2 > MAX_KV_BYTES:
                continue
            qq, m = randn(C, q, Hq, D), verify_mask(q, L, "cuda")
            kvs = [(randn(C, Hkv, S, D), randn(C, Hkv, S, D)) for _ in range(copies(2 * C * S * Hkv * D * 2))]
            t = time_fn(lambda k, v, qq=qq, m=m: sdpa_attend(qq, k, v, m), args_list=kvs, calls_per_graph=len(kvs), **tk)
            s = make_sample({"shape": name, "kind": "gqa", "C": C, "q": q, "L": L, **hp}, t,
                            nbytes=ta.gqa_bytes_moved(C, q, L, Hq, Hkv, D), nflops=ta.gqa_flops(C, q, L, Hq, D), provider=SDPA)
            s.pct_read_bw = pct(s.achieved_GBps, read)
            out.append(s)
            del kvs
        torch.cuda.empty_cache()
    return out


def run(ctx: BenchContext) -> BenchOutput:
    import torch

    from perfmodel.kernels import tree_attention as ta

    read = ctx.ceilings.read_GBps
    samples, notes = [], []
    # Graph-captured calls rotating over KV-cache copies (> 2x L2 in total, memory allowing):
    # a cold cache and no launch overhead, as in a decode graph.
    tk = dict(max_samples=12, max_seconds=0.05, graph=True, cold_l2="rotate")

    def _copies(kv_bytes: float) -> int:
        return max(1, min(rotation_copies(kv_bytes, max_copies=16), int(MAX_KV_BYTES // max(kv_bytes, 1))))
    masks: dict[tuple[int, int], torch.Tensor] = {}

    def mask(C, q):
        if (C, q) not in masks:
            masks[(C, q)] = random_tree_mask(C, q, seed=C * 1000 + q)
        return masks[(C, q)]

    cases = [
        ("mla_h8", "mla", dict(H=8), True, 0.35),
        ("mla_h64", "mla", dict(H=64), False, 0.46),
        ("gqa_qwen3_30b", "gqa", GQA_SHAPES["gqa_qwen3_30b"], True, 0.65),
        ("gqa_llama3_8b", "gqa", GQA_SHAPES["gqa_llama3_8b"], False, 0.77),
    ]
    for name, kind, hp, big, share in cases:
        ctx.settle_clock(f"attention {name}")  # C ascends: the decode points come first, after heavy work
        for C, q, L in _grid(ctx.quick, big):
            if ctx.over_budget(share):
                notes.append(f"{name} stopped (time budget)")
                break
            S = L + q
            if kind == "mla":
                H = hp["H"]
                if C * S * 576 * 2 > MAX_KV_BYTES:
                    continue
                ql, qr = randn(C, q, H, 512), randn(C, q, H, 64)
                n = _copies(C * S * 576 * 2)
                kvs = [(randn(C, S, 512), randn(C, S, 64)) for _ in range(n)]
                sm = 1.0 / math.sqrt(128 + 64)
                fn = lambda ckv, kpe: ta.tree_attention_mla(ql, qr, ckv, kpe, mask(C, q), sm)  # noqa: E731
                nb, nf = ta.mla_bytes_moved(C, q, L, H), ta.mla_flops(C, q, L, H)
            else:
                Hq, Hkv, D = hp["Hq"], hp["Hkv"], hp["D"]
                if 2 * C * S * Hkv * D * 2 > MAX_KV_BYTES:
                    continue
                qq = randn(C, q, Hq, D)
                n = _copies(2 * C * S * Hkv * D * 2)
                kvs = [(randn(C, S, Hkv, D), randn(C, S, Hkv, D)) for _ in range(n)]
                fn = lambda k, v: ta.tree_attention_gqa(qq, k, v, mask(C, q))  # noqa: E731
                nb, nf = ta.gqa_bytes_moved(C, q, L, Hq, Hkv, D), ta.gqa_flops(C, q, L, Hq, D)
            mask(C, q)
            t = time_fn(fn, args_list=kvs, calls_per_graph=len(kvs), **tk)
            s = make_sample({"shape": name, "kind": kind, "C": C, "q": q, "L": L, **hp}, t, nbytes=nb, nflops=nf, provider="triton")
            s.pct_read_bw = pct(s.achieved_GBps, read)
            samples.append(s)
            fn = None
            if kind == "mla":
                del ql, qr, kvs
            else:
                del qq, kvs
        torch.cuda.empty_cache()

    samples += _sdpa(ctx, read, tk, _copies, notes)
    fits = fit_attention(samples, ctx.ceilings, ctx.source, torch.cuda.get_device_properties(0).multi_processor_count)
    return BenchOutput(BenchResult(status="ok", samples=samples, note="; ".join(dict.fromkeys(notes))), fits=fits)


def fit_attention(samples, ceilings, source: str, sm_count: int | None = None) -> dict:
    """Laws `attention_mla` / `attention_gqa` on the bytes of one read of the KV prefix, with
    a compute roof for the many-row points (trees x heads beyond one row tile).

    The kernel reads the prefix once per row tile, but those re-reads do not cost HBM time:
    at a fixed (q, H, L) the time per sequence is the same whether the sequences' caches fit
    in the 50 MB L2 (C = 1) or not (C = 128): 201 vs 200 us at q=65, H=8, L=32768 (38 MB per
    sequence) in an H200 profile (evidence/attention-law-bytes/). The row tiles' extra cost is SM work, so it is carried to
    other GPUs by the FLOPS ratio, not the bandwidth ratio. (Older profiles counted the
    re-reads in the bytes; `KernelFit.rows_per_kv_pass` marks them.)
    The kernel set "torch" (SDPA, GQA only) gets two laws, `attention_gqa@torch` (q = 1, the
    unmasked decode backend) and `attention_gqa.verify@torch` (q > 1, the masked backend). The
    masked backend does not split a sequence's prefix: one CTA per (sequence, KV head, row
    tile) walks all of it, so with few sequences and heads most SMs idle and the time follows
    the prefix length, not the bytes (1 or 8 sequences, 8 or 4 KV heads: the same time). Its
    law gets a per-unit rate (`fit_unit_law`) over the waves of units on `sm_count` SMs."""
    fits = {}
    cases = [(cls, lambda s, k=kind: s.shape["kind"] == k and s.provider != SDPA)
             for cls, kind in (("attention_mla", "mla"), ("attention_gqa", "gqa"))]
    cases += [(fit_key("attention_gqa", "torch"), lambda s: s.provider == SDPA and s.shape["q"] == 1),
              (fit_key("attention_gqa.verify", "torch"), lambda s: s.provider == SDPA and s.shape["q"] > 1)]
    for cls, keep in cases:
        pts = [s for s in samples if keep(s)]
        if len(pts) < 3:
            continue
        args = ([s.bytes for s in pts], [s.flops for s in pts])
        kw = dict(bench="attention", source=source, default_bw_GBps=ceilings.read_GBps,
                  default_tflops=ceilings.bf16_TFLOPS, launcher=launcher_of(pts))
        t = [s.median_ms * 1e3 for s in pts]
        if cls.startswith("attention_gqa.verify@") and sm_count:
            waves = [wave_bytes(s.bytes, attention_units(s.shape["C"], s.shape["q"], s.shape["Hq"], s.shape["Hkv"]),
                                sm_count) for s in pts]
            fits[cls] = fit_unit_law(*args, waves, t, **kw)
        else:
            fits[cls] = fit_kernel_law(*args, t, **kw)
    return fits
