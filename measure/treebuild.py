"""DDTree construction cost, CPU reference vs GPU builder (perfmodel.kernels.ddtree), for
C sequences x budget B nodes, D = 15 draft depths (DFlash block 16), V = 163840 (Kimi vocab).

What each time includes:
  * gpu: build_ddtree_gpu(logits [C, D, V] bf16 on the GPU, B): vocabulary top-k as
    log-probs + the level-wise beam + the ancestor mask, all on the device (Triton; CUDA
    graph replay; the result stays on the device).
  * cpu: build_ddtree_cpu_batch(logprobs [C, D, B] float32 numpy, B): only the host
    best-first part, given the top-B log-probs per depth (a tree of B nodes never needs
    more than B candidates per depth). Excluded and recorded separately as provider
    "triton vocab top-k+d2h": the same device top-k as the GPU builder (what a CPU builder
    in an engine would use too) and the copy to the host.
Fits t = t0 + per_node * C * B for each (TreeBuildFit); the note gives the GPU speedup at
B >= 64, C >= 8."""

from __future__ import annotations

from perfmodel.profile import BenchResult

from .common import BenchContext, BenchOutput, make_sample
from .fits import fit_treebuild_law
from .shapes import KIMI
from .timing import host_time, time_fn

D = 15


def run(ctx: BenchContext) -> BenchOutput:
    import numpy as np
    import torch

    from perfmodel.kernels import ddtree, ddtree_topk

    V = KIMI["vocab"]
    Cs = (1, 8, 32, 128) if not ctx.quick else (1, 32)
    Bs = (16, 32, 64, 128, 256) if not ctx.quick else (16, 64, 256)
    samples, notes = [], []
    gpu_t, cpu_t, cpu_only = {}, {}, {}
    for C in Cs:
        if ctx.over_budget(0.95):
            notes.append(f"stopped before C={C} (time budget)")
            break
        logits = torch.randn(C, D, V, device="cuda", dtype=torch.bfloat16) * 3
        for B in Bs:
            if ctx.over_budget(0.95):
                break
            # Static shapes and no host sync: a serving engine replays it from a CUDA graph.
            t = time_fn(lambda: ddtree.build_ddtree_gpu(logits, B), graph=True, calls_per_graph=1, cold_l2="none",
                        max_samples=10, max_seconds=0.1, warmup=2)
            samples.append(make_sample({"impl": "gpu", "C": C, "B": B, "D": D, "V": V}, t, provider="triton (gpu builder)",
                                       includes="vocab top-k+beam+ancestor mask on device"))
            gpu_t[(C, B)] = t.median_ms

            def prep():  # the same device top-k as the GPU builder (one Triton pass over the logits)
                return ddtree_topk.vocab_topk_logprobs(logits, min(B, V))[0].cpu().numpy()

            def prep_synced():
                prep()
                torch.cuda.synchronize()

            tp = host_time(prep_synced, repeats=3, max_seconds=0.3)
            samples.append(make_sample({"impl": "cpu_prep", "C": C, "B": B, "D": D, "V": V}, tp, provider="triton vocab top-k+d2h",
                                       includes="device top-B log-probs (ddtree_topk) + copy to host (host wall)"))
            lp = np.ascontiguousarray(prep(), dtype=np.float32)
            tc = host_time(lambda: ddtree.build_ddtree_cpu_batch(lp, B), repeats=3, max_seconds=0.5)
            samples.append(make_sample({"impl": "cpu", "C": C, "B": B, "D": D, "V": V}, tc, provider="numpy/python (cpu reference)",
                                       includes="host best-first over top-B log-probs per depth"))
            cpu_t[(C, B)] = tc.median_ms + tp.median_ms  # building on the CPU needs the prep too
            cpu_only[(C, B)] = tc.median_ms
        del logits
        torch.cuda.empty_cache()

    fits = {}
    for impl, d in (("gpu", gpu_t), ("cpu", cpu_t)):
        if len(d) >= 2:
            keys = sorted(d)
            fits[impl] = fit_treebuild_law([k[0] for k in keys], [k[1] for k in keys], [d[k] * 1e3 for k in keys], impl=impl, source=ctx.source)
    for label, ref in (("CPU path (prep + best-first)", cpu_t), ("CPU best-first alone", cpu_only)):
        sp = [ref[k] / gpu_t[k] for k in gpu_t if k in ref and k[0] >= 8 and k[1] >= 64]
        if sp:
            notes.append(f"GPU builder speedup over {label} at B>=64, C>=8: median {float(np.median(sp)):.1f}x "
                         f"(min {min(sp):.1f}x, max {max(sp):.1f}x)")
    return BenchOutput(BenchResult(status="ok", samples=samples, note="; ".join(notes)), treebuild=fits)
