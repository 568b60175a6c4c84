"""A/B of W4A16 MoE launch configs: the whole fused op, graph-captured over 8 rotating routings,
3 interleaved rounds (so clock drift hits every config alike). Prints GB/s of the distinct experts'
weight bytes (INT4 + bf16 scales) per round.

    python -m perfmodel.measure.tuning.w4a16_ab --set tiles  # tile configs of the kernel
    python -m perfmodel.measure.tuning.w4a16_ab --set swap   # block_m 16 vs 8

Their logs are indexed in runs/README.md.

With `--set swap` each config is first checked against the block_m 16 output (max error < 2% of the max).
"""

from __future__ import annotations

import argparse
import time

E, K_ROUTED = 384, 8
KIMI = ("kimi_I2048", 7168, 2048)
TP8 = ("kimi_tp8_I256", 7168, 256)
# name -> (block_m or None for the default, gate_up (block_n, warps, stages, max_regs), down (...))
SETS = {
    "tiles": {
        "A default": (None, (64, 4, 3, None), (128, 4, 2, None)),
        "B s2 r80": (None, (64, 4, 2, 80), (128, 4, 2, 80)),
        "C gu32x2": (None, (32, 2, 2, None), (128, 4, 2, None)),
        "D s3 r80": (None, (64, 4, 3, 80), (128, 4, 2, 80)),
        "E s2": (None, (64, 4, 2, None), (128, 4, 2, None)),
    },
    "swap": {
        "A bm16": (16, (64, 4, 3, None), (128, 4, 2, None)),
        "B bm8": (8, (64, 4, 3, None), (128, 4, 2, None)),
        "C bm8 s2/s3": (8, (64, 4, 2, None), (128, 4, 3, None)),
        "D bm8 down64": (8, (64, 4, 3, None), (64, 4, 3, None)),
    },
}
CASES = {
    "tiles": [(*KIMI, 8), (*KIMI, 16), (*KIMI, 64), (*TP8, 128)],
    "swap": [(*KIMI, 1), (*KIMI, 8), (*KIMI, 16), (*KIMI, 64), (*TP8, 128)],
}
FIELDS = ("block_n", "num_warps", "num_stages", "max_regs")


def _kwargs(block_m, gate_up, down) -> dict:
    kw = dict(gate_up_config=dict(zip(FIELDS, gate_up)), down_config=dict(zip(FIELDS, down)))
    return kw if block_m is None else dict(kw, block_m=block_m)


def run(which: str) -> None:
    import torch

    from perfmodel.kernels import moe_w4a16 as m

    from ..common import randn, uniform_topk
    from ..timing import time_fn

    cfgs, check = SETS[which], which == "swap"
    t0 = time.time()
    for name, H, I, T in CASES[which]:
        torch.cuda.empty_cache()
        W = (*m.random_kernel_weights(E, 2 * I, H), *m.random_kernel_weights(E, H, I))
        x = randn(T, H)
        routes = [uniform_topk(T, E, K_ROUTED) for _ in range(8)]
        distinct = sum(int(torch.unique(r[0]).numel()) for r in routes) / len(routes)
        nbytes = distinct * 3 * H * I * 0.5625
        ref = m.fused_moe_w4a16(x, *W, *routes[0], block_m=16).float() if check else None
        res = {c: [] for c in cfgs}
        for rnd in range(3):
            for c, cfg in cfgs.items():
                kw = _kwargs(*cfg)
                if check and rnd == 0:
                    o = m.fused_moe_w4a16(x, *W, *routes[0], **kw).float()
                    err = float((o - ref).abs().max() / ref.abs().max())
                    assert err < 2e-2, (c, err)
                t = time_fn(lambda i, wt, kw=kw: m.fused_moe_w4a16(x, *W, i, wt, **kw), args_list=routes, graph=True,
                            calls_per_graph=len(routes), cold_l2="rotate", max_samples=10, max_seconds=0.1)
                res[c].append(nbytes / (t.median_ms * 1e-3) / 1e9)
        rows = "  ".join(f"{c}: " + "/".join(f"{g:.0f}" for g in res[c]) for c in cfgs)
        print(f"[{time.time() - t0:5.1f}s] {name} T={T}: {rows}", flush=True)
        del W


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", choices=sorted(SETS), default="swap")
    args = ap.parse_args()
    run(args.set)


if __name__ == "__main__":
    from ..runner import exit_unless_cuda

    exit_unless_cuda("perfmodel.measure.tuning.w4a16_ab")
    main()
