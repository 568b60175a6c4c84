"""Where the host time of an eager e2e step goes: the e2e bench's eager point (the Kimi TP8
stack of 4 layers, C=8, q=9, L=4096, no CUDA graph) taken apart on the GPU's host.

For each of --reps steps (after warm-up; the device drains between steps):
    issue    host time to issue the whole step (perf_counter around `stack.step`, no sync)
    step     the same plus the wait for the GPU (synchronize after), host clock
    gpu      CUDA events around the step (what the e2e bench reports for it)
and per call site, the host time inside each wrapped function (F.linear, torch.bmm,
torch.addmm, the small ops, tree_attention_mla, fused_moe_w4a16), summed over the step; "glue"
is the issue time left outside them (views, slices, the loop). The model's eager term prices
each call from the dispatch bench's isolated loops (`perfmodel/model/step.py`
`eager_launch_us`); this shows which calls cost more inside a real step, and whether the GPU or
the host sets the step's time.

    python -m tools.eager_step_host_time [--reps 30] [--C 8 --q 9 --L 4096]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import defaultdict

from ._targets import start


def p(*a) -> None:
    print(*a, flush=True)

_FUNCS = (  # (module path, attribute): the calls the e2e stack's step makes through module attributes
    ("torch.nn.functional", "linear"), ("torch", "bmm"), ("torch", "addmm"),
    ("perfmodel.measure.ops", "rmsnorm"), ("perfmodel.measure.ops", "add_rmsnorm"), ("perfmodel.measure.ops", "rope"),
    ("perfmodel.measure.ops", "router_topk"), ("perfmodel.measure.ops", "silu_mul"),
    ("perfmodel.measure.ops", "residual_add"),
    ("perfmodel.kernels.tree_attention", "tree_attention_mla"), ("perfmodel.kernels.moe_w4a16", "fused_moe_w4a16"),
)


class _Tracer:
    """Wraps each function of _FUNCS to add its host time to `spent[name]` (outermost call only:
    a wrapper calling F.linear inside counts once, as the wrapper)."""

    def __init__(self):
        self.spent = defaultdict(float)
        self.calls = defaultdict(int)
        self.depth = 0
        self.saved = []

    def install(self):
        import importlib

        for mod_name, attr in _FUNCS:
            mod = importlib.import_module(mod_name)
            fn = getattr(mod, attr)
            self.saved.append((mod, attr, fn))
            setattr(mod, attr, self._wrap(f"{attr}", fn))

    def remove(self):
        for mod, attr, fn in reversed(self.saved):
            setattr(mod, attr, fn)
        self.saved.clear()

    def _wrap(self, name, fn):
        def timed(*a, **kw):
            self.depth += 1
            t0 = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                self.depth -= 1
                if self.depth == 0:
                    self.spent[name] += time.perf_counter() - t0
                    self.calls[name] += 1
        return timed


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--C", type=int, default=8)
    ap.add_argument("--q", type=int, default=9)
    ap.add_argument("--L", type=int, default=4096)
    a = ap.parse_args(argv)
    t_start = time.time()
    start("eager_step_host_time")
    import torch

    from perfmodel.measure.e2e import KimiStack

    stack = KimiStack(n_layers=4, tp=8)
    st = stack.state(a.C, a.q, a.L)
    for _ in range(5):
        stack.step(st)
    torch.cuda.synchronize()

    def timed_steps(reps):
        issue, step, gpu = [], [], []
        for _ in range(reps):
            torch.cuda.synchronize()
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            t0 = time.perf_counter()
            e0.record()
            stack.step(st)
            e1.record()
            t1 = time.perf_counter()
            torch.cuda.synchronize()
            t2 = time.perf_counter()
            issue.append((t1 - t0) * 1e6)
            step.append((t2 - t0) * 1e6)
            gpu.append(e0.elapsed_time(e1) * 1e3)
        return issue, step, gpu

    def line(label, xs):
        xs = sorted(xs)
        p(f"{label:<28} median {statistics.median(xs):8.1f} us  (min {xs[0]:8.1f}, max {xs[-1]:8.1f})")

    p(f"## eager step, Kimi TP8 stack, 4 layers, C={a.C} q={a.q} L={a.L}, {a.reps} steps")
    issue, step, gpu = timed_steps(a.reps)
    line("issue (host)", issue)
    line("step (issue + drain, host)", step)
    line("gpu (events)", gpu)

    # the GPU time alone: the same step as a CUDA graph
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        stack.step(st)
    torch.cuda.current_stream().wait_stream(s)
    with torch.cuda.graph(g):
        stack.step(st)
    gt = []
    for _ in range(a.reps):
        torch.cuda.synchronize()
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        g.replay()
        e1.record()
        torch.cuda.synchronize()
        gt.append(e0.elapsed_time(e1) * 1e3)
    line("gpu (graph replay, warm L2)", gt)

    tr = _Tracer()
    tr.install()
    try:
        tr_issue = []
        for _ in range(a.reps):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            stack.step(st)
            tr_issue.append((time.perf_counter() - t0) * 1e6)
        torch.cuda.synchronize()
    finally:
        tr.remove()
    n = a.reps
    p(f"## host time per step by call site (traced; the tracer adds its own cost), {n} steps")
    line("issue (traced)", tr_issue)
    total_in = 0.0
    for name in sorted(tr.spent, key=lambda k: -tr.spent[k]):
        us = tr.spent[name] / n * 1e6
        calls = tr.calls[name] / n
        total_in += us
        p(f"{name:<28} {us:8.1f} us per step, {calls:5.1f} calls, {us / calls:7.1f} us per call")
    p(f"{'glue (outside those)':<28} {statistics.mean(tr_issue) - total_in:8.1f} us per step")

    # the same calls in hot loops (as the dispatch bench times launches), at this step's shapes
    import torch.nn.functional as F

    from perfmodel.measure.dispatch import _host_per_call
    from perfmodel.measure.ops import rmsnorm

    W = stack.layers[0]
    h = torch.randn(a.C * a.q, stack.H, device="cuda", dtype=torch.bfloat16)
    qa = F.linear(h, W["q_a"])
    p("## the same calls alone, back to back (the dispatch bench's method), us per call")
    for name, fn in (("linear q_a", lambda: F.linear(h, W["q_a"])), ("rmsnorm q_a_ln", lambda: rmsnorm(qa, W["q_a_ln"])),
                     ("x.add_(1.0)", lambda: h.add_(0.0))):
        p(f"{name:<28} {_host_per_call(fn, 500, torch).median_ms * 1e3:8.1f}")

    # one layer's calls at this step's shapes: each alone in a loop of its own, then all of them in
    # turn (one of each per iteration), as the step interleaves them
    import math as _math

    from perfmodel.kernels.moe_w4a16 import fused_moe_w4a16
    from perfmodel.kernels.tree_attention import tree_attention_mla
    from perfmodel.measure.ops import add_rmsnorm, rope, router_topk, silu_mul

    T, nh = a.C * a.q, stack.nh
    x = st["x"]
    qf = F.linear(qa, W["q_b"]).view(a.C, a.q, nh, 192)
    qn = qf[..., :128].reshape(T, nh, 128).transpose(0, 1)
    q_lat = torch.bmm(qn, W["w_uk"]).transpose(0, 1).reshape(a.C, a.q, nh, 512)
    q_pe = rope(qf[..., 128:], st["cos"], st["sin"])
    logits = F.linear(h, W["router"])
    gu = F.linear(h, W["sg"])
    su = silu_mul(gu)
    mo = fused_moe_w4a16(h, W["w13"], W["s13"], W["w2"], W["s2"], st["ids"], st["wts"])
    sm = 1.0 / _math.sqrt(192)
    calls = {
        "add_rmsnorm": lambda: add_rmsnorm(x, h, W["ln1"]),
        "linear q_a": lambda: F.linear(h, W["q_a"]),
        "rmsnorm q_a_ln": lambda: rmsnorm(qa, W["q_a_ln"]),
        "rope (slice)": lambda: rope(qf[..., 128:], st["cos"], st["sin"]),
        "bmm w_uk": lambda: torch.bmm(qn, W["w_uk"]),
        "tree_attention_mla": lambda: tree_attention_mla(q_lat, q_pe, st["ckv"][0], st["kpe"][0], st["mask"], sm),
        "router_topk": lambda: router_topk(logits, stack.k),
        "fused_moe_w4a16": lambda: fused_moe_w4a16(h, W["w13"], W["s13"], W["w2"], W["s2"], st["ids"], st["wts"]),
        "silu_mul": lambda: silu_mul(gu),
        "addmm": lambda: torch.addmm(mo, su, W["sd"].t()),
    }
    p(f"## one layer's calls at C={a.C} q={a.q}: alone (back to back) and in turn, us per call")
    alone = 0.0
    for name, fn in calls.items():
        us = _host_per_call(fn, 200, torch).median_ms * 1e3
        alone += us
        p(f"{name:<28} {us:8.1f}")
    fns = tuple(calls.values())

    def in_turn():
        for fn in fns:
            fn()

    mixed = _host_per_call(in_turn, 100, torch).median_ms * 1e3
    p(f"{'sum alone':<28} {alone:8.1f}")
    p(f"{'in turn (one of each)':<28} {mixed:8.1f}  ({mixed / alone:.2f}x the sum alone)")

    # implicit host-device synchronisations inside one step (torch's sync debug mode)
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode(1)
        try:
            stack.step(st)
        finally:
            torch.cuda.set_sync_debug_mode(0)
    caught = [w for w in caught if "prototype feature" not in str(w.message)]  # torch's notice about the mode
    p(f"## implicit synchronisations in one step: {len(caught)}")
    for w in caught[:10]:
        p(f"  {w.filename}:{w.lineno}: {str(w.message).splitlines()[0]}")
    p(f"# done at {time.time() - t_start:.0f} s")


if __name__ == "__main__":
    main()
