"""A/B of decode-size attention, round 2 (issue 19), on one GPU, in one call: the previous
tree_attention module against this tree's, interleaved per round, at C=1, q=1 (the goal
shapes) and at large shapes, with the attention bench's timing (ab_decode's Case and _time:
CUDA graph over KV copies, cold L2). At the goal shapes each round also times variants of
this tree's kernel given as explicit knobs. Round 1 (d7bc27e): for MLA with 64 heads, all
heads in one 64-row tile (wgmma-sized) with the 512 output columns whole or split over
programs (`block_dv`, `MLA64_WIDE`); for GQA, 3 programs per SM and split output columns.
Round 2: q loaded inside the KV loop (`q_in_loop`), with stages, tiles and splits around it;
at the large shapes too.
Every variant is checked against the torch reference on the GPU before it is timed.

    python -m perfmodel.measure.tuning.ab_attn2 --before perfmodel.kernels_before
    python -m perfmodel.measure.tuning.ab_attn2 --before ... --warm 0/3   # compile a third only
    python -m perfmodel.measure.tuning.ab_attn2 --before ... --wide       # round 1's MLA variants
"""

from __future__ import annotations

import argparse
import importlib
import time

from ._ab import READ_GBPS, start
from ._ab import p as _p


def _mla64(dv, warps, splits, stages=2, **kw):
    return dict(block_r=64, block_s=32, block_dv=dv, num_warps=warps, num_stages=stages, num_splits=splits, **kw)


QIL = dict(q_in_loop=True)
# round 1 (d7bc27e): all 64 heads in one 64-row tile (wgmma), output columns whole or split
MLA64_WIDE = {
    "r64 dv512 w8 x132": _mla64(512, 8, 132),
    "r64 dv512 w8 x132 bf16": _mla64(512, 8, 132, partials="bf16"),
    "r64 dv512 w8 x66": _mla64(512, 8, 66),
    "r64 dv256 w8 x66": _mla64(256, 8, 66),
    "r64 dv256 w8 x33": _mla64(256, 8, 33),
    "r64 dv128 w4 x33": _mla64(128, 4, 33),
    "r64 dv128 w4 st3 x33": _mla64(128, 4, 33, stages=3),
    "r64 dv128 w4 x66": _mla64(128, 4, 66),
}
# round 2: q loaded with each KV tile (one memory round trip before the first tile, not two)
MLA64_VARIANTS = {
    "qil": QIL,
    "qil st3": dict(QIL, num_stages=3),
    "st3": dict(num_stages=3),
    "qil x33": dict(QIL, num_splits=33),
    "qil bs32 x66": dict(QIL, block_s=32, num_splits=66),
    "qil bs32 st3 x66": dict(QIL, block_s=32, num_stages=3, num_splits=66),
    "qil r16 dv256 x33": dict(QIL, block_r=16, block_dv=256, num_splits=33),
    "qil r16 dv256 x66": dict(QIL, block_r=16, block_dv=256, num_splits=66),
}
LLAMA_VARIANTS = {
    "qil": QIL,
    "qil x44": dict(QIL, num_splits=44),
    "qil st4": dict(QIL, num_stages=4),
    "qil bs32 st4 x66": dict(QIL, block_s=32, num_stages=4, num_splits=66),
    "qil x66": dict(QIL, num_splits=66),
}
QWEN_VARIANTS = {"qil": QIL, "qil st4": dict(QIL, num_stages=4)}
# (kind, heads, L, variants) at C=1, q=1
DECODE = [("mla", 64, 1024, MLA64_VARIANTS), ("mla", 64, 4096, MLA64_VARIANTS), ("mla", 64, 8192, MLA64_VARIANTS),
          ("mla", 8, 1024, {"qil": QIL}), ("mla", 8, 8192, {"qil": QIL}),
          ("llama", 0, 1024, {"qil": QIL}), ("llama", 0, 8192, LLAMA_VARIANTS),
          ("qwen", 0, 1024, {"qil": QIL}), ("qwen", 0, 8192, QWEN_VARIANTS)]
