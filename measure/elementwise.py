"""Elementwise and small ops vs tokens: RMSNorm, SiLU*mul, residual add, router top-k,
argmax over the vocab (Kimi shapes) -> fit `elementwise` (mostly its latency floor t0).
Timed graph-captured (GPU time per op without launch gaps; the launch cost is `dispatch`)."""

from __future__ import annotations

from perfmodel.profile import BenchResult

from .common import BenchContext, BenchOutput, make_sample, randn
from .fits import fit_kernel_law
from .ops import argmax_sample, residual_add, rmsnorm, router_topk, silu_mul
from .shapes import KIMI
from .timing import time_fn


def run(ctx: BenchContext) -> BenchOutput:
    H, V, E, k, I = KIMI["hidden"], KIMI["vocab"], KIMI["n_experts"], KIMI["top_k"], KIMI["shared_inter"]
    Ts = [1, 8, 64, 512, 4096] if not ctx.quick else [1, 64, 4096]
    samples = []
    for T in Ts:
        if ctx.over_budget():
            break
        x, y, w = randn(T, H), randn(T, H), randn(H)
        gu = randn(T, 2 * I)
        logits_r = randn(T, E)
        logits_v = randn(T, V // 8)  # lm_head output of one GPU at TP8
        cases = [
            ("rmsnorm", lambda: rmsnorm(x, w), 2.0 * (2 * T * H + H), 4.0 * T * H),
            ("silu_mul", lambda: silu_mul(gu), 2.0 * (2 * T * I + T * I), 5.0 * T * I),
            ("residual_add", lambda: residual_add(x, y), 2.0 * 3 * T * H, 1.0 * T * H),
            ("router_topk", lambda: router_topk(logits_r, k), 2.0 * T * E + 12.0 * T * k, 4.0 * T * E),
            ("argmax_vocab", lambda: argmax_sample(logits_v), 2.0 * T * (V // 8) + 8.0 * T, 1.0 * T * (V // 8)),
        ]
        for name, fn, nb, nf in cases:
            t = time_fn(fn, graph=True, calls_per_graph=20, max_samples=15, max_seconds=0.05)
            samples.append(make_sample({"op": name, "T": T, "H": H}, t, nbytes=nb, nflops=nf, provider="torch"))
    c = ctx.ceilings
    fit = fit_kernel_law(
        [s.bytes for s in samples], [s.flops for s in samples], [s.median_ms * 1e3 for s in samples],
        bench="elementwise", source=ctx.source, default_bw_GBps=c.read_GBps, default_tflops=c.bf16_TFLOPS,
    )
    return BenchOutput(
        BenchResult(status="ok", samples=samples, note="graph mode, 20 calls per replay (hot L2 after the first call); torch ops from perfmodel.measure.ops"),
        fits={"elementwise": fit},
    )
