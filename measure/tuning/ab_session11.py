"""A/B of session 11's decode-size changes (issue 19), on one GPU, in one call:

- the W4A16 MoE layer and the decode attention as links of a chain of dependent launches
  (`moe_w4a16.MOE_PDL_CHAIN`, `tree_attention.PDL_CHAIN`): the first kernel is launched with
  launch_pdl and waits (griddepcontrol.wait) before it reads anything, the last lets the next
  launch start at once;
- the pair-summing down's first K-block loaded and dequantised before its wait for gate_up
  (`moe_w4a16.DOWN_PAIRS_PRELOAD`) instead of only prefetched into L2.

Each variant is timed two ways, interleaved per round: back to back (as the moe and attention
benches time: a CUDA graph of one call per routing or KV copy, cold weights / KV), and with a
plain torch kernel (a one-element add, which does not trigger its dependents) after every call,
so that the chain is broken before each call. Every variant is checked first: the MoE layer
against the aligned path without PDL, eagerly and under graph replay with changing routings;
attention against the torch reference.

    python -m perfmodel.measure.tuning.ab_session11 [--rounds 3] [--warm]
"""

from __future__ import annotations

import contextlib

from . import _ab
from ._ab import READ_GBPS
from ._ab import p as _p
from .ab_session8 import _kernel_times, graph_replay_diff, layer_us, moe_cases

MOE_VARIANTS = {
    "s10": dict(MOE_PDL_CHAIN=False, DOWN_PAIRS_PRELOAD=False),
    "preload": dict(MOE_PDL_CHAIN=False, DOWN_PAIRS_PRELOAD=True),
    "chain": dict(MOE_PDL_CHAIN=True, DOWN_PAIRS_PRELOAD=False),
    "both": dict(MOE_PDL_CHAIN=True, DOWN_PAIRS_PRELOAD=True),
}
ATTN_VARIANTS = {"s10": dict(PDL_CHAIN=False), "chain": dict(PDL_CHAIN=True)}
MOE_PLAN = [("kimi_tp8", 1), ("qwen3", 1)]
ATTN_PLAN = [("mla", 64, 1024), ("mla", 64, 8192), ("mla", 8, 8192), ("llama", 0, 8192), ("qwen", 0, 8192)]


@contextlib.contextmanager
def flags(mod, values: dict):
    """Module constants of `mod` set to `values` inside the block (read at launch and at capture)."""
    old = {k: getattr(mod, k) for k in values}
    for k, v in values.items():
        setattr(mod, k, v)
    try:
        yield
    finally:
        for k, v in old.items():
            setattr(mod, k, v)


def _broken(fn):
    """fn followed by a one-element torch add: a launch between calls that does not trigger its
    dependents early, so each call's first kernel starts only when it ends."""
    import torch

    bump = torch.zeros(1, device="cuda")

    def f(*a):
        out = fn(*a)
        bump.add_(1.0)
        return out
    return f


def moe(rounds: int, warm: bool) -> None:
    import torch

    from perfmodel.kernels import moe_w4a16 as m
    from perfmodel.kernels._testing import calc_diff

    from ..timing import time_fn

    _p("\n## W4A16 MoE layer (pair path, PDL), us per call (CUDA graph of 8 calls, 8 routings, cold weights); "
       "b2b = back to back, brk = a torch add after each call")
    for name, T, H, I, E, k, w, x, routes in moe_cases(MOE_PLAN):
        base = [m.fused_moe_w4a16(x, *w, *r, pair_blocks=False, pdl=False) for r in routes]
        for vname, fl in MOE_VARIANTS.items():
            with flags(m, fl):
                outs = [m.fused_moe_w4a16(x, *w, *r, pair_blocks=True) for r in routes]
                torch.cuda.synchronize()
                d = max(calc_diff(a.float(), b.float()) for a, b in zip(base, outs))
                dg = graph_replay_diff(x, w, routes, base, pair_blocks=True)
            ok = d < 1e-5 and dg < 1e-5
            _p(f"check {name} T={T} {vname}: max calc_diff vs aligned (no PDL) over 8 routings eager {d:.1e}, "
               f"graph replay {dg:.1e} ({'ok' if ok else 'FAIL'})")
        if warm:
            continue
        res = {(v, how): [] for v in MOE_VARIANTS for how in ("b2b", "brk")}
        for _ in range(rounds):
            for vname, fl in MOE_VARIANTS.items():
                with flags(m, fl):
                    res[(vname, "b2b")].append(layer_us(x, w, routes, pair_blocks=True))
                    f = _broken(lambda i, wt: m.fused_moe_w4a16(x, *w, i, wt, pair_blocks=True))
                    res[(vname, "brk")].append(time_fn(f, args_list=routes, calls_per_graph=len(routes), graph=True,
                                                       cold_l2="rotate", max_samples=12,
                                                       max_seconds=0.08).median_ms * 1e3)
        nb = m.bytes_moved(routes[0][0], E, H, I)
        _p(f"{name} T={T}:")
        for (vname, how), ts in res.items():
            _p(f"    {vname:8s} {how} {' '.join(f'{t:6.1f}' for t in ts)}   best {min(ts):6.1f} us, "
               f"{100 * nb / min(ts) / 1e3 / READ_GBPS:3.0f}% of read")
        for vname in ("s10", "both"):
            with flags(m, MOE_VARIANTS[vname]):
                f = lambda i, wt: m.fused_moe_w4a16(x, *w, i, wt, pair_blocks=True)  # noqa: E731
                _p(f"    kernels {vname}: {_kernel_times(f, routes)}")


def attention(rounds: int, warm: bool) -> None:
    import torch

    from perfmodel.kernels import tree_attention as ta
    from perfmodel.kernels._testing import calc_diff

    from .ab_decode import Case, _time

    _p("\n## decode attention, C=1, q=1, us per call (CUDA graph over KV copies, cold L2); "
       "b2b = back to back, brk = a torch add after each call")
    for kind, H, L in ATTN_PLAN:
        c = Case(kind, H, 1, 1, L)
        ref = c.ref().float()
        for vname, fl in ATTN_VARIANTS.items():
            with flags(ta, fl):
                d = calc_diff(c.fn(ta)(*c.kvs[0]).float(), ref)
            _p(f"check {c.name} {vname}: calc_diff vs reference {d:.1e} ({'ok' if d < 1e-4 else 'FAIL'})")
        if warm:
            continue
        res = {(v, how): [] for v in ATTN_VARIANTS for how in ("b2b", "brk")}
        for _ in range(rounds):
            for vname, fl in ATTN_VARIANTS.items():
                with flags(ta, fl):
                    res[(vname, "b2b")].append(_time(c.fn(ta), c))
                    res[(vname, "brk")].append(_time(_broken(c.fn(ta)), c))
        for (vname, how), ts in res.items():
            _p(f"{c.name:24s} {vname:6s} {how} {' '.join(f'{t:6.1f}' for t in ts)}   best {min(ts):6.1f} us, "
               f"{100 * c.nbytes() / min(ts) / 1e3 / READ_GBPS:3.0f}% of read")
        del c
        torch.cuda.empty_cache()


def _run(a) -> None:
    moe(a.rounds, a.warm)
    attention(a.rounds, a.warm)


def main(argv=None) -> None:
    _ab.main("ab_session11", __doc__, _run, argv)


if __name__ == "__main__":
    main()