LARGE = [("mla", 8, 128, 1, 32768), ("mla", 64, 128, 1, 8192), ("qwen", 0, 32, 1, 32768), ("llama", 0, 8, 1, 8192)]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", required=True, help="importable package of the previous kernels")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--large-rounds", type=int, default=2)
    ap.add_argument("--warm", default=None, help="i/n: compile and check the i-th of n parts only")
    ap.add_argument("--wide", action="store_true", help="round 1: the 64-row MLA variants (MLA64_WIDE)")
    a = ap.parse_args(argv)
    t0 = start("ab_attn2")
    import torch

    from perfmodel.kernels import tree_attention as new
    from perfmodel.kernels._testing import calc_diff

    from .ab_decode import Case, _time

    old = importlib.import_module(a.before + ".tree_attention")
    part = tuple(int(x) for x in a.warm.split("/")) if a.warm else None
    jobs = 0
    for kind, H, L, variants in DECODE:
        if a.wide:
            variants = MLA64_WIDE if variants is MLA64_VARIANTS else {}
        c = Case(kind, H, 1, 1, L)
        ref = c.ref().float()
        runs = {"before": (old, {}), "new": (new, {})} | {k: (new, v) for k, v in variants.items()}
        ok = {}
        for name, (mod, kw) in runs.items():
            jobs += 1
            if part and jobs % part[1] != part[0]:
                continue
            try:
                d = calc_diff(c.fn(mod, **kw)(*c.kvs[0]).float(), ref)
                ok[name] = d < 1e-4
                _p(f"check {c.name} {name}: calc_diff {d:.1e} ({'ok' if ok[name] else 'FAIL'})")
            except Exception as e:  # noqa: BLE001 -- a config that does not fit: report, skip
                ok[name] = False
                _p(f"check {c.name} {name}: failed: {type(e).__name__}: {str(e)[:160]}")
        if part:
            continue
        res = {n: [] for n in runs if ok[n]}
        for _ in range(a.rounds):
            for n in res:
                mod, kw = runs[n]
                res[n].append(_time(c.fn(mod, **kw), c))
        nb = c.nbytes()
        base = min(res["before"]) if res.get("before") else float("nan")
        for n, ts in res.items():
            _p(f"{c.name:24s} {n:24s} {' '.join(f'{x:6.1f}' for x in ts)} | best {min(ts):6.1f} us "
               f"({base / min(ts):4.2f}x before) | {nb / min(ts) / 1e3:5.0f} GB/s")
        del c
        torch.cuda.empty_cache()
    if part:
        _p(f"# warm part {a.warm} done at {time.time() - t0:.0f} s")
        return
    _p(f"# decode done at {time.time() - t0:.0f} s")
    _p("\n## large shapes: before | new (defaults), per round")
    for spec in LARGE:
        c = Case(spec[0], spec[1], *spec[2:])
        d = calc_diff(c.fn(new)(*c.kvs[0]).float(), c.ref().float())
        dq = calc_diff(c.fn(new, **QIL)(*c.kvs[0]).float(), c.ref().float())
        tb, tn, tq = [], [], []
        for _ in range(a.large_rounds):
            tb.append(_time(c.fn(old), c))
            tn.append(_time(c.fn(new), c))
            tq.append(_time(c.fn(new, **QIL), c))
        nb = c.nbytes()
        for n, ts, dd in (("new", tn, d), ("new qil", tq, dq)):
            _p(f"{c.name:30s} before {' '.join(f'{x:7.1f}' for x in tb)} | {n} {' '.join(f'{x:7.1f}' for x in ts)} | "
               f"best {min(tb):7.1f} -> {min(ts):7.1f} us | {n} {nb / min(ts) / 1e3:5.0f} GB/s = "
               f"{100 * nb / min(ts) / 1e3 / READ_GBPS:3.0f}% of read | calc_diff {dd:.1e} ({'ok' if dd < 1e-4 else 'FAIL'})")
        del c
        torch.cuda.empty_cache()
    _p(f"# done at {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
