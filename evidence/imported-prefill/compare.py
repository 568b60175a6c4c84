"""What an imported profile prices for prefill-size ops, against the database's own rows at those shapes.

    python evidence/imported-prefill/compare.py > evidence/imported-prefill/compare_<commit>.txt

For each system and engine (the package's maintained version), the system is imported as
`perfmodel profile import-aic` imports it (`aic.import_profile`, the embedded profile as its
fallback), and every database row of a prefill-size op is priced on that profile's machine as a
prefill step prices its op (`step.price_op`: the routed experts and the causal attention as the
`PREFILL` variant, through `step.prefill_law`; the dense GEMMs as any GEMM), then compared with
the row's measured latency:

  attention_prefill  context attention (GQA), bf16 KV cache, isl 1024..8192 tokens, every batch
  mla_prefill        context MLA (DeepSeek shape), bf16 KV cache, isl 1024..8192 tokens
  gemm               M = 1024..16384 rows (bf16 and fp8 per-tensor)
  moe                balanced routing, no expert parallelism, 1024..16384 tokens, by weight dtype

Per group: rows, the median of predicted / measured - 1 (signed: - is too fast), the median
|error|, and the 10th and 90th percentiles of the signed error. At most PER_GROUP rows per group,
evenly spread over the rows sorted by FLOPs (the medians of whole groups move by < 1 point).
"""

from __future__ import annotations

import statistics
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from perfmodel import aic  # noqa: E402
from perfmodel.model.layers import PREFILL  # noqa: E402
from perfmodel.request import resolve_profile  # noqa: E402
from perfmodel.transfer import imported_machines  # noqa: E402

SYSTEMS = ("h200_sxm", "b200_sxm", "b300_sxm")
TOKENS = {"attention_prefill": (1024, 8192), "mla_prefill": (1024, 8192), "gemm": (1024, 16384), "moe": (1024, 16384)}
PER_GROUP = 400


def _tokens(p: aic.Point) -> int:
    s = p.shape
    return s.get("M", s.get("T", s.get("q", 0)))


def _prefill_op(p: aic.Point):
    """The row's op as a prefill step carries it: routed experts as the PREFILL variant (no sample
    probe: the step's prefill MoE call has none); attention rows are built as prefill ops already."""
    return replace(p.op, variant=PREFILL, probe=None) if p.kind == "moe" else p.op


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(q * (len(xs) - 1))))]


def main() -> int:
    db = aic.Database.installed()
    local = resolve_profile(None)
    print(f"database: {aic.PACKAGE} {db.version}; fallback profile: {local.label}")
    print("error = predicted / measured - 1 (-: the imported profile prices the op too fast)")
    print(f"{'system':9} {'engine':7} {'version':10} {'op':17} {'dtype':9} {'rows':>5} {'signed':>8} {'|err|':>7} "
          f"{'p10':>7} {'p90':>7}  law")
    for system, engine, version, prof, m in imported_machines(db, SYSTEMS, local):
        by_kind, _ = aic.points(db, system, engine, version, kinds=set(TOKENS), gemm_dtypes={"bfloat16", "fp8"})
        for kind, (lo, hi) in TOKENS.items():
            groups: dict[str, list[aic.Point]] = {}
            for p in by_kind.get(kind, []):
                if lo <= _tokens(p) <= hi and (kind not in ("attention_prefill", "mla_prefill") or p.dtype == "bfloat16"):
                    groups.setdefault(p.dtype, []).append(p)
            for dtype, pts in sorted(groups.items()):
                pts = aic._spread(pts, PER_GROUP)
                errs = [m.price(replace(p, op=_prefill_op(p)))[0] / p.t_us - 1.0 for p in pts]
                op = _prefill_op(pts[0])
                key = f"{op.kernel_class}.{op.variant}" if op.variant else op.kernel_class
                law = key if key in prof.fits else f"{op.kernel_class} (+ GEMM roof)" if op.variant else op.kernel_class
                print(f"{system:9} {engine:7} {version:10} {kind:17} {dtype:9} {len(pts):5d} {statistics.median(errs):+8.1%} "
                      f"{statistics.median(abs(e) for e in errs):7.1%} {_pct(errs, 0.1):+7.1%} {_pct(errs, 0.9):+7.1%}  {law}")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
