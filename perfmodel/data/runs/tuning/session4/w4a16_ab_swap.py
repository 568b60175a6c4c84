"""A/B: block_m 16 (weights as MMA B operand) vs 8 (swapped: weights as A), whole fused op, interleaved."""
import time
import torch
from perfmodel.kernels import moe_w4a16 as m
from perfmodel.measure.common import randn, uniform_topk
from perfmodel.measure.timing import time_fn
F = ("block_n", "num_warps", "num_stages")
CFGS = {
    "A bm16": (16, (64, 4, 3), (128, 4, 2)),
    "B bm8": (8, (64, 4, 3), (128, 4, 2)),
    "C bm8 s2/s3": (8, (64, 4, 2), (128, 4, 3)),
    "D bm8 down64": (8, (64, 4, 3), (64, 4, 3)),
}
E, k = 384, 8
CASES = [("kimi_I2048", 7168, 2048, 1), ("kimi_I2048", 7168, 2048, 8), ("kimi_I2048", 7168, 2048, 16),
         ("kimi_I2048", 7168, 2048, 64), ("kimi_tp8_I256", 7168, 256, 128)]
t0 = time.time()
for name, H, I, T in CASES:
    torch.cuda.empty_cache()
    W = (*m.random_kernel_weights(E, 2 * I, H), *m.random_kernel_weights(E, H, I))
    x = randn(T, H)
    routes = [uniform_topk(T, E, k) for _ in range(8)]
    distinct = sum(int(torch.unique(r[0]).numel()) for r in routes) / len(routes)
    nbytes = distinct * 3 * H * I * 0.5625
    ref = m.fused_moe_w4a16(x, *W, *routes[0], block_m=16).float()
    res = {c: [] for c in CFGS}
    for rnd in range(3):
        for c, (bm, g, d) in CFGS.items():
            kw = dict(block_m=bm, gate_up_config=dict(zip(F, g)), down_config=dict(zip(F, d)))
            if rnd == 0:
                o = m.fused_moe_w4a16(x, *W, *routes[0], **kw).float()
                err = float((o - ref).abs().max() / ref.abs().max())
                assert err < 2e-2, (c, err)
            t = time_fn(lambda i, wt: m.fused_moe_w4a16(x, *W, i, wt, **kw), args_list=routes, graph=True,
                        calls_per_graph=len(routes), cold_l2="rotate", max_samples=10, max_seconds=0.1)
            res[c].append(nbytes / (t.median_ms * 1e-3) / 1e9)
    print(f"[{time.time()-t0:5.1f}s] {name} T={T}: " + "  ".join(f"{c}: " + "/".join(f"{g:.0f}" for g in res[c]) for c in CFGS), flush=True)
    del W
