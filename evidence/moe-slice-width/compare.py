"""DeepSeek-V3's routed experts at decode token counts in aiconfigurator-core's per-op database:
the per-GPU MoE latency by (moe_tp, moe_ep) on 8 GPUs, and what perfmodel prices for the same op.

    python evidence/moe-slice-width/compare.py > evidence/moe-slice-width/compare.txt
    python evidence/moe-slice-width/compare.py --no-slice-overhead > evidence/moe-slice-width/compare_before.txt

(`--no-slice-overhead`: perfmodel's prices without the per-slice term, as before the rule.)

Shape: hidden 7168, moe_intermediate 2048, 256 experts, top-8 (DeepSeek-V3/R1), the database's
"balanced" routing. Rows: each system, engine (the package's maintained version) and weight format
the database holds for that shape. For each token count T:

  us tpXepY   the measured µs of one GPU's MoE call in that layout (tp x ep = 8), and tp1ep1
  GB/s        the expert-weight bytes that GPU reads over the measured time (weights only: the
              experts the balanced rule touches on it, `aic.balanced_experts`; under EP the GPU
              holding the most touched experts of E/ep contiguous ones), after the call's floor
              (the system's smallest measured time of any layout of the shape: t - floor)
  tp8/ep8     the measured tp8ep1 over tp1ep8 time: both read about the same weight bytes per GPU
  pm tp8      perfmodel's price of the tp8ep1 row from the local profile (the embedded H200 profile,
              perfmodel's own kernels) carried to the system's GPU (`perfmodel validate --transfer`'s
              machinery), and its error (+: priced too slow)
  pm ep8      the same for the tp1ep8 row (the op built with that GPU's touched experts, whole)

The slice-width table below it holds, per system/engine/format, the measured time of the tp-only
rows (tpK ep1: 1/K of every touched expert) over the tp1ep1 row's time divided by K, floor removed,
at T >= 32 (every expert touched): 1.0 means the narrow slices stream as well as whole experts.

The DeepSeek fit: per system/engine/format, the one number b0 (MB) for which "each expert slice a
call walks streams as if it held b0 more bytes" reproduces that table: relative cost
(1 + b0/s(w)) / (1 + b0/s(2048)) with s(w) = 3 x H x w x the format's bytes per weight, least
squares over w = 1024, 512, 256 (TP2 to TP8, the widths the served layouts run at) and T = 32 ... 256
(scipy). TP16's 128 columns are left out of the fit: there every group's cost rises faster than one
constant per slice describes (its per-width b0, printed beside, is above its 256 value in each group).

The rule perfmodel takes (`layers.SLICE_OVERHEAD_BYTES` + `layers.SLICE_OVERHEAD_BYTES_PER_HIDDEN`
x H): the same fit on every MoE shape of the database (each system above, each engine, each weight
format the rule prices: all but bf16 and INT4, which perfmodel's own kernels price; each
(H, I, E, k) with TP-only rows), over the widths I/tp >= 192 of TP2 to TP8 and the token counts that
touch every expert (T x k >= E, T <= 256); then b0 = c0 + beta x H fitted over the groups by least
absolute deviations (scipy linprog): b0 grows with the hidden size H, less than in proportion
(its median residual beside that of one constant and of beta x H alone). The same fit on the local
profile's own W4A16 samples (perfmodel's kernel, I = 256 against I = 2048 of E = 384, T = 16 ... 128) beside it.
"""

from __future__ import annotations

import math
import statistics
import sys
from collections import defaultdict

from scipy.optimize import least_squares, linprog

from perfmodel import aic
from perfmodel.model.layers import routed_experts_op
from perfmodel.model.step import price_op
from perfmodel.request import profile_source_gpu, resolve_profile
from perfmodel.specs import registry
from perfmodel.specs.schema import WEIGHT_BYTES
from perfmodel.transfer import _Machines

H, I, E, K = 7168, 2048, 256, 8
LAYOUTS = ((1, 8), (2, 4), (4, 2), (8, 1))
TOKENS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
SYSTEMS = ("h100_sxm", "h200_sxm", "b200_sxm", "b300_sxm")
MEASURED = ("bf16", "int4_g32")  # formats perfmodel prices by its own measured kernels: the rule leaves them out


