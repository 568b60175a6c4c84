"""Tuning sweeps for the fused MoE kernels (graph-captured, rotating routing so the weights
are cold), saved as a table.

    python -m perfmodel.measure.tuning.tune_moe --out tune_moe.json          # W4A16: each GEMM alone
    python -m perfmodel.measure.tuning.tune_moe --bf16 --out tune_bf16.json  # bf16 at large T, whole
                                                                      # op, vs torch._grouped_mm
"""

from __future__ import annotations

import argparse
import json

FIELDS = ("block_n", "num_warps", "num_stages", "split_k", "dequant", "max_regs")
CONFIGS = [  # tiled layout: bf16x2 PTX over tiles, register caps for occupancy, the convert
    (64, 4, 3, 1, 2, None), (64, 4, 2, 1, 2, None), (64, 4, 2, 1, 2, 80), (64, 4, 3, 1, 2, 80),
    (128, 4, 2, 1, 2, None), (128, 4, 2, 1, 2, 80), (128, 4, 3, 1, 2, None), (32, 2, 2, 1, 2, None),
    (32, 2, 3, 1, 2, None), (64, 2, 2, 1, 2, None), (64, 4, 3, 1, 0, None),
]
# (shape, H, I, T): decode-sized token counts where the GEMMs stream weights
CASES = [("kimi_I2048", 7168, 2048, 1), ("kimi_I2048", 7168, 2048, 8), ("kimi_I2048", 7168, 2048, 64),
         ("kimi_tp8_I256", 7168, 256, 8), ("kimi_tp8_I256", 7168, 256, 128)]


def check_correctness(log) -> None:
    """Fused op vs the torch reference at a Kimi-like shape (fewer experts)."""
    import torch

    from perfmodel.kernels import moe_w4a16 as m
    from perfmodel.kernels._testing import calc_diff

    from ..common import uniform_topk

    gen = torch.Generator(device="cuda").manual_seed(0)
    E, H, I, k = 16, 7168, 2048, 8
    w13 = m.quantize_int4_g32(torch.randn(E, 2 * I, H, device="cuda", generator=gen) / H**0.5)
    w2 = m.quantize_int4_g32(torch.randn(E, H, I, device="cuda", generator=gen) / I**0.5)
    kw = (*m.pack_for_kernel(*w13), *m.pack_for_kernel(*w2))
    for T in (1, 8, 64):
        x = torch.randn(T, H, device="cuda", generator=gen).to(torch.bfloat16)
        ids, wts = uniform_topk(T, E, k, generator=gen)
        ref = m.fused_moe_w4a16_reference(x.float(), *w13, *w2, ids, wts)
        for c in CONFIGS:
            cfg = dict(zip(FIELDS, c))
            out = m.fused_moe_w4a16(x, *kw, ids, wts, gate_up_config=cfg, down_config=cfg)
            d = calc_diff(out, ref)
            if d > 1e-4:
                log(f"MISMATCH T={T} cfg={cfg} diff={d:.2e}")
        log(f"correctness T={T}: checked {len(CONFIGS)} configs")


BF16_FIELDS = ("block_m", "block_n", "block_k", "num_warps", "num_stages")
BF16_CONFIGS = [(64, 64, 64, 4, 3), (64, 128, 64, 4, 3), (64, 128, 64, 8, 3), (128, 128, 64, 8, 3),
                (128, 128, 32, 8, 4), (64, 64, 128, 4, 3), (128, 64, 64, 4, 3), (32, 64, 128, 4, 3)]
BF16_CASES = [("qwen3_30b_a3b", 2048, 768, 128, 8, T) for T in (1024, 2048, 4096)] + \
             [("kimi_tp8_I256", 7168, 256, 384, 8, T) for T in (2048, 4096)]


