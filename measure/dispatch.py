"""Launch and host overheads -> `Overheads`:
  * launch_eager_us: host wall time of N tiny eager launches / N (a 1-element add_).
  * launch_eager_triton_us: the same for one of the package's Triton kernels called eagerly
    through its wrapper (kernels.rmsnorm on one 64-wide row: output allocation, grid, and
    the launch of the compiled kernel with 13 arguments). A sample (not a field) also times it
    into a given output (`out=`), without the allocation, as the torch op (in place) runs.
  * launch_eager_call_us: the same for one call of each attention and MoE wrapper at decode
    size, all its kernels together (`_eager_call_fns`): their wrappers plan splits and allocate
    workspaces, which a one-kernel norm does not; the W4A16 MoE also just past its planned
    pair path ("moe_w4a16@T5": the aligned path, which it takes from 5 tokens); and, by class or
    "<class>.<variant>", the e2e stack's other calls as it makes them: a torch GEMM, RoPE, the
    router top-k, SiLU*mul, the fused add + RMSNorm.
  * eager_interleave_factor: one decode layer's timed calls at one token (`LAYER_CALLS` and the
    rmsnorm) made in turn, one of each as a step interleaves them, over the sum of their times
    each in its own loop.
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
    # the same into a given output: like the torch op (in place), no allocation
    out = torch.empty_like(xr)
    t_triton_out = _host_per_call(lambda: rmsnorm(xr, wr, out=out), N, torch)
    samples.append(make_sample({"what": "eager_launch_triton_out", "N": N}, t_triton_out,
                               provider="triton (kernels.rmsnorm, out=)"))

    interleave = 1.0
    try:
        fns = _eager_call_fns(torch)
        calls = {c: _host_per_call(fn, N // 4, torch) for c, fn in fns.items()}
        # the calls of one decode layer at one token made in turn, one of each (as a step interleaves
        # them), against the sum of their times each in a loop of its own
        layer = [fns[c] for c in LAYER_CALLS] + [lambda: rmsnorm(xr, wr)]

        def in_turn():
            for fn in layer:
                fn()

        t_turn = _host_per_call(in_turn, N // 20, torch)
        alone_ms = sum(calls[c].median_ms for c in LAYER_CALLS) + t_triton.median_ms
        interleave = t_turn.median_ms / alone_ms
        samples.append(make_sample({"what": "eager_in_turn", "calls": ",".join([*LAYER_CALLS, "rmsnorm"]), "N": N // 20}, t_turn,
                                   provider="mixed", includes=f"{interleave:.3f}x the sum of the calls alone"))
        del fns, layer
        torch.cuda.empty_cache()
    except (RuntimeError, MemoryError) as e:  # e.g. too little memory for the MoE weights: keep the rest
        torch.cuda.empty_cache()
        calls = {}
        ctx.log(f"dispatch: per-wrapper eager calls skipped ({type(e).__name__}: {str(e).splitlines()[0][:100]})")
    for cls, t in calls.items():
        samples.append(make_sample({"what": "eager_call", "class": cls, "N": N // 4}, t,
                                   provider=_CALL_PROVIDERS.get(cls, f"triton ({cls} wrapper)")))

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
        launch_eager_call_us={c: max(t.median_ms * 1e3, 1e-3) for c, t in calls.items()},
        eager_interleave_factor=interleave,
        graph_node_us=node_us,
        graph_launch_us=t_glaunch.median_ms * 1e3,
        host_step_us=t_step.median_ms * 1e3,
        floor_empty_node_us=floors["empty_node_us"],
        floor_dram_wave_us=floors["dram_wave_us"],
        floor_splitk_pair_us=floors["splitk_pair_us"],
        source=ctx.source,
    )
    del g1, gn
    per_call = ", ".join(f"{c} {v:.1f}" for c, v in ov.launch_eager_call_us.items())
    note = (f"eager launch {ov.launch_eager_us:.2f} us (Triton {ov.launch_eager_triton_us:.2f} us, into a given "
            f"output {t_triton_out.median_ms * 1e3:.2f} us; per wrapper call: "
            f"{per_call} us; made in turn {interleave:.2f}x their sum); graph node {ov.graph_node_us:.2f} us; "
            f"graph launch {ov.graph_launch_us:.2f} us; host step {ov.host_step_us:.1f} us; floor probe: empty node "
            f"{floors['empty_node_us']:.2f} us, 1 MB DRAM wave {floors['dram_wave_us']:.2f} us, split-K pair "
            f"{floors['splitk_pair_us']:.2f} us")
    ctx.log("dispatch: " + note)
    return BenchOutput(BenchResult(status="ok", samples=samples, note=note), overheads=ov)


# the timed calls a decode layer of the e2e stack makes at one token (the in-turn loop's set)
LAYER_CALLS = ("attention_mla", "moe_w4a16", "gemm_bf16", "elementwise.rope", "elementwise.router_topk",
               "elementwise.silu_mul", "elementwise.add_rmsnorm")


def _eager_call_fns(torch) -> dict:
    """The eager calls the bench times one by one (class -> a call of no arguments; its inputs
    live in the closure): each attention and MoE class's wrapper at decode size (C = 1, q = 1,
    L = 1024; T = 1 routed token; the W4A16 MoE also at PAIR_BLOCKS_MAX_T + 1 tokens), as the e2e
    stack calls them: the launches of all the call's kernels plus the wrapper's own Python work
    (split planning, workspace allocation); then the e2e stack's other calls, as it makes them."""
    import torch.nn.functional as F

    from perfmodel.kernels.moe_bf16 import fused_moe_bf16
    from perfmodel.kernels.moe_w4a16 import PAIR_BLOCKS_MAX_T, fused_moe_w4a16, random_kernel_weights
    from perfmodel.kernels.tree_attention import tree_attention_gqa, tree_attention_mla

    from .attention import random_tree_mask
    from .common import uniform_topk
    from .ops import add_rmsnorm, rope, router_topk, silu_mul
    from .shapes import LLAMA3_8B, QWEN3_30B

    out = {}
    L, nh = 1024, KIMI["n_heads"] // 8
    mask = random_tree_mask(1, 1)
    ql, qr, ckv, kpe = randn(1, 1, nh, 512), randn(1, 1, nh, 64), randn(1, L + 1, 512), randn(1, L + 1, 64)
    out["attention_mla"] = lambda: tree_attention_mla(ql, qr, ckv, kpe, mask, 0.07)
    hq, hkv, D = LLAMA3_8B["n_heads"], LLAMA3_8B["n_kv_heads"], LLAMA3_8B["head_dim"]
    qq, k, v = randn(1, 1, hq, D), randn(1, L + 1, hkv, D), randn(1, L + 1, hkv, D)
    out["attention_gqa"] = lambda: tree_attention_gqa(qq, k, v, mask)
    H, E, top = KIMI["hidden"], KIMI["n_experts"], KIMI["top_k"]
    I = KIMI["moe_inter"] // 8
    w13, s13 = random_kernel_weights(E, 2 * I, H)
    w2, s2 = random_kernel_weights(E, H, I)
    x = randn(1, H)
    ids, wts = uniform_topk(1, E, top)
    out["moe_w4a16"] = lambda: fused_moe_w4a16(x, w13, s13, w2, s2, ids, wts)
    # past its planned pair path (up to PAIR_BLOCKS_MAX_T tokens) the wrapper aligns the routing:
    # timed at the first token count there, for calls of that many tokens or more
    t = PAIR_BLOCKS_MAX_T + 1
    xt = randn(t, H)
    ids_t, wts_t = uniform_topk(t, E, top)
    out[f"moe_w4a16@T{t}"] = lambda: fused_moe_w4a16(xt, w13, s13, w2, s2, ids_t, wts_t)
    Hq, Eq, topq, Iq = QWEN3_30B["hidden"], QWEN3_30B["n_experts"], QWEN3_30B["top_k"], QWEN3_30B["moe_inter"]
    b13, b2, xb = randn(Eq, 2 * Iq, Hq, scale=0.02), randn(Eq, Hq, Iq, scale=0.02), randn(1, Hq)
    ids_b, wts_b = uniform_topk(1, Eq, topq)
    out["moe_bf16"] = lambda: fused_moe_bf16(xb, b13, b2, ids_b, wts_b)
    # The e2e stack's other calls, as it makes them, at one token: a torch GEMM (`F.linear`:
    # cuBLAS's host path is not one elementwise torch launch), RoPE on the rotary slice of the q
    # projection (a strided view), the router top-k, SiLU*mul (torch: chunk, silu, mul) and the
    # fused add + RMSNorm (two outputs).
    kk = KIMI
    r, w = randn(1, H), randn(H)
    wq = randn(kk["q_lora"], H, scale=0.02)
    qf = randn(1, 1, nh, kk["qk_nope"] + kk["qk_rope"])
    cos, sin = randn(1, 1, 1, kk["qk_rope"] // 2), randn(1, 1, 1, kk["qk_rope"] // 2)
    logits = randn(1, E)
    gu = randn(1, 2 * kk["shared_inter"] // 8)
    nope = kk["qk_nope"]
    out["gemm_bf16"] = lambda: F.linear(x, wq)
    out["elementwise.rope"] = lambda: rope(qf[..., nope:], cos, sin)
    out["elementwise.router_topk"] = lambda: router_topk(logits, top)
    out["elementwise.silu_mul"] = lambda: silu_mul(gu)
    out["elementwise.add_rmsnorm"] = lambda: add_rmsnorm(x, r, w)
    return out


# what launches each timed call (the samples' provider)
_CALL_PROVIDERS = {"gemm_bf16": "torch (F.linear, cuBLAS)", "elementwise.silu_mul": "torch (chunk, silu, mul)"}


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
