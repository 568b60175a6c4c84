"""Tuning sweep for MLA tree-verify attention: time tile configs (graph-captured, rotating
KV copies so the cache is cold) on decode and tree shapes, and save the table.

    python -m perfmodel.measure.tuning.tune_attention --out tune_attention.json
"""

from __future__ import annotations

import argparse
import json
import math

FIELDS = ("block_r", "block_s", "num_stages", "num_warps", "split_mult")
# (C, q, L, H) cases, and the tile configs swept on them (block_r None: the default's)
BANDWIDTH = (  # decode and small trees, where the KV stream binds
    [(128, 1, 32768, 8), (128, 1, 8192, 8), (32, 1, 32768, 8), (8, 1, 32768, 8), (32, 9, 8192, 8)],
    [(None, 32, 3, 4, 1), (None, 32, 4, 4, 1), (None, 32, 3, 4, 2), (None, 32, 3, 4, 0.5), (None, 64, 2, 4, 1),
     (None, 64, 2, 4, 2), (None, 16, 3, 4, 1), (None, 16, 4, 4, 2), (None, 32, 2, 4, 2), (None, 64, 3, 8, 1)],
)
COMPUTE = (  # many query rows per sequence (trees x heads, or 64-128 heads): the MMAs bind;
    # 64-row tiles with 8 warps compile to Hopper wgmma (32-row tiles to mma.sync)
    [(32, 17, 8192, 8), (8, 65, 8192, 8), (128, 9, 4096, 8), (128, 1, 8192, 64), (32, 1, 8192, 128)],
    [(32, 64, 2, 4, 1), (64, 32, 2, 8, 1), (64, 64, 2, 8, 1), (64, 32, 3, 8, 1), (64, 32, 1, 8, 1),
     (64, 16, 3, 8, 1), (64, 32, 2, 8, 2), (64, 32, 2, 8, 0.5), (64, 64, 1, 8, 1)],
)


def _sweep_case(C: int, q: int, L: int, H: int, configs) -> list[dict]:
    """Time the default and each config on one (C, q, L, H) MLA case (graph-captured, rotating
    KV copies so that the cache is cold); a config that does not fit is recorded as NaN."""
    import torch

    from perfmodel.kernels import tree_attention as ta

    from ..attention import random_tree_mask
    from ..common import randn
    from ..timing import rotation_copies, time_fn

    rows = []
    S = L + q
    ql, qr = randn(C, q, H, 512), randn(C, q, H, 64)
    kv_bytes = C * S * 576 * 2
    kvs = [(randn(C, S, 512), randn(C, S, 64))
           for _ in range(max(1, min(rotation_copies(kv_bytes, max_copies=16), int(12e9 // kv_bytes))))]
    mask = random_tree_mask(C, q, seed=C + q)
    sm = 1.0 / math.sqrt(192)
    nb, nf = ta.mla_bytes_moved(C, q, L, H), ta.mla_flops(C, q, L, H)
    d0 = ta.default_config(C, 1, q * H, S, 512)
    ref = ta.tree_attention_mla(ql, qr, *kvs[0], mask, sm)
    for c in [None] + list(configs):
        cfg = {} if c is None else {k: v for k, v in zip(FIELDS, c) if v is not None}
        mult = cfg.pop("split_mult", 1)
        base = d0 if "block_r" not in cfg else ta.default_config(C, 1, q * H, S, 512, block_r=cfg["block_r"])
        cfg["num_splits"] = max(1, round(base["num_splits"] * mult))
        try:
            out = ta.tree_attention_mla(ql, qr, *kvs[0], mask, sm, **cfg)
            err = float((out.float() - ref.float()).abs().max())
            t = time_fn(lambda ckv, kpe: ta.tree_attention_mla(ql, qr, ckv, kpe, mask, sm, **cfg), args_list=kvs,
                        graph=True, calls_per_graph=len(kvs), cold_l2="rotate", max_samples=10, max_seconds=0.05)
            us = t.median_ms * 1e3
        except Exception as e:  # a config may not fit in shared memory
            us = err = float("nan")
            print(f"C={C} q={q} L={L} H={H} {c}: {type(e).__name__}: {str(e).splitlines()[0][:100]}")
        label = f"default {d0}" if c is None else str(c)
        gbs, tfs = nb / (us * 1e3), nf / (us * 1e6)
        rows.append({"C": C, "q": q, "L": L, "H": H, "cfg": label, "us": us, "GBps": gbs, "TFLOPS": tfs,
                     "max_err_vs_default": err})
        print(f"C={C:3d} q={q:2d} L={L:5d} H={H:3d} {label:100s} {us:9.1f} us {gbs:7.0f} GB/s {tfs:6.1f} TF "
              f"err {err:.2e}", flush=True)
    del kvs
    torch.cuda.empty_cache()
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tune_attention.json")
    ap.add_argument("--sweep", choices=("bandwidth", "compute", "both"), default="both")
    a = ap.parse_args()
    sweeps = {"bandwidth": [BANDWIDTH], "compute": [COMPUTE], "both": [BANDWIDTH, COMPUTE]}[a.sweep]
    rows = []
    for cases, configs in sweeps:
        for C, q, L, H in cases:
            rows += _sweep_case(C, q, L, H, configs)
    with open(a.out, "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    from ..runner import exit_unless_cuda

    exit_unless_cuda("perfmodel.measure.tuning.tune_attention")
    main()
