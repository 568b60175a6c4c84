"""A/B of session 11's decode-size MoE changes (issue 19), on one GPU, in one call: the
pair-summing down's first K-block loaded and dequantised into registers before its wait for
gate_up (`moe_w4a16.DOWN_PAIRS_PRELOAD_MAX_KB`, kernel knob PRELOAD) against only prefetching it
into L2 (session 10), at down's tiles, warps and stages; interleaved, timed as the moe bench times (CUDA
graph of one call per routing, 8 routings, cold weights), with per-kernel durations. Every
variant is checked first against the aligned path without PDL, eagerly and under graph replay
with changing routings.

Earlier versions of this tool (their logs are in runs/tuning/session11/, named by commit) also
timed three ideas that lost and whose code is gone: at c1da92a the decode kernels as links of a
chain of dependent launches, at 24b950a L2 prefetches at the start of gate_up's programs and of
decode attention's split programs, at 9c65d2e down waiting for gate_up by spinning on a done
counter instead of in griddepcontrol.wait.

    python -m perfmodel.measure.tuning.ab_session11 [--rounds 3] [--warm] [--gate-up]
"""

from __future__ import annotations

from . import _ab
from ._ab import p as _p
from .ab_session8 import moe_cases, pair_kernel_times, pair_variants

# name -> (moe_w4a16 module constants, fused_moe_w4a16 keywords)
VARIANTS = {
    "s10": (dict(DOWN_PAIRS_PRELOAD_MAX_KB=0), {}),
    "preload": (dict(DOWN_PAIRS_PRELOAD_MAX_KB=8), {}),
    "preload_w4": (dict(DOWN_PAIRS_PRELOAD_MAX_KB=8), dict(down_config=dict(num_warps=4))),
    "preload_bn32": (dict(DOWN_PAIRS_PRELOAD_MAX_KB=8), dict(down_config=dict(block_n=32))),
    "preload_st2": (dict(DOWN_PAIRS_PRELOAD_MAX_KB=8), dict(down_config=dict(num_stages=2))),
}
# --gate-up: gate_up's tiles, warps, splits and stages at one token, with the defaults of the commit it runs at
GATE_UP = {"default": ({}, {})} | {
    n: ({}, dict(gate_up_config=c)) for n, c in {
        "gu_bn128_w8": dict(block_n=128, num_warps=8),
        "gu_bn128_w8_s14": dict(block_n=128, num_warps=8, split_k=14),
        "gu_bn128_s14": dict(block_n=128, split_k=14),
        "gu_s14": dict(split_k=14),
        "gu_bn32_s14": dict(block_n=32, split_k=14),
        "gu_w8_s14": dict(num_warps=8, split_k=14),
        "gu_st2": dict(num_stages=2),
        "gu_st4": dict(num_stages=4),
    }.items()}
PLAN = [("kimi_tp8", 1), ("qwen3", 1)]


def moe(rounds: int, warm: bool, variants: dict = VARIANTS, kernels=("s10", "preload")) -> None:
    _p("\n## W4A16 MoE layer (pair path, PDL), us per call (CUDA graph of 8 calls, 8 routings, cold weights), per round")
    for name, T, H, I, E, k, w, x, routes in moe_cases(PLAN):
        if pair_variants(name, T, E, H, I, x, w, routes, variants, rounds, warm) is not None:
            pair_kernel_times(x, w, routes, variants, kernels)


def _run(a) -> None:
    if a.gate_up:
        moe(a.rounds, a.warm, GATE_UP, ("default",))
    else:
        moe(a.rounds, a.warm)


def main(argv=None) -> None:
    _ab.main("ab_session11", __doc__, _run, argv,
             flags=(("--gate-up", "gate_up's tiles, warps, splits and stages at one token (GATE_UP)"),))


if __name__ == "__main__":
    main()
