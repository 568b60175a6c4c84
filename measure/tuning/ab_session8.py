"""A/B of session 8's decode-size MoE change (issue 19), on one GPU, in one call: the W4A16
MoE layer at one token through the pair-block path (two launches, no alignment step, a
persistent self-cleaning workspace) against the aligned path (align + gate_up + down) and the
direct path, interleaved, timed as the moe bench times (CUDA graph of 8 calls with their own
routings, cold weights); per-kernel durations of each path (torch.profiler over graph replays);
variants of the pair path's gate_up and down tiles. Every path is checked on the GPU against
the aligned one first, eagerly and under graph replay with changing routings, and the
workspace is checked to be zero afterwards.

    python -m perfmodel.measure.tuning.ab_session8 [--rounds 3] [--warm]
"""

from __future__ import annotations

import contextlib

from . import _ab
from ._ab import READ_GBPS
from ._ab import p as _p


def _kernel_times(fn, args_list, reps: int = 20) -> str:
    """Per-kernel mean duration per layer call (us) over graph replays of fn over args_list."""
    from .breakdown_decode import profiled_replays

    _, events = profiled_replays(fn, args_list, reps)
    n = reps * len(args_list)
    ev = sorted(events, key=lambda e: e.time_range.start)
    per_call = len(ev) // n
    per: dict[str, list[float]] = {}
    order: list[str] = []
    for i, e in enumerate(ev[:per_call * n]):  # the i-th kernel of each layer call, by start time
        name = f"{i % per_call}:{e.name.split('(')[0][:32]}"
        if name not in per:
            order.append(name)
        per.setdefault(name, []).append(e.device_time)
    parts = [f"{nm} {sum(per[nm]) / n:.2f}" for nm in order]
    return "; ".join(parts) + f" | sum {sum(sum(v) for v in per.values()) / n:.2f} us"