def touched_on_gpu(T: int, ep: int) -> int:
    """Experts the balanced rule touches on the GPU holding the most of them (E/ep contiguous experts each)."""
    stride = math.ceil(E / K)
    ids = set()
    for t in range(T):
        for i in range(K):
            ids.add((t + i * stride) % E if T >= stride else int((t * stride / T + i * stride) % E))
    per = defaultdict(int)
    for x in ids:
        per[x // (E // ep)] += 1
    return max(per.values())


def fit_b0(pairs: list[tuple[int, float]], wb: float, hidden: int = H, whole: int = I) -> float:
    """b0 (bytes) fitting relative costs rel(w) = (1 + b0/s(w)) / (1 + b0/s(whole)), s(w) = 3 hidden w wb."""
    s = lambda w: 3.0 * hidden * w * wb  # noqa: E731
    res = lambda x: [(1 + x[0] / s(w)) / (1 + x[0] / s(whole)) - r for w, r in pairs]  # noqa: E731
    return float(least_squares(res, [1e6], bounds=([0.0], [1e9])).x[0])


def lad_fit(hs: list[int], b0s: list[float]) -> tuple[float, float, tuple[float, float, float]]:
    """b0 = c0 + beta H by least absolute deviations; the median |residual| of that, of the median
    constant and of the median b0/H times H."""
    n = len(hs)
    cost = [0.0, 0.0] + [1.0] * (2 * n)
    rows = [[1.0, float(h)] + [1.0 if j == i else 0.0 for j in range(n)] + [-1.0 if j == i else 0.0 for j in range(n)]
            for i, h in enumerate(hs)]
    sol = linprog(cost, A_eq=rows, b_eq=b0s, bounds=[(None, None), (None, None)] + [(0, None)] * (2 * n)).x
    c0, beta = float(sol[0]), float(sol[1])
    med_b0, med_beta = statistics.median(b0s), statistics.median(b / h for h, b in zip(hs, b0s, strict=True))
    resid = tuple(statistics.median(abs(b - f(h)) for h, b in zip(hs, b0s, strict=True))
                  for f in (lambda h: c0 + beta * h, lambda h: med_b0, lambda h: med_beta * h))
    return c0, beta, resid


def all_shapes(db) -> list[tuple[str, int, float]]:
    """Per system, engine, format and MoE shape with TP-only rows: (label, H, b0 in bytes)."""
    out = []
    for system in SYSTEMS:
        for engine in aic.ENGINES:
            version = db.current(system, engine)
            hit = version and db.table(system, engine, version, "moe")
            if not hit:
                continue
            best: dict = {}
            for r in aic._read_table(hit[0], {"distribution": {"balanced"}, "moe_ep_size": {1}}):
                if r["latency"] > 0 and aic.MOE_DTYPES.get(r["moe_dtype"]) in WEIGHT_BYTES and \
                        aic.MOE_DTYPES[r["moe_dtype"]] not in MEASURED:
                    key = (r["moe_dtype"], int(r["hidden_size"]), int(r["inter_size"]), int(r["num_experts"]), int(r["topk"]))
                    at = (int(r["moe_tp_size"]), int(r["num_tokens"]))
                    best.setdefault(key, {})
                    best[key][at] = min(best[key].get(at, math.inf), r["latency"] * 1e3)
            for (dtype, h, i, e, k), t in sorted(best.items()):
                floor = min(t.values())
                pairs = []
                for T in (32, 48, 64, 96, 128, 192, 256):
                    if T * k < e or (1, T) not in t:
                        continue
                    for tp in (2, 4, 8):
                        if (tp, T) in t and i % tp == 0 and i // tp >= 192:
                            pairs.append((i // tp, (t[(tp, T)] - floor) / ((t[(1, T)] - floor) / tp)))
                if len(pairs) >= 3:
                    b0 = fit_b0(pairs, WEIGHT_BYTES[aic.MOE_DTYPES[dtype]], h, i)
                    out.append((f"{system} {engine} {dtype} H{h} I{i} E{e} k{k} ({len(pairs)} rows)", h, b0))
    return out


def local_b0(local) -> float:
    """The same b0 from the local profile's W4A16 samples: E = 384, H = 7168, I = 256 against I = 2048 at
    T = 16 ... 128 (every sample's bytes over its time after the law's floor: its streaming rate)."""
    fit = local.fits["moe_w4a16"]
    rate = defaultdict(dict)
    for smp in local.benches["moe"].samples:
        sh = smp.shape
        if smp.provider == "triton_w4a16" and sh.get("E") == 384 and 16 <= sh["T"] <= 128:
            rate[sh["T"]][sh["I"]] = (smp.bytes / (smp.median_ms * 1e3 - fit.t0_us), smp.bytes / aic.balanced_experts(sh["T"], 384, 8))
    out = []
    for T, by in rate.items():
        if 256 in by and 2048 in by:
            (r_n, s_n), (r_w, s_w) = by[256], by[2048]
            rel = r_w / r_n  # time per byte, narrow over wide
            out.append(max(0.0, (rel - 1) / (1 / s_n - rel / s_w)))
    return statistics.median(out)


def main() -> None:
    db = aic.Database.installed()
    local = resolve_profile(None)
    mk = registry.load_memory_kinds()
    print(f"database: {aic.PACKAGE} {db.version}; local profile: {local.label}")
    print(f"shape: H={H} I={I} E={E} k={K}, balanced routing; times in µs per call on one GPU")
    slice_rows = []
    for system in SYSTEMS:
        gpu = registry.load_gpu(aic.SYSTEM_GPUS[system])
        mach = _Machines(local, gpu, mk)
        for engine in aic.ENGINES:
            version = db.current(system, engine)
            hit = version and db.table(system, engine, version, "moe")
            if not hit:
                continue
            rows = aic._read_table(hit[0], {"distribution": {"balanced"}, "hidden_size": {H}, "inter_size": {I},
                                            "num_experts": {E}, "topk": {K}})
            best: dict = {}
            for r in rows:
                key = (r["moe_dtype"], int(r["moe_tp_size"]), int(r["moe_ep_size"]), int(r["num_tokens"]))
                if r["latency"] > 0:
                    best[key] = min(best.get(key, math.inf), r["latency"] * 1e3)
            for dtype in sorted({k[0] for k in best}):
                wd = aic.MOE_DTYPES.get(dtype)
                if wd is None or not all((dtype, tp, ep, 1) in best for tp, ep in LAYOUTS + ((1, 1),)):
                    continue
                floor = min(v for k, v in best.items() if k[0] == dtype)
                wb = WEIGHT_BYTES[wd]
                print(f"\n{system} ({gpu.name}) {engine} {version} {dtype} (priced as {wd}); floor {floor:.1f} µs")
                head = ["T"] + [f"us tp{tp}ep{ep}" for tp, ep in LAYOUTS] + ["us tp1ep1"] + \
                       [f"GB/s tp{tp}ep{ep}" for tp, ep in LAYOUTS] + ["tp8/ep8", "pm tp8", "err", "pm ep8", "err"]
                print(" ".join(f"{h:>12}" for h in head))
                for T in TOKENS:
                    ts = [best.get((dtype, tp, ep, T)) for tp, ep in LAYOUTS]
                    t11 = best.get((dtype, 1, 1, T))
                    if None in ts:
                        continue
                    gbs = []
                    for (tp, ep), t in zip(LAYOUTS, ts, strict=True):
                        nexp = aic.balanced_experts(T, E, K) if ep == 1 else touched_on_gpu(T, ep)
                        w = nexp * 3.0 * H * (I // tp) * wb
                        gbs.append(w / max(t - floor, 1e-3) / 1e3)
                    on = "--no-slice-overhead" not in sys.argv
                    op8 = routed_experts_op(T, H, I, K, 8, wd, aic.balanced_experts(T, E, K) * 3.0 * H * (I // 8) * wb,
                                            slices=aic.balanced_experts(T, E, K) if on else 0.0)
                    ope = routed_experts_op(T, H, I, K, 8, wd, touched_on_gpu(T, 8) * 3.0 * H * I * wb, slices=touched_on_gpu(T, 8) if on else 0.0)
                    p8, pe = price_op(mach.get(), op8), price_op(mach.get(), ope)
                    t8, te = ts[3], ts[0]
                    cells = [f"{T:>12d}"] + [f"{t:12.1f}" for t in ts] + [f"{t11:12.1f}" if t11 else f"{'-':>12}"] + \
                            [f"{g:12.0f}" for g in gbs] + \
                            [f"{t8 / te:12.2f}", f"{p8:12.1f}", f"{p8 / t8 - 1:+12.0%}", f"{pe:12.1f}", f"{pe / te - 1:+12.0%}"]
                    print(" ".join(cells))
                for T in (32, 64, 128, 256):
                    t1 = best.get((dtype, 1, 1, T))
                    if t1 is None:
                        continue
                    rel = {}
                    for tp in (1, 2, 4, 8, 16):
                        t = best.get((dtype, tp, 1, T))
                        if t is not None:
                            rel[tp] = (t - floor) / ((t1 - floor) / tp)
                    slice_rows.append((system, engine, dtype, T, rel, wb))
    print("\nslice width: time of tpK ep1 over (tp1ep1 time / K), the floor removed, at T >= 32 (every expert touched)")
    print(f"{'system':>10} {'engine':>7} {'dtype':>12} {'T':>5} " + " ".join(f"{f'w={I // tp}':>8}" for tp in (1, 2, 4, 8, 16)))
    groups = defaultdict(list)
    for system, engine, dtype, T, rel, wb in slice_rows:
        print(f"{system:>10} {engine:>7} {dtype:>12} {T:>5} " + " ".join(
            f"{rel[tp]:8.2f}" if tp in rel else f"{'-':>8}" for tp in (1, 2, 4, 8, 16)))
        groups[(system, engine, dtype, wb)].append(rel)
    print("\nb0 per expert slice (MB), fitted per group; the per-width values beside (w = 1024, 512, 256, 128, T = 32)")
    fits = []
    for (system, engine, dtype, wb), rels in groups.items():
        b0 = fit_b0([(I // tp, r[tp]) for r in rels for tp in (2, 4, 8) if tp in r], wb)
        fits.append(b0)
        one = [fit_b0([(I // tp, rels[0][tp])], wb) for tp in (2, 4, 8, 16) if tp in rels[0]]
        print(f"{system:>10} {engine:>7} {dtype:>12} b0 {b0 / 1e6:6.2f} MB   per width: " + " ".join(f"{x / 1e6:6.2f}" for x in one))
    print(f"median over {len(fits)} DeepSeek groups: b0 = {statistics.median(fits) / 1e6:.2f} MB"
          f" (range {min(fits) / 1e6:.2f} to {max(fits) / 1e6:.2f})")
    print("\nb0 per expert slice (MB), every MoE shape of the database with TP-only rows")
    shapes = all_shapes(db)
    for label, h, b0 in shapes:
        print(f"{label:>62} {b0 / 1e6:6.2f}")
    c0, beta, resid = lad_fit([h for _, h, _ in shapes], [b for _, _, b in shapes])
    print(f"least absolute deviations over {len(shapes)} groups: b0 = {c0 / 1e6:.2f} MB + {beta:.0f} bytes per hidden unit")
    print(f"median |residual|: {resid[0] / 1e6:.2f} MB (c0 + beta H), {resid[1] / 1e6:.2f} MB (one constant),"
          f" {resid[2] / 1e6:.2f} MB (beta H alone)")
    print(f"local profile's own W4A16 kernel: b0 = {local_b0(local) / 1e6:.2f} MB")
    print(f"\nlocal profile's GPU: {profile_source_gpu(local).name}", file=sys.stderr)


if __name__ == "__main__":
    main()
