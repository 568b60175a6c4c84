"""A/B of W4A16 kernel variants, whole fused op, interleaved rounds (session 4)."""
import importlib, sys, time
sys.path.insert(0, ".exp")
import torch
from perfmodel.measure.common import randn, uniform_topk
from perfmodel.measure.timing import time_fn
VARIANTS = ["v_i32", "v_i16_nomask", "v_i16_mask"]
mods = {v: importlib.import_module(v) for v in VARIANTS}
E, k = 384, 8
CASES = [("kimi_I2048", 7168, 2048, 8), ("kimi_I2048", 7168, 2048, 16), ("kimi_I2048", 7168, 2048, 64), ("kimi_tp8_I256", 7168, 256, 128)]
t0 = time.time()
for name, H, I, T in CASES:
    torch.cuda.empty_cache()
    W = {v: (*mods[v].random_kernel_weights(E, 2 * I, H), *mods[v].random_kernel_weights(E, H, I)) for v in VARIANTS}
    x = randn(T, H)
    routes = [uniform_topk(T, E, k) for _ in range(8)]
    distinct = sum(int(torch.unique(r[0]).numel()) for r in routes) / len(routes)
    nbytes = distinct * 3 * H * I * 0.5625
    res = {v: [] for v in VARIANTS}
    for rnd in range(3):
        for v in VARIANTS:
            m = mods[v]
            w = W[v]
            t = time_fn(lambda i, wt: m.fused_moe_w4a16(x, *w, i, wt), args_list=routes, graph=True,
                        calls_per_graph=len(routes), cold_l2="rotate", max_samples=10, max_seconds=0.1)
            res[v].append(nbytes / (t.median_ms * 1e-3) / 1e9)
    print(f"[{time.time()-t0:5.1f}s] {name} T={T}: " + "  ".join(f"{v} " + "/".join(f"{g:.0f}" for g in res[v]) for v in VARIANTS), flush=True)
    del W
