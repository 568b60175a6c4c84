"""Session-4 exploration: W4A16 GEMM variants vs the current kernel on the H200."""
import itertools, json, sys, time
sys.path.insert(0, ".exp")
import torch
import w4exp
from perfmodel.kernels import moe_w4a16 as m
from perfmodel.kernels._moe_common import as_config, moe_align_block_size
from perfmodel.measure.common import randn, uniform_topk
from perfmodel.measure.timing import time_fn

E, k = 384, 8
CASES = [("kimi_I2048", 7168, 2048, 8), ("kimi_I2048", 7168, 2048, 64), ("kimi_tp8_I256", 7168, 256, 128)]
TILES = [(64, 4, 3), (64, 4, 2), (128, 4, 2), (128, 8, 2)]
out_rows = []
t_start = time.time()


def log(*a):
    print(f"[{time.time() - t_start:6.1f}s]", *a, flush=True)


def tm(fn, routes):
    t = time_fn(fn, args_list=routes, graph=True, calls_per_graph=len(routes), cold_l2="rotate",
                max_samples=10, max_seconds=0.05)
    return t.median_ms * 1e3


for name, H, I, T in CASES:
    torch.cuda.empty_cache()
    w13, s13 = m.random_kernel_weights(E, 2 * I, H)
    w2, s2 = m.random_kernel_weights(E, H, I)
    tiled = {}
    for bn in sorted({t[0] for t in TILES}):
        for jf in (True,):
            tiled[bn, jf] = (*w4exp.tile_layout(w13, s13, bn, jf, jf), *w4exp.tile_layout(w2, s2, bn, jf, jf))
    bm, gu0, dn0 = m.default_configs(T, k, E, H, I)
    x = randn(T, H)
    hbuf = randn(T * k, I)
    routes = []
    for _ in range(8):
        ids, wts = uniform_topk(T, E, k)
        routes.append((moe_align_block_size(ids, E, bm), wts.reshape(-1).float().contiguous(),
                       int(torch.unique(ids).numel())))
    distinct = sum(r[2] for r in routes) / len(routes)
    for gemm in ("gate_up", "down"):
        n_w = distinct * (2 * I * H if gemm == "gate_up" else H * I) * (0.5 + 2 / 32)
        gu = gemm == "gate_up"

        def mk_out():
            return (torch.empty((T * k, I), dtype=x.dtype, device=x.device) if gu
                    else torch.zeros((T, H), dtype=torch.float32, device=x.device))

        def base(routing, tw, _d):
            c = mk_out()
            if gu:
                m._launch(x, w13, s13, c, None, routing, n=I, k_dim=H, a_row_div=k, c_row_div=1, gate_up=True,
                          atomic=False, cfg=gu0)
            else:
                m._launch(hbuf, w2, s2, c, tw, routing, n=H, k_dim=I, a_row_div=1, c_row_div=k, gate_up=False,
                          atomic=True, cfg=dn0)
            return c

        def exp(routing, tw, _d, bn, warps, stages, tiled_, n_fast, read_only=False, dq8=False, jf=False, mr=None):
            c = mk_out()
            if tiled_:
                q13, q13s, q2, q2s = tiled[bn, jf]
            else:
                q13, q13s, q2, q2s = w13, s13, w2, s2
            if gu:
                w4exp.launch(x, q13, q13s, c, None, routing, n=I, k_dim=H, a_row_div=k, c_row_div=1, gate_up=True,
                             atomic=False, bn=bn, warps=warps, stages=stages, tiled=tiled_, n_fast=n_fast,
                             read_only=read_only, dq8=dq8, jfast=jf, scol=jf, maxnreg=mr)
            else:
                w4exp.launch(hbuf, q2, q2s, c, tw, routing, n=H, k_dim=I, a_row_div=1, c_row_div=k, gate_up=False,
                             atomic=True, bn=bn, warps=warps, stages=stages, tiled=tiled_, n_fast=n_fast,
                             read_only=read_only, dq8=dq8, jfast=jf, scol=jf, maxnreg=mr)
            return c

        ref = base(*routes[0]).float()
        us = tm(base, routes)
        log(f"{name:14s} T={T:4d} {gemm:7s} base {us:8.1f} us {n_w / us / 1e3:7.0f} GB/s")
        out_rows.append(dict(shape=name, T=T, gemm=gemm, variant="base", us=us, GBps=n_w / us / 1e3))
        variants = [(t, True, True, False, False, True, None) for t in TILES]
        variants += [((128, 4, 2), True, True, False, False, True, 168), ((128, 4, 3), True, True, False, False, True, 168),
                     ((64, 4, 3), True, True, False, False, True, 96), ((64, 4, 2), True, True, False, False, True, 80)]
        for (bn, warps, stages), tiled_, n_fast, ro, dq8, jf, mr in variants:
                label = f"bn{bn} w{warps} s{stages} jf={int(jf)} maxnreg={mr}"
                try:
                    f = lambda r, tw, d: exp(r, tw, d, bn, warps, stages, tiled_, n_fast, ro, dq8, jf, mr)
                    err = float("nan")
                    if not ro:
                        o = f(*routes[0]).float()
                        err = float((o - ref).abs().max() / ref.abs().max().clamp_min(1e-30))
                    us = tm(f, routes)
                except Exception as e:
                    log(f"{label}: {type(e).__name__}: {str(e).splitlines()[0][:150]}")
                    continue
                log(f"{name:14s} T={T:4d} {gemm:7s} {label:40s} {us:8.1f} us {n_w / us / 1e3:7.0f} GB/s err {err:.1e}")
                out_rows.append(dict(shape=name, T=T, gemm=gemm, variant=label, us=us, GBps=n_w / us / 1e3, err=err))
    del w13, s13, w2, s2, tiled
json.dump(out_rows, open(sys.argv[1] if len(sys.argv) > 1 else "bench.json", "w"), indent=1)