def tune_bf16(out: str) -> None:
    """Whole bf16 fused-MoE op per tile config at large T (where it is compute-bound), beside
    the torch._grouped_mm baseline timed the same way."""
    import torch

    from perfmodel.kernels import moe_bf16

    from ..common import randn, uniform_topk
    from ..timing import time_fn

    rows = []
    for name, H, I, E, k, T in BF16_CASES:
        w13, w2 = randn(E, 2 * I, H, scale=0.02), randn(E, H, I, scale=0.02)
        x = randn(T, H)
        routes = [uniform_topk(T, E, k) for _ in range(4)]
        ref = moe_bf16.fused_moe_bf16_reference(x, w13, w2, *routes[0]).float()
        tk = dict(args_list=routes, graph=True, calls_per_graph=len(routes), cold_l2="rotate", max_samples=8,
                  max_seconds=0.05)
        base = time_fn(lambda i, w: moe_bf16.grouped_mm_moe_torch(x, w13, w2, i, w), **tk).median_ms * 1e3
        for c in [None] + BF16_CONFIGS:
            kw = {} if c is None else dict(block_m=c[0], gate_up_config=dict(zip(BF16_FIELDS[1:], c[1:])),
                                           down_config=dict(zip(BF16_FIELDS[1:], c[1:])))
            try:
                out_ = moe_bf16.fused_moe_bf16(x, w13, w2, *routes[0], **kw).float()
                err = float((out_ - ref).abs().max() / ref.abs().max())
                us = time_fn(lambda i, w: moe_bf16.fused_moe_bf16(x, w13, w2, i, w, **kw), **tk).median_ms * 1e3
            except Exception as e:  # a config may not fit in shared memory
                us = err = float("nan")
                print(f"{name} T={T} {c}: {type(e).__name__}: {str(e).splitlines()[0][:100]}")
            label = "default" if c is None else str(c)
            rows.append({"shape": name, "T": T, "cfg": label, "us": us, "grouped_mm_us": base, "ratio": us / base,
                         "max_rel_err": err})
            print(f"{name:14s} T={T:5d} {label:28s} {us:9.1f} us  grouped_mm {base:9.1f} us  ratio {us / base:5.2f}"
                  f"  err {err:.1e}", flush=True)
        del w13, w2
        torch.cuda.empty_cache()
    with open(out, "w") as f:
        json.dump(rows, f, indent=1)


def main() -> None:
    import torch

    from perfmodel.kernels import moe_w4a16 as m
    from perfmodel.kernels._moe_common import as_config, moe_align_block_size

    from ..common import randn, uniform_topk
    from ..timing import time_fn

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tune_moe.json")
    ap.add_argument("--bf16", action="store_true", help="sweep the bf16 kernel at large T instead")
    ap.add_argument("--block-m", type=int, default=None, choices=(8, 16, 32, 64),
                    help="W4A16 routing block (default: default_configs' choice; 8 swaps the MMA operands)")
    a = ap.parse_args()
    if a.bf16:
        tune_bf16(a.out)
        return
    check_correctness(print)
    E, k = 384, 8
    rows = []
    weights = {}
    for name, H, I, T in CASES:
        if name not in weights:
            weights.clear()
            torch.cuda.empty_cache()
            weights[name] = (*m.random_kernel_weights(E, 2 * I, H), *m.random_kernel_weights(E, H, I))
        w13, s13, w2, s2 = weights[name]
        bm, gu0, dn0 = m.default_configs(T, k, E, H, I)
        bm = a.block_m or bm
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
            for c in [None] + CONFIGS:
                cfg = as_config(None if c is None else dict(zip(FIELDS, c)), gu0 if gemm == "gate_up" else dn0)

                def fn(routing, tw, _d, cfg=cfg, gemm=gemm):
                    if gemm == "gate_up":
                        if cfg.split_k == 1:
                            out = torch.empty((T * k, I), dtype=x.dtype, device=x.device)
                            m._launch(x, w13, s13, out, None, routing, n=I, k_dim=H, a_row_div=k, c_row_div=1,
                                      gate_up=True, atomic=False, cfg=cfg)
                        else:
                            out = torch.zeros((T * k, 2 * I), dtype=torch.float32, device=x.device)
                            m._launch(x, w13, s13, out, None, routing, n=2 * I, k_dim=H, a_row_div=k, c_row_div=1,
                                      gate_up=False, atomic=True, cfg=cfg)
                    else:
                        out = torch.zeros((T, H), dtype=torch.float32, device=x.device)
                        m._launch(hbuf, w2, s2, out, tw, routing, n=H, k_dim=I, a_row_div=1, c_row_div=k,
                                  gate_up=False, atomic=True, cfg=cfg)

                try:
                    t = time_fn(fn, args_list=routes, graph=True, calls_per_graph=len(routes), cold_l2="rotate",
                                max_samples=10, max_seconds=0.05)
                    us, gbs = t.median_ms * 1e3, n_w / (t.median_ms * 1e-3) / 1e9
                except Exception as e:  # a config may not compile or fit in shared memory
                    us, gbs = float("nan"), float("nan")
                    print(f"{name} T={T} {gemm} {c}: {type(e).__name__}: {str(e).splitlines()[0][:120]}")
                label = "default " + str(tuple(getattr(cfg, f) for f in FIELDS)) if c is None else str(c)
                rows.append({"shape": name, "T": T, "gemm": gemm, "block_m": bm, "cfg": label, "us": us,
                             "weight_GBps": gbs, "distinct_experts": distinct})
                print(f"{name:14s} T={T:4d} bm={bm:2d} {gemm:7s} {label:34s} {us:9.1f} us {gbs:7.0f} GB/s", flush=True)
    with open(a.out, "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    from ..runner import exit_unless_cuda

    exit_unless_cuda("perfmodel.measure.tuning.tune_moe")
    main()