def moe_shapes() -> dict:
    """The decode MoE shapes the session-8/9 A/B tools time: name -> (H, I, E, top-k)."""
    from ..shapes import KIMI, QWEN3_30B

    return {"kimi_tp8": (KIMI["hidden"], KIMI["moe_inter"] // 8, KIMI["n_experts"], KIMI["top_k"]),
            "qwen3": (QWEN3_30B["hidden"], QWEN3_30B["moe_inter"], QWEN3_30B["n_experts"], QWEN3_30B["top_k"]),
            "kimi_I2048": (KIMI["hidden"], KIMI["moe_inter"], KIMI["n_experts"], KIMI["top_k"])}


def moe_cases(plan):
    """For each (shape name, T) of plan: (name, T, H, I, E, k, weights, x, 8 uniform routings);
    a shape's random kernel-layout weights are made once, while its cases run in a row."""
    import torch

    from perfmodel.kernels import moe_w4a16 as m

    from ..common import uniform_topk

    shapes = moe_shapes()
    weights: dict = {}
    for name, T in plan:
        H, I, E, k = shapes[name]
        if name not in weights:
            weights.clear()
            torch.cuda.empty_cache()
            weights[name] = (*m.random_kernel_weights(E, 2 * I, H), *m.random_kernel_weights(E, H, I))
        x = torch.randn(T, H, device="cuda", dtype=torch.bfloat16)
        yield name, T, H, I, E, k, weights[name], x, [uniform_topk(T, E, k) for _ in range(8)]


def layer_us(x, w, routes, mod=None, **kv) -> float:
    """The W4A16 layer (`fused_moe_w4a16` keywords kv; of module `mod`, default this tree's
    kernels.moe_w4a16) as the moe bench times it: a CUDA graph of one call per routing, cold
    weights; us per call."""
    from ..timing import time_fn

    if mod is None:
        from perfmodel.kernels import moe_w4a16 as mod
    f = lambda i, wt: mod.fused_moe_w4a16(x, *w, i, wt, **kv)  # noqa: E731
    return time_fn(f, args_list=routes, calls_per_graph=len(routes), graph=True, cold_l2="rotate", max_samples=12,
                   max_seconds=0.08).median_ms * 1e3


def graph_replay_diff(x, w, routes, base, **kv) -> float:
    """The layer captured once in a CUDA graph, replayed with each routing copied into its
    buffers: the largest calc_diff against base (one output per routing)."""
    import torch

    from perfmodel.kernels import moe_w4a16 as m
    from perfmodel.kernels._testing import calc_diff

    ids_buf, tw_buf = (t.clone() for t in routes[0])
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        gout = m.fused_moe_w4a16(x, *w, ids_buf, tw_buf, **kv)
    dmax = 0.0
    for r, b in zip(routes, base):
        ids_buf.copy_(r[0])
        tw_buf.copy_(r[1])
        g.replay()
        torch.cuda.synchronize()
        dmax = max(dmax, calc_diff(gout.float(), b.float()))
    return dmax


@contextlib.contextmanager
def module_flags(mod, values: dict):
    """Module constants of `mod` set to `values` inside the block (read at launch and at capture)."""
    old = {k: getattr(mod, k) for k in values}
    for k, v in values.items():
        setattr(mod, k, v)
    try:
        yield
    finally:
        for k, v in old.items():
            setattr(mod, k, v)


def pair_variants(name, T, E, H, I, x, w, routes, variants: dict, rounds: int, warm: bool) -> dict | None:  # noqa: E741
    """The pair path's variants (name -> (kernels.moe_w4a16 constants, fused_moe_w4a16 keywords)):
    each checked on the GPU against the aligned path without PDL, eagerly and under graph replay
    with changing routings; then, unless `warm`, timed interleaved for `rounds` rounds
    (`layer_us`) and printed with each best's share of the read ceiling. Returns name -> the
    rounds' times (us), None when `warm`."""
    import torch

    from perfmodel.kernels import moe_w4a16 as m
    from perfmodel.kernels._testing import calc_diff

    base = [m.fused_moe_w4a16(x, *w, *r, pair_blocks=False, pdl=False) for r in routes]
    for vname, (fl, kv) in variants.items():
        with module_flags(m, fl):
            outs = [m.fused_moe_w4a16(x, *w, *r, pair_blocks=True, **kv) for r in routes]
            torch.cuda.synchronize()
            d = max(calc_diff(a.float(), b.float()) for a, b in zip(base, outs))
            dg = graph_replay_diff(x, w, routes, base, pair_blocks=True, **kv)
        ok = d < 1e-5 and dg < 1e-5
        _p(f"check {name} T={T} {vname}: max calc_diff vs aligned (no PDL) over 8 routings eager {d:.1e}, "
           f"graph replay {dg:.1e} ({'ok' if ok else 'FAIL'})")
    if warm:
        return None
    res = {v: [] for v in variants}
    for _ in range(rounds):
        for vname, (fl, kv) in variants.items():
            with module_flags(m, fl):
                res[vname].append(layer_us(x, w, routes, pair_blocks=True, **kv))
    nb = m.bytes_moved(routes[0][0], E, H, I)
    _p(f"{name} T={T}:")
    for vname, ts in res.items():
        _p(f"    {vname:16s} {' '.join(f'{t:6.1f}' for t in ts)}   best {min(ts):6.1f} us, "
           f"{100 * nb / min(ts) / 1e3 / READ_GBPS:3.0f}% of read")
    return res


def pair_kernel_times(x, w, routes, variants: dict, names) -> None:
    """Per-kernel durations (`_kernel_times`) of the named pair-path variants, printed."""
    from perfmodel.kernels import moe_w4a16 as m

    for vname in names:
        fl, kv = variants[vname]
        with module_flags(m, fl):
            f = lambda i, wt, kv=kv: m.fused_moe_w4a16(x, *w, i, wt, pair_blocks=True, **kv)  # noqa: E731
            _p(f"    kernels {vname}: {_kernel_times(f, routes)}")


def moe(rounds: int, warm: bool) -> None:
    import torch

    from perfmodel.kernels import moe_w4a16 as m
    from perfmodel.kernels._testing import calc_diff

    paths = {"pair": dict(pair_blocks=True), "aligned": dict(pair_blocks=False), "direct": dict(direct=True)}
    variants = {("kimi_tp8", 1): [dict(gate_up_config=dict(split_k=s)) for s in (2, 4, 14)]
                + [dict(gate_up_config=dict(block_n=32)), dict(gate_up_config=dict(block_n=32, split_k=4)),
                   dict(gate_up_config=dict(num_stages=4)), dict(gate_up_config=dict(num_stages=2)),
                   dict(gate_up_config=dict(num_warps=8)),
                   dict(gate_up_config=dict(block_n=128)), dict(gate_up_config=dict(block_n=128, split_k=14)),
                   dict(gate_up_config=dict(split_k=28)), dict(gate_up_config=dict(num_warps=2)),
                   dict(down_config=dict(block_n=64)), dict(down_config=dict(block_n=256)),
                   dict(down_config=dict(num_warps=8)), dict(down_config=dict(block_n=64, num_warps=2))]}
    plan = [("kimi_tp8", T) for T in (1, 2, 3, 4, 8)] + [("qwen3", 1), ("qwen3", 2), ("qwen3", 4), ("kimi_I2048", 1),
                                                         ("kimi_I2048", 2)]
    _p("\n## W4A16 MoE layer, us per call (CUDA graph of 8 calls, 8 routings, cold weights), per round")
    for name, T, H, I, E, k, w, x, routes in moe_cases(plan):
        base = [m.fused_moe_w4a16(x, *w, *r, pair_blocks=False) for r in routes]
        for pname, kv in paths.items():
            outs = [m.fused_moe_w4a16(x, *w, *r, **kv) for r in routes]
            torch.cuda.synchronize()
            d = max(calc_diff(a.float(), b.float()) for a, b in zip(base, outs))
            _p(f"check {name} T={T} {pname} eager: max calc_diff vs aligned over 8 routings {d:.1e} "
               f"({'ok' if d < 1e-5 else 'FAIL'})")
        # graph replay with changing routings: the captured pair path reads the routing buffers
        m.fused_moe_w4a16(x, *w, *routes[0], pair_blocks=True)  # the persistent workspace exists before capture
        torch.cuda.synchronize()
        dmax = graph_replay_diff(x, w, routes, base, pair_blocks=True)
        ws = m._PAIR_WS.get(("cuda", torch.cuda.current_device()))
        clean = ws is not None and int(torch.count_nonzero(ws)) == 0
        _p(f"check {name} T={T} pair under graph replay, 8 routings: max calc_diff {dmax:.1e}; workspace zero "
           f"afterwards: {clean} ({'ok' if dmax < 1e-5 and clean else 'FAIL'})")
        for v in variants.get((name, T), []):
            y = m.fused_moe_w4a16(x, *w, *routes[0], pair_blocks=True, **v)
            torch.cuda.synchronize()
            _p(f"  variant {v}: calc_diff {calc_diff(base[0].float(), y.float()):.1e}")
        if warm:
            continue

        res = {p: [] for p in paths}
        for _ in range(rounds):
            for pname, kv in paths.items():
                res[pname].append(layer_us(x, w, routes, **kv))
        nb = m.bytes_moved(routes[0][0], E, H, I)
        best = {p: min(v) for p, v in res.items()}
        _p(f"{name} T={T}: " + " | ".join(f"{p} {' '.join(f'{t:6.1f}' for t in v)}" for p, v in res.items())
           + f" | best pair {best['pair']:.1f} vs aligned {best['aligned']:.1f} us; pair "
           f"{100 * nb / best['pair'] / 1e3 / READ_GBPS:3.0f}% of read")
        for pname, kv in paths.items():
            f = lambda i, wt, kv=kv: m.fused_moe_w4a16(x, *w, i, wt, **kv)  # noqa: E731
            _p(f"    kernels {pname}: {_kernel_times(f, routes)}")
        for v in variants.get((name, T), []):
            _p(f"    pair {v}: {min(layer_us(x, w, routes, pair_blocks=True, **v) for _ in range(2)):6.1f} us")


def main(argv=None) -> None:
    _ab.main("ab_session8", __doc__, lambda a: moe(a.rounds, a.warm), argv)

if __name__ == "__main__":
    main()
