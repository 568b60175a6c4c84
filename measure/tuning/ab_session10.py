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
from ._ab import p as _p
from .ab_session8 import moe_cases, pair_kernel_times, pair_variants

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
    _p("\n## W4A16 MoE layer (pair path), us per call (CUDA graph of 8 calls, 8 routings, cold weights), per round")
    variants = {n: ({}, VARIANTS[n]) for n in names}
    for name, T, H, I, E, k, w, x, routes in moe_cases(plan):
        res = pair_variants(name, T, E, H, I, x, w, routes, variants, rounds, warm)
        if res is None:
            continue
        best = {v: min(t) for v, t in res.items()}
        win = min(best, key=best.get)
        _p(f"    fastest: {win} {best[win]:.1f} us (atomic {best['atomic']:.1f}, pairs {best['pairs']:.1f})")
        pair_kernel_times(x, w, routes, variants, dict.fromkeys(("atomic", "pairs", win)))


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
