"""Device ceilings: copy and streaming-read bandwidth (16 MB -> 4 GB), dense bf16 GEMM rate
(8192^3, random data) and fp8 via torch._scaled_mm when supported. Each is reported against
the datasheet peak of the GPU found (perfmodel.measure.peaks)."""

from __future__ import annotations

from perfmodel.profile import BenchResult, Ceilings

from .common import BenchContext, BenchOutput, make_sample, pct, randn
from .peaks import find_peak
from .timing import time_fn


def run(ctx: BenchContext) -> BenchOutput:
    import torch

    peak = find_peak(torch.cuda.get_device_name(0))
    samples = []
    sizes_mb = [16, 64, 256, 1024, 4096] if not ctx.quick else [64, 1024]
    copy_bw, read_bw = [], []
    for mb in sizes_mb:
        n = mb * 2**20 // 4
        src = torch.randn(n, device="cuda")
        dst = torch.empty_like(src)
        kw = dict(max_samples=30 if mb < 1024 else 12, max_seconds=0.3)
        # copy: bytes read + written (BabelStream convention; hwspecs/SOURCES.md 2a)
        t = time_fn(lambda: dst.copy_(src), **kw)
        s = make_sample({"op": "copy", "MB": mb}, t, nbytes=2.0 * n * 4, provider="torch.copy_")
        samples.append(s)
        copy_bw.append((mb, s.achieved_GBps))
        # streaming read: a sum reduction reads every byte once, writes 4
        t = time_fn(lambda: src.sum(), **kw)
        s = make_sample({"op": "read", "MB": mb}, t, nbytes=float(n * 4), provider="torch.sum")
        samples.append(s)
        read_bw.append((mb, s.achieved_GBps))
        del src, dst
        torch.cuda.empty_cache()

    # Ceilings from the sizes well beyond L2 (>= 256 MB, or the largest tried)
    big = lambda xs: [v for mb, v in xs if mb >= 256] or [xs[-1][1]]  # noqa: E731
    copy_GBps, read_GBps = max(big(copy_bw)), max(big(read_bw))

    M = N = K = 8192
    a, b = randn(M, K), randn(N, K)
    t = time_fn(lambda: torch.matmul(a, b.t()), cold_l2="none", max_samples=30, max_seconds=1.0, warmup=5)
    s = make_sample({"op": "gemm_bf16", "M": M, "N": N, "K": K}, t, nbytes=2.0 * (M * K + N * K + M * N), nflops=2.0 * M * N * K,
                    provider="torch.matmul")
    samples.append(s)
    bf16 = s.achieved_TFLOPS

    fp8, fp8_note = None, ""
    try:
        a8 = randn(M, K, scale=0.5).to(torch.float8_e4m3fn)
        b8 = randn(N, K, scale=0.5).to(torch.float8_e4m3fn)
        one = torch.ones((), device="cuda", dtype=torch.float32)
        f = lambda: torch._scaled_mm(a8, b8.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)  # noqa: E731
        f()
        t = time_fn(f, cold_l2="none", max_samples=30, max_seconds=1.0, warmup=5)
        s = make_sample({"op": "gemm_fp8", "M": M, "N": N, "K": K}, t, nbytes=1.0 * (M * K + N * K) + 2.0 * M * N, nflops=2.0 * M * N * K,
                        provider="torch._scaled_mm")
        samples.append(s)
        fp8 = s.achieved_TFLOPS
        del a8, b8
    except Exception as e:  # no fp8 path on this GPU/torch
        fp8_note = f"; fp8 not measured ({type(e).__name__}: {str(e).splitlines()[0][:80] if str(e) else ''})"
    del a, b

    for s in samples:
        if peak:
            s.pct_peak_bw = pct(s.achieved_GBps, peak.bw_GBps)
            s.pct_peak_tflops = pct(s.achieved_TFLOPS, peak.fp8_TFLOPS if s.shape["op"] == "gemm_fp8" else peak.bf16_TFLOPS)
    if peak:
        vs = (
            f"vs datasheet {peak.spec or '?'}: copy {pct(copy_GBps, peak.bw_GBps):.0f}%, read {pct(read_GBps, peak.bw_GBps):.0f}%"
            f" of {peak.bw_GBps:.0f} GB/s;"
            f" bf16 {pct(bf16, peak.bf16_TFLOPS):.0f}% of {peak.bf16_TFLOPS:.0f} TF"
            + (f"; fp8 {pct(fp8, peak.fp8_TFLOPS):.0f}% of {peak.fp8_TFLOPS:.0f} TF" if fp8 and peak.fp8_TFLOPS else "")
            + f" (peaks: {peak.source})"
        )
    else:
        vs = "no datasheet peak known for this GPU"
    ctx.log(f"ceilings: copy {copy_GBps:.0f} GB/s, read {read_GBps:.0f} GB/s, bf16 {bf16:.0f} TFLOP/s"
            + (f", fp8 {fp8:.0f} TFLOP/s" if fp8 else "") + f"; {vs}")
    ceil = Ceilings(copy_GBps=copy_GBps, read_GBps=read_GBps, bf16_TFLOPS=bf16, fp8_TFLOPS=fp8, source=f"{ctx.source}; {vs}")
    return BenchOutput(BenchResult(status="ok", samples=samples, note=vs + fp8_note), ceilings=ceil)
