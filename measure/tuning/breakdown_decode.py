"""Per-kernel durations (CUPTI, through torch.profiler) of the decode-size kernels: the W4A16
MoE layer (Kimi TP8 slice) at T = 1, 2, 8 through the aligned and the direct paths, and tree
attention at C=1, q=1. Each case is captured as a CUDA graph over rotated inputs (cold weights
/ KV) and replayed, so that launches do not gate the kernels; the graph's wall time per call is
printed beside the sum of its kernels (kernels launched with PDL overlap, so their sum can
exceed the wall time). Kernels of the same name are summed per call.

    python -m perfmodel.measure.tuning.breakdown_decode
"""

from __future__ import annotations


def profiled_replays(fn, args_list, reps: int = 20):
    """(graph, profiler events of its CUDA kernels) for `reps` replays of one CUDA graph that
    calls fn over args_list (fn run eagerly first, as warm-up)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    for a in args_list[:2]:
        fn(*a)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for a in args_list:
            fn(*a)
    for _ in range(3):
        g.replay()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as p:
        for _ in range(reps):
            g.replay()
        torch.cuda.synchronize()
    return g, [e for e in p.events() if e.device_type.name == "CUDA"]


def prof(fn, args_list, reps: int = 20, label: str = "") -> None:
    import torch

    g, events = profiled_replays(fn, args_list, reps)
    n = reps * len(args_list)
    rows: dict[str, list[float]] = {}
    for e in events:
        rows.setdefault(e.name[:60], []).append(e.device_time)
    tot = 0.0
    for k, v in sorted(rows.items(), key=lambda kv: -sum(kv[1])):
        per = sum(v) / n
        tot += per
        print(f"  {label:28s} {k:60s} n/call {len(v) / n:4.1f}  mean {sum(v) / len(v):7.2f} us  per call {per:7.2f} us",
              flush=True)
    s, e_ = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(reps):
        g.replay()
    e_.record()
    torch.cuda.synchronize()
    print(f"  {label:28s} sum of kernels {tot:7.2f} us; graph wall per call {s.elapsed_time(e_) * 1e3 / n:7.2f} us",
          flush=True)


def main() -> None:
    import torch

    from perfmodel.kernels import moe_w4a16 as mw
    from perfmodel.kernels import tree_attention as ta

    from ..common import uniform_topk
    from ..shapes import KIMI
    from .ab_decode import Case

    H, E, k = KIMI["hidden"], KIMI["n_experts"], KIMI["top_k"]
    I = KIMI["moe_inter"] // 8  # noqa: E741 (the model's name for the MoE width)
    w = (*mw.random_kernel_weights(E, 2 * I, H), *mw.random_kernel_weights(E, H, I))
    for T in (1, 2, 8):
        x = torch.randn(T, H, device="cuda", dtype=torch.bfloat16)
        routes = [uniform_topk(T, E, k) for _ in range(8)]
        for lab, kv in (("aligned", dict(pair_blocks=False)), ("direct", dict(direct=True))):
            prof(lambda i, wt, x=x, kv=kv: mw.fused_moe_w4a16(x, *w, i, wt, **kv), routes, label=f"moe T={T} {lab}")
    w = None  # free the weights before the attention cases
    torch.cuda.empty_cache()
    for kind, heads, L in (("mla", 64, 8192), ("mla", 8, 8192), ("mla", 64, 1024), ("llama", 0, 8192),
                           ("qwen", 0, 8192), ("llama", 0, 1024)):
        c = Case(kind, heads, 1, 1, L)
        prof(c.fn(ta), c.kvs, label=c.name)
        del c
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
