"""A/B of session 10's decode-size MoE change (issue 19), on one GPU, in one call: the pair
path's down as one program per column tile summing every pair in registers (`down_pairs`, no
fp32 atomics, arrival counter or last-arrival cast) against the atomic down, at its column
tiles, warps and stages, with and without the dependent launch (PDL); interleaved, timed as the
moe bench times (CUDA graph of 8 calls with their own routings, cold weights), with per-kernel
durations. Every variant is checked on the GPU first against the aligned path without PDL,
eagerly and under graph replay with changing routings.

    python -m perfmodel.measure.tuning.ab_session10 [--rounds 3] [--warm] [--final]

--final times only the defaults against the atomic down (with and without PDL), at one token.
"""

from __future__ import annotations

from . import _ab
from ._ab import READ_GBPS
from ._ab import p as _p
from .ab_session8 import _kernel_times, graph_replay_diff, layer_us, moe_cases

# name -> fused_moe_w4a16 keywords (pair path); "atomic" is the down before this session
VARIANTS = {
    "atomic": dict(down_pairs=False),
    "pairs": dict(down_pairs=True),  # down_pairs_config's tile
    "pairs_bn16_w2": dict(down_pairs=True, down_config=dict(block_n=16, num_warps=2)),
    "pairs_bn16_w8": dict(down_pairs=True, down_config=dict(block_n=16, num_warps=8)),
    "pairs_bn16_st2": dict(down_pairs=True, down_config=dict(block_n=16, num_stages=2)),
    "pairs_bn32": dict(down_pairs=True, down_config=dict(block_n=32)),
    "pairs_bn32_w8": dict(down_pairs=True, down_config=dict(block_n=32, num_warps=8)),
    "pairs_no_pdl": dict(down_pairs=True, pdl=False),
    "atomic_no_pdl": dict(down_pairs=False, pdl=False),
}


FINAL = ("atomic", "pairs", "pairs_no_pdl", "atomic_no_pdl")


def moe(rounds: int, warm: bool, plan, names=tuple(VARIANTS)) -> None:
    import torch

    from perfmodel.kernels import moe_w4a16 as m
    from perfmodel.kernels._testing import calc_diff

    _p("\n## W4A16 MoE layer (pair path), us per call (CUDA graph of 8 calls, 8 routings, cold weights), per round")
    for name, T, H, I, E, k, w, x, routes in moe_cases(plan):
        base = [m.fused_moe_w4a16(x, *w, *r, pair_blocks=False, pdl=False) for r in routes]
        variants = {n: VARIANTS[n] for n in names}
        for vname, kv in variants.items():
            outs = [m.fused_moe_w4a16(x, *w, *r, pair_blocks=True, **kv) for r in routes]
            torch.cuda.synchronize()
            d = max(calc_diff(a.float(), b.float()) for a, b in zip(base, outs))
            dg = graph_replay_diff(x, w, routes, base, pair_blocks=True, **kv)
            ok = d < 1e-5 and dg < 1e-5
            _p(f"check {name} T={T} {vname}: max calc_diff vs aligned (no PDL) over 8 routings eager {d:.1e}, "
               f"graph replay {dg:.1e} ({'ok' if ok else 'FAIL'})")
        if warm:
            continue

        res = {v: [] for v in variants}
        for _ in range(rounds):
            for vname, kv in variants.items():
                res[vname].append(layer_us(x, w, routes, pair_blocks=True, **kv))
        nb = m.bytes_moved(routes[0][0], E, H, I)
        best = {v: min(t) for v, t in res.items()}
        win = min(best, key=best.get)
        _p(f"{name} T={T}:")
        for vname, ts in res.items():
            _p(f"    {vname:16s} {' '.join(f'{t:6.1f}' for t in ts)}   best {best[vname]:6.1f} us, "
               f"{100 * nb / best[vname] / 1e3 / READ_GBPS:3.0f}% of read")
        _p(f"    fastest: {win} {best[win]:.1f} us (atomic {best['atomic']:.1f}, pairs {best['pairs']:.1f})")
        for vname in dict.fromkeys(("atomic", "pairs", win)):
            kv = variants[vname]
            f = lambda i, wt, kv=kv: m.fused_moe_w4a16(x, *w, i, wt, pair_blocks=True, **kv)  # noqa: E731
            _p(f"    kernels {vname}: {_kernel_times(f, routes)}")


PLAN = [("kimi_tp8", 1), ("kimi_tp8", 2), ("qwen3", 1), ("qwen3", 2), ("kimi_I2048", 1)]


def _run(a) -> None:
    if a.final:
        moe(a.rounds, a.warm, [(n, T) for n, T in PLAN if T == 1], FINAL)
    else:
        moe(a.rounds, a.warm, PLAN)


def main(argv=None) -> None:
    _ab.main("ab_session10", __doc__, _run, argv,
             flags=(("--final", "the defaults against the atomic down, one token"),))

if __name__ == "__main__":
    main()
