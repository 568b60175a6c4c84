"""Dense bf16 GEMM (F.linear, weight [N, K]) vs M = tokens, for Kimi K2.6's projection shapes
on one GPU at TP8 and TP1 -> fit `gemm_bf16`."""

from __future__ import annotations

from perfmodel.profile import BenchResult

from .common import BenchContext, BenchOutput, make_sample, randn
from .fits import fit_kernel_law
from .shapes import kimi_gemm_shapes
from .timing import rotation_copies, time_fn


def run(ctx: BenchContext) -> BenchOutput:
    import torch.nn.functional as F

    Ms = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096] if not ctx.quick else [1, 16, 128, 1024, 4096]
    shapes, seen = [], set()
    for tp in (8, 1):
        for name, N, K in kimi_gemm_shapes(tp):
            if (N, K) not in seen:
                seen.add((N, K))
                shapes.append((f"{name}_tp{tp}", N, K))
    samples, truncated = [], False
    for name, N, K in shapes:
        if ctx.over_budget():
            truncated = True
            break
        # Graph-captured calls rotating over weight copies (> 2x L2 in total): cold weights, no
        # launch overhead -- the situation of a decode step replayed from a CUDA graph.
        n_copies = rotation_copies(2.0 * N * K, max_copies=32)
        ws = [randn(N, K, scale=0.02) for _ in range(n_copies)]
        # M ascends: the decode points come first, right after the previous shape's largest M
        # (evidence/sm-clock-settle/: router_tp8 at M=1 timed at 1680 MHz after lm_head_tp8 at M=4096)
        ctx.settle_clock(f"gemm {name}")
        for M in Ms:
            x = randn(M, K)
            t = time_fn(lambda w: F.linear(x, w), args_list=[(w,) for w in ws], cold_l2="rotate", graph=True,
                        calls_per_graph=n_copies, max_samples=15, max_seconds=0.04)
            nb = 2.0 * (M * K + N * K + M * N)
            samples.append(make_sample({"name": name, "M": M, "N": N, "K": K}, t, nbytes=nb, nflops=2.0 * M * N * K, provider="torch.matmul"))
        del ws
    c = ctx.ceilings
    fit = fit_kernel_law(
        [s.bytes for s in samples], [s.flops for s in samples], [s.median_ms * 1e3 for s in samples],
        bench="gemm", source=ctx.source, default_bw_GBps=c.read_GBps, default_tflops=c.bf16_TFLOPS,
    )
    note = f"{len(shapes)} shapes x {len(Ms)} M" + ("; truncated by time budget" if truncated else "")
    return BenchOutput(BenchResult(status="ok", samples=samples, note=note), fits={"gemm_bf16": fit})
