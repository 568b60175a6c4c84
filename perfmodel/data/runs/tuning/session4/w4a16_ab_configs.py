"""A/B of W4A16 tile configs, whole fused op, interleaved rounds (session 4)."""
import sys, time
import torch
from perfmodel.kernels import moe_w4a16 as m
from perfmodel.measure.common import randn, uniform_topk
from perfmodel.measure.timing import time_fn
F = ("block_n", "num_warps", "num_stages", "max_regs")
CFGS = {
    "A default": ((64, 4, 3, None), (128, 4, 2, None)),
    "B s2 r80": ((64, 4, 2, 80), (128, 4, 2, 80)),
    "C gu32x2": ((32, 2, 2, None), (128, 4, 2, None)),
    "D s3 r80": ((64, 4, 3, 80), (128, 4, 2, 80)),
    "E s2": ((64, 4, 2, None), (128, 4, 2, None)),
}
E, k = 384, 8
CASES = [("kimi_I2048", 7168, 2048, 8), ("kimi_I2048", 7168, 2048, 16), ("kimi_I2048", 7168, 2048, 64), ("kimi_tp8_I256", 7168, 256, 128)]
t0 = time.time()
for name, H, I, T in CASES:
    torch.cuda.empty_cache()
    W = (*m.random_kernel_weights(E, 2 * I, H), *m.random_kernel_weights(E, H, I))
    x = randn(T, H)
    routes = [uniform_topk(T, E, k) for _ in range(8)]
    distinct = sum(int(torch.unique(r[0]).numel()) for r in routes) / len(routes)
    nbytes = distinct * 3 * H * I * 0.5625
    res = {c: [] for c in CFGS}
    for rnd in range(3):
        for c, (g, d) in CFGS.items():
            kw = dict(gate_up_config=dict(zip(F, g)), down_config=dict(zip(F, d)))
            t = time_fn(lambda i, wt: m.fused_moe_w4a16(x, *W, i, wt, **kw), args_list=routes, graph=True,
                        calls_per_graph=len(routes), cold_l2="rotate", max_samples=10, max_seconds=0.1)
            res[c].append(nbytes / (t.median_ms * 1e-3) / 1e9)
    print(f"[{time.time()-t0:5.1f}s] {name} T={T}: " + "  ".join(f"{c}: " + "/".join(f"{g:.0f}" for g in res[c]) for c in CFGS), flush=True)
    del W
