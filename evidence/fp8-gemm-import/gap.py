"""How an imported profile prices FP8 dense GEMMs, against the database's own FP8 GEMM rows.

    python evidence/fp8-gemm-import/gap.py > evidence/fp8-gemm-import/gap_<label>.txt

For h100_sxm, h200_sxm, b200_sxm, b300_sxm and each engine (the package's maintained version), the
system is imported as `perfmodel profile import-aic` imports it (`aic.import_profile`, the embedded
profile as its fallback), and every GEMM row of dtype fp8 (per-tensor) and fp8_block (DeepSeek's
128x128 block scales) is priced on that profile's machine as a step prices a dense GEMM of FP8
weights (`step.price_op`), then compared with the row's measured latency. The bfloat16 rows are
priced too, as a reference.

Table 1, per system, engine, dtype and M range (decode sizes 1-1024, prefill sizes 1k-16k): rows,
the median of predicted / measured - 1 (signed: - is too fast), the median |error|, the 10th and
90th percentiles of the signed error, and the law that priced them.
Table 2, per system, dtype and weight shape (N x K), at prefill sizes (M = 1k-16k), all engines
together: the signed median and median |error|.
"""

from __future__ import annotations

import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from perfmodel import aic  # noqa: E402
from perfmodel.request import resolve_profile  # noqa: E402
from perfmodel.transfer import imported_machines  # noqa: E402

SYSTEMS = ("h100_sxm", "h200_sxm", "b200_sxm", "b300_sxm")
DTYPES = ("bfloat16", "fp8", "fp8_block")
M_RANGES = ((1, 16), (17, 128), (129, 1024), (1025, 4096), (4097, 16384))


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(q * (len(xs) - 1))))]


def _row(errs: list[float]) -> str:
    return (f"{len(errs):5d} {statistics.median(errs):+8.1%} {statistics.median(abs(e) for e in errs):7.1%} "
            f"{_pct(errs, 0.1):+7.1%} {_pct(errs, 0.9):+7.1%}")


def main() -> int:
    db = aic.Database.installed()
    local = resolve_profile(None)
    print(f"database: {aic.PACKAGE} {db.version}; fallback profile: {local.label}")
    print("error = predicted / measured - 1 (-: the imported profile prices the GEMM too fast)")
    print(f"{'system':9} {'engine':7} {'version':10} {'dtype':9} {'M':>11} {'rows':>5} {'signed':>8} {'|err|':>7} "
          f"{'p10':>7} {'p90':>7}  law")
    by_shape: dict[tuple, list[float]] = defaultdict(list)
    for system, engine, version, prof, m in imported_machines(db, SYSTEMS, local):
        by_kind, _ = aic.points(db, system, engine, version, kinds={"gemm"}, gemm_dtypes=set(DTYPES))
        for dtype in DTYPES:
            pts = [p for p in by_kind.get("gemm", []) if p.dtype == dtype]
            for lo, hi in M_RANGES:
                sel = [p for p in pts if lo <= p.shape["M"] <= hi]
                if not sel:
                    continue
                errs = [m.price(p)[0] / p.t_us - 1.0 for p in sel]
                op = sel[0].op
                law = op.kernel_class if op.kernel_class in prof.fits else f"{m.get().class_of(op)} (stand-in)"
                print(f"{system:9} {engine:7} {version:10} {dtype:9} {f'{lo}-{hi}':>11} {_row(errs)}  {law}")
                if lo > 1024 and dtype != "bfloat16":
                    for p, e in zip(sel, errs):
                        by_shape[(system, dtype, p.shape["N"], p.shape["K"])].append(e)
        sys.stdout.flush()
    print()
    print("prefill sizes (M = 1025-16384), by weight shape, all engines together")
    print(f"{'system':9} {'dtype':9} {'N':>6} {'K':>6} {'rows':>5} {'signed':>8} {'|err|':>7} {'p10':>7} {'p90':>7}")
    for (system, dtype, n, k), errs in sorted(by_shape.items()):
        print(f"{system:9} {dtype:9} {n:6d} {k:6d} {_row(errs)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
