"""Fused MoE vs routed tokens T (uniform random top-k routing):
  * W4A16 (perfmodel.kernels.moe_w4a16) on Kimi K2.6 shapes (H=7168, E=384, k=8; I=2048 full
    and I=256, the TP8 shard) and Qwen3-30B-A3B (H=2048, I=768, E=128, k=8) -> fit `moe_w4a16`;
  * bf16 (perfmodel.kernels.moe_bf16.fused_moe_bf16) and the torch._grouped_mm baseline on
    the Qwen3 shape and the Kimi TP8 shard -> fit `moe_bf16` (Triton kernel only; the
    baseline is recorded as provider "torch._grouped_mm").
Weights are random packed nibbles with random scales (no quantization pass needed to time).
Each sample records tokens per touched expert and % of the measured read bandwidth."""

from __future__ import annotations

from perfmodel.profile import KERNEL_SETS, BenchResult, fit_key

from .common import BenchContext, BenchOutput, log_spaced, make_sample, pct, randn, uniform_topk
from .fits import fit_kernel_law, launcher_of
from .shapes import KIMI, QWEN3_30B
from .timing import time_fn


def _shapes():
    k = KIMI
    return [
        ("kimi_I2048", k["hidden"], k["moe_inter"], k["n_experts"], k["top_k"]),
        ("kimi_tp8_I256", k["hidden"], k["moe_inter"] // 8, k["n_experts"], k["top_k"]),
        ("qwen3_30b_a3b", QWEN3_30B["hidden"], QWEN3_30B["moe_inter"], QWEN3_30B["n_experts"], QWEN3_30B["top_k"]),
    ]


def run(ctx: BenchContext) -> BenchOutput:
    import torch

    from perfmodel.kernels import moe_bf16, moe_w4a16

    Ts = log_spaced(1, 4096, 13) if not ctx.quick else [1, 8, 64, 512, 4096]
    read = ctx.ceilings.read_GBps
    samples, notes = [], []
    # Graph-captured calls, each with its own random routing (so a call's experts are not left
    # in L2 by the previous one): cold weights and no launch overhead, as in a decode graph.
    tk = dict(max_samples=12, max_seconds=0.08, graph=True, cold_l2="rotate")
    N_ROUTES = 8

    def one(provider, fn, name, T, E, k, H, I, ids, wts, nb, nf):
        routes = [(ids, wts)] + [uniform_topk(T, E, k) for _ in range(N_ROUTES - 1)]
        try:
            t = time_fn(fn, args_list=routes, calls_per_graph=N_ROUTES, **tk)
        except RuntimeError as e:  # e.g. a baseline that syncs with the host cannot be captured
            torch.cuda.synchronize()
            notes.append(f"{provider} timed eager (graph capture failed: {str(e).splitlines()[0][:80]})")
            t = time_fn(fn, args_list=routes, max_samples=12, max_seconds=0.08)
        distinct = int(torch.unique(ids).numel())
        s = make_sample(
            {"shape": name, "T": T, "E": E, "k": k, "H": H, "I": I}, t, nbytes=nb, nflops=nf, provider=provider,
            distinct_experts=distinct, tokens_per_expert=T * k / max(distinct, 1),
        )
        s.pct_read_bw = pct(s.achieved_GBps, read)
        samples.append(s)

    budget_w4 = 0.7  # share of the bench budget for the W4A16 sweeps
    for name, H, I, E, k in _shapes():
        if ctx.over_budget(budget_w4):
            notes.append(f"w4a16 {name} skipped (time budget)")
            continue
        w13, s13 = moe_w4a16.random_kernel_weights(E, 2 * I, H)
        w2, s2 = moe_w4a16.random_kernel_weights(E, H, I)
        ctx.settle_clock(f"moe w4a16 {name}")  # T ascends: the decode points come first, after heavy work
        for T in Ts:
            if I >= 2048 and T > 1024:  # the full-size expert is compute-bound long before; spend the time on the shard shapes
                continue
            if ctx.over_budget(budget_w4):
                notes.append(f"w4a16 {name} stopped at T<{T}")
                break
            x = randn(T, H)
            ids, wts = uniform_topk(T, E, k)
            one("triton_w4a16", lambda i, w: moe_w4a16.fused_moe_w4a16(x, w13, s13, w2, s2, i, w), name, T, E, k, H, I, ids, wts,
                moe_w4a16.bytes_moved(ids, E, H, I), moe_w4a16.flops(T, k, H, I))
        del w13, s13, w2, s2
        torch.cuda.empty_cache()

    for name, H, I, E, k in _shapes()[1:]:
        if ctx.over_budget():
            notes.append(f"bf16 {name} skipped (time budget)")
            continue
        w13, w2 = randn(E, 2 * I, H, scale=0.02), randn(E, H, I, scale=0.02)
        grouped_ok = True
        ctx.settle_clock(f"moe bf16 {name}")
        for T in Ts:
            if ctx.over_budget():
                notes.append(f"bf16 {name} stopped at T<{T}")
                break
            x = randn(T, H)
            ids, wts = uniform_topk(T, E, k)
            nb, nf = moe_bf16.bytes_moved(ids, E, H, I), moe_bf16.flops(T, k, H, I)
            one("triton_bf16", lambda i, w: moe_bf16.fused_moe_bf16(x, w13, w2, i, w), name, T, E, k, H, I, ids, wts, nb, nf)
            if grouped_ok:
                try:
                    one("torch._grouped_mm", lambda i, w: moe_bf16.grouped_mm_moe_torch(x, w13, w2, i, w), name, T, E, k, H, I, ids, wts, nb, nf)
                except (NotImplementedError, RuntimeError) as e:
                    grouped_ok = False
                    notes.append(f"grouped_mm baseline unavailable: {type(e).__name__}: {str(e).splitlines()[0][:100] if str(e) else ''}")
        del w13, w2
        torch.cuda.empty_cache()

    fits = fit_moe(samples, ctx.ceilings, ctx.source)
    return BenchOutput(BenchResult(status="ok", samples=samples, note="; ".join(dict.fromkeys(notes))), fits=fits)


def fit_moe(samples, ceilings, source: str) -> dict:
    """`moe_w4a16` and `moe_bf16` from perfmodel's kernels; `moe_bf16@torch` from the
    torch._grouped_mm baseline (the kernel set "torch")."""
    fits = {}
    for cls, prov in (("moe_w4a16", "triton_w4a16"), ("moe_bf16", "triton_bf16"),
                      (fit_key("moe_bf16", "torch"), KERNEL_SETS["torch"]["moe"])):
        pts = [s for s in samples if s.provider == prov]
        if len(pts) >= 3:
            fits[cls] = fit_kernel_law(
                [s.bytes for s in pts], [s.flops for s in pts], [s.median_ms * 1e3 for s in pts],
                bench="moe", source=source, default_bw_GBps=ceilings.read_GBps, default_tflops=ceilings.bf16_TFLOPS,
                launcher=launcher_of(pts),
            )
    return fits
