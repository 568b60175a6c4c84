"""Tuning sweep for the W4A16 fused MoE: time a few tile configs per (shape, T), graph-captured
with rotating routing (cold weights), and print / save the table.

    python -m perfmodel.measure.tune_moe --out tune_moe.json
"""

from __future__ import annotations

import argparse
import json

CONFIGS = [  # (block_n, block_k, num_warps, num_stages, split_k); INT4 unrolls block_k / 32 groups
    (64, 32, 4, 6, 1), (64, 64, 4, 4, 1), (64, 128, 4, 3, 1), (64, 128, 4, 4, 1), (32, 128, 4, 4, 1),
    (64, 256, 4, 3, 1), (128, 128, 4, 3, 1), (64, 128, 8, 4, 1),
]
CASES = [("kimi_I2048", 7168, 2048, 1), ("kimi_I2048", 7168, 2048, 64), ("kimi_tp8_I256", 7168, 256, 8),
         ("kimi_tp8_I256", 7168, 256, 128)]


def main() -> None:
    import torch

    from perfmodel.kernels import moe_w4a16

    from .common import random_int32, random_scales, randn, uniform_topk
    from .timing import time_fn

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tune_moe.json")
    a = ap.parse_args()
    E, k = 384, 8
    rows = []
    weights = {}
    for name, H, I, T in CASES:
        if name not in weights:
            weights.clear()
            torch.cuda.empty_cache()
            weights[name] = (random_int32(E, 2 * I, H // 8), random_scales(E, 2 * I, H // 32),
                             random_int32(E, H, I // 8), random_scales(E, H, I // 32))
        w13, s13, w2, s2 = weights[name]
        x = randn(T, H)
        routes = [uniform_topk(T, E, k) for _ in range(8)]
        nb = sum(moe_w4a16.bytes_moved(i, E, H, I) for i, _ in routes) / len(routes)
        for c in CONFIGS + [None]:
            cfg = None if c is None else dict(zip(("block_n", "block_k", "num_warps", "num_stages", "split_k"), c))
            try:
                t = time_fn(lambda i, w: moe_w4a16.fused_moe_w4a16(x, w13, s13, w2, s2, i, w, gate_up_config=cfg,
                                                                   down_config=cfg),
                            args_list=routes, graph=True, calls_per_graph=len(routes), cold_l2="rotate",
                            max_samples=8, max_seconds=0.05)
                us, gbs = t.median_ms * 1e3, nb / (t.median_ms * 1e-3) / 1e9
            except Exception as e:  # a config may not compile or fit
                us, gbs = float("nan"), float("nan")
                print(f"{name} T={T} {cfg}: {type(e).__name__}: {str(e).splitlines()[0][:120]}")
            rows.append({"shape": name, "T": T, "cfg": cfg or "default", "us": us, "GBps": gbs})
            print(f"{name:14s} T={T:4d} {str(cfg or 'default'):90s} {us:9.1f} us {gbs:7.0f} GB/s", flush=True)
    with open(a.out, "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
