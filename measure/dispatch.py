"""Launch and host overheads -> `Overheads`:
  * launch_eager_us: host wall time of N tiny eager launches / N (a 1-element add_).
  * launch_eager_triton_us: the same for one of the package's Triton kernels called eagerly
    through its wrapper (kernels.rmsnorm on one 64-wide row: output allocation, grid, and
    the launch of the compiled kernel with 13 arguments).
  * graph_node_us: GPU time of a graph of N+1 tiny kernels minus a graph of 1, per node.
  * graph_launch_us: host wall time of replaying a 1-node graph, per replay.
  * host_step_us: one Python decode-loop step: argmax over a [1, V/8] logits row, .item()
    (a device sync), and list/position bookkeeping; host wall time.
  * floor_*_us: the floor probe (measure/floor.py): an empty kernel, one wave of DRAM reads
    over 1 MB, and a split-K pair, each as CUDA-graph nodes.
The Triton wrapper launches through kernels/_launch.py's FastLauncher (the compiled kernel's
C launcher called directly, with raw pointers, cached per argument specialisation), as every
small-op and attention kernel does; rmsnorm keys it by what it knows of its arguments
(`launch_keyed`) and allocates its output with one `torch.empty_like`."""

from __future__ import annotations

import time

from perfmodel.profile import BenchResult, Overheads

from .common import BenchContext, BenchOutput, make_sample, randn
from .shapes import KIMI
from .timing import host_time, summarize, time_fn


def run(ctx: BenchContext) -> BenchOutput:
    import torch

    from perfmodel.kernels.rmsnorm import rmsnorm

    N = 2000 if not ctx.quick else 500
    x = torch.randn(1, device="cuda")
    samples = []

    t_launch = _host_per_call(lambda: x.add_(1.0), N, torch)
    samples.append(make_sample({"what": "eager_launch", "N": N}, t_launch, provider="torch.add_"))
    xr, wr = torch.randn(1, 64, device="cuda", dtype=torch.bfloat16), torch.ones(64, device="cuda", dtype=torch.bfloat16)
    t_triton = _host_per_call(lambda: rmsnorm(xr, wr), N, torch)
    samples.append(make_sample({"what": "eager_launch_triton", "N": N}, t_triton, provider="triton (kernels.rmsnorm)"))

    def graph_of(n):
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            x.add_(1.0)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(n):
                x.add_(1.0)
        return g

    n_nodes = 200
    g1, gn = graph_of(1), graph_of(n_nodes + 1)
    t1 = time_fn(lambda: g1.replay(), cold_l2="none", max_samples=50, max_seconds=0.2)
    tn = time_fn(lambda: gn.replay(), cold_l2="none", max_samples=50, max_seconds=0.3)
    node_us = max((tn.median_ms - t1.median_ms) * 1e3 / n_nodes, 0.0)
    samples.append(make_sample({"what": "graph_1_node"}, t1, provider="cuda graph"))
    samples.append(make_sample({"what": f"graph_{n_nodes + 1}_nodes"}, tn, provider="cuda graph"))

    R = 1000 if not ctx.quick else 300
    per = []
    for _ in range(7):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(R):
            g1.replay()
        per.append((time.perf_counter() - t0) * 1e3 / R)
    torch.cuda.synchronize()
    t_glaunch = summarize(per, "host")
    samples.append(make_sample({"what": "graph_launch", "R": R}, t_glaunch, provider="cuda graph (host)"))

    logits = randn(1, KIMI["vocab"] // 8)
    tokens, pos = [], [0]

    def step():
        tok = logits.argmax(-1)
        t = int(tok.item())
        tokens.append(t)
        pos[0] += 1
        if len(tokens) > 4096:
            tokens.clear()

    t_step = host_time(step, repeats=200, min_seconds=0.05, max_seconds=0.5)
    samples.append(make_sample({"what": "host_decode_step", "V": KIMI["vocab"] // 8}, t_step, provider="python",
                               includes="argmax launch + .item() sync + bookkeeping"))
    from .floor import probe

    floors = probe(samples)
    ov = Overheads(
        launch_eager_us=max(t_launch.median_ms * 1e3, 1e-3),
        launch_eager_triton_us=max(t_triton.median_ms * 1e3, 1e-3),
        graph_node_us=node_us,
        graph_launch_us=t_glaunch.median_ms * 1e3,
        host_step_us=t_step.median_ms * 1e3,
        floor_empty_node_us=floors["empty_node_us"],
        floor_dram_wave_us=floors["dram_wave_us"],
        floor_splitk_pair_us=floors["splitk_pair_us"],
        source=ctx.source,
    )
    del g1, gn
    note = (f"eager launch {ov.launch_eager_us:.2f} us (Triton {ov.launch_eager_triton_us:.2f} us); graph node {ov.graph_node_us:.2f} us; "
            f"graph launch {ov.graph_launch_us:.2f} us; host step {ov.host_step_us:.1f} us; floor probe: empty node "
            f"{floors['empty_node_us']:.2f} us, 1 MB DRAM wave {floors['dram_wave_us']:.2f} us, split-K pair "
            f"{floors['splitk_pair_us']:.2f} us")
    ctx.log("dispatch: " + note)
    return BenchOutput(BenchResult(status="ok", samples=samples, note=note), overheads=ov)


def _host_per_call(fn, N: int, torch):
    """Host wall time per call of N back-to-back eager calls (after 3 warm-up loops, which
    also compile a Triton kernel), 7 repeats; the device drains between repeats."""
    for _ in range(3):
        for _ in range(N):
            fn()
    torch.cuda.synchronize()
    per = []
    for _ in range(7):
        t0 = time.perf_counter()
        for _ in range(N):
            fn()
        per.append((time.perf_counter() - t0) * 1e3 / N)
        torch.cuda.synchronize()
    return summarize(per, "host")
