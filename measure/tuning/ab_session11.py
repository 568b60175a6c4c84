"""A/B of session 11's decode-size changes (issue 19), on one GPU, in one call: the
pair-summing down's first K-block loaded and dequantised into registers before its wait for
gate_up (`moe_w4a16.DOWN_PAIRS_PRELOAD_MAX_KB`, kernel knob PRELOAD) against only prefetching it
into L2 (session 10); gate_up's programs pulling all their weight tiles into L2 at their start
(`PAIR_GATE_UP_PREFETCH_MAX_T`); and decode attention's split programs pulling their KV rows
into L2 at their start (`tree_attention.PREFETCH_L2`); interleaved, timed as the moe bench times (CUDA
graph of one call per routing, 8 routings, cold weights), with per-kernel durations. Every
variant is checked first against the aligned path without PDL, eagerly and under graph replay
with changing routings.

The log of c1da92a (runs/tuning/session11/) came from this tool's first version, which also timed
the decode kernels as links of a chain of dependent launches (the first kernel launched with
launch_pdl and waiting before any read, the last triggering the next launch), back to back and
with a torch add after each call; slower, so that code is gone (see the session's README).

    python -m perfmodel.measure.tuning.ab_session11 [--rounds 3] [--warm]
"""

from __future__ import annotations

import contextlib

from . import _ab
from ._ab import READ_GBPS
from ._ab import p as _p
from .ab_session8 import _kernel_times, graph_replay_diff, layer_us, moe_cases

# name -> (moe_w4a16 module constants, fused_moe_w4a16 keywords)
VARIANTS = {
    "s10": (dict(DOWN_PAIRS_PRELOAD_MAX_KB=0, PAIR_GATE_UP_PREFETCH_MAX_T=0), {}),
    "preload": (dict(DOWN_PAIRS_PRELOAD_MAX_KB=8, PAIR_GATE_UP_PREFETCH_MAX_T=0), {}),
    "preload_st2": (dict(DOWN_PAIRS_PRELOAD_MAX_KB=8, PAIR_GATE_UP_PREFETCH_MAX_T=0), dict(down_config=dict(num_stages=2))),
    "gu_prefetch": (dict(DOWN_PAIRS_PRELOAD_MAX_KB=0, PAIR_GATE_UP_PREFETCH_MAX_T=1), {}),
    "preload_gu_prefetch": (dict(DOWN_PAIRS_PRELOAD_MAX_KB=8, PAIR_GATE_UP_PREFETCH_MAX_T=1), {}),
}
PLAN = [("kimi_tp8", 1), ("qwen3", 1)]


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


def moe(rounds: int, warm: bool) -> None:
    import torch

    from perfmodel.kernels import moe_w4a16 as m
    from perfmodel.kernels._testing import calc_diff

    _p("\n## W4A16 MoE layer (pair path, PDL), us per call (CUDA graph of 8 calls, 8 routings, cold weights), per round")
    for name, T, H, I, E, k, w, x, routes in moe_cases(PLAN):
        base = [m.fused_moe_w4a16(x, *w, *r, pair_blocks=False, pdl=False) for r in routes]
        for vname, (fl, kv) in VARIANTS.items():
            with flags(m, fl):
                outs = [m.fused_moe_w4a16(x, *w, *r, pair_blocks=True, **kv) for r in routes]
                torch.cuda.synchronize()
                d = max(calc_diff(a.float(), b.float()) for a, b in zip(base, outs))
                dg = graph_replay_diff(x, w, routes, base, pair_blocks=True, **kv)
            ok = d < 1e-5 and dg < 1e-5
            _p(f"check {name} T={T} {vname}: max calc_diff vs aligned (no PDL) over 8 routings eager {d:.1e}, "
               f"graph replay {dg:.1e} ({'ok' if ok else 'FAIL'})")
        if warm:
            continue
        res = {v: [] for v in VARIANTS}
        for _ in range(rounds):
            for vname, (fl, kv) in VARIANTS.items():
                with flags(m, fl):
                    res[vname].append(layer_us(x, w, routes, pair_blocks=True, **kv))
        nb = m.bytes_moved(routes[0][0], E, H, I)
        _p(f"{name} T={T}:")
        for vname, ts in res.items():
            _p(f"    {vname:16s} {' '.join(f'{t:6.1f}' for t in ts)}   best {min(ts):6.1f} us, "
               f"{100 * nb / min(ts) / 1e3 / READ_GBPS:3.0f}% of read")
        for vname in ("s10", "preload", "preload_gu_prefetch"):
            fl, kv = VARIANTS[vname]
            with flags(m, fl):
                f = lambda i, wt, kv=kv: m.fused_moe_w4a16(x, *w, i, wt, pair_blocks=True, **kv)  # noqa: E731
                _p(f"    kernels {vname}: {_kernel_times(f, routes)}")


ATTN_PLAN = [("mla", 64, 1024), ("mla", 64, 8192), ("mla", 8, 1024), ("mla", 8, 8192), ("llama", 0, 1024),
             ("llama", 0, 8192), ("qwen", 0, 8192)]
ATTN_VARIANTS = {"no_prefetch": dict(prefetch=False), "prefetch": dict(prefetch=True)}


def attention(rounds: int, warm: bool) -> None:
    """Decode attention at C=1, q=1 with and without the split kernel's L2 prefetch of its KV
    rows (`tree_attention.PREFETCH_L2`, knob `prefetch`), timed as the attention bench times."""
    import torch

    from perfmodel.kernels import tree_attention as ta
    from perfmodel.kernels._testing import calc_diff

    from .ab_decode import Case, _time

    _p("\n## decode attention, C=1, q=1, us per call (CUDA graph over KV copies, cold L2), per round")
    for kind, H, L in ATTN_PLAN:
        c = Case(kind, H, 1, 1, L)
        ref = c.ref().float()
        for vname, kw in ATTN_VARIANTS.items():
            d = calc_diff(c.fn(ta, **kw)(*c.kvs[0]).float(), ref)
            _p(f"check {c.name} {vname}: calc_diff vs reference {d:.1e} ({'ok' if d < 1e-4 else 'FAIL'})")
        if warm:
            continue
        res = {v: [] for v in ATTN_VARIANTS}
        for _ in range(rounds):
            for vname, kw in ATTN_VARIANTS.items():
                res[vname].append(_time(c.fn(ta, **kw), c))
        for vname, ts in res.items():
            _p(f"{c.name:24s} {vname:12s} {' '.join(f'{t:6.1f}' for t in ts)}   best {min(ts):6.1f} us, "
               f"{100 * c.nbytes() / min(ts) / 1e3 / READ_GBPS:3.0f}% of read")
        del c
        torch.cuda.empty_cache()


def main(argv=None) -> None:
    def run(a):
        moe(a.rounds, a.warm)
        attention(a.rounds, a.warm)
    _ab.main("ab_session11", __doc__, run, argv)


if __name__ == "__main__":
    main()
