"""TTFT and TPOT errors of two `validate --silicon` runs of one way (before / after the quantised
MoE classes) on the rows both priced: all rows, by engine, by model and by the routed experts'
weight format (the scenario's `routed_experts=` override, else the model preset's), alone and by
engine.

    python evidence/moe-quant-import/compare.py BEFORE.json AFTER.json [WAY] > NAME.txt

WAY: the way compared (default imported). Statistics: `perfmodel.silicon_validate.error_stats`
(median |error|, signed median; predicted / measured - 1, +: predicted too slow).
"""

import json
import re
import sys
from collections import defaultdict

from perfmodel.silicon_validate import error_stats
from perfmodel.specs import registry


def _points(path: str, way: str) -> dict:
    return {p["id"]: p for p in json.load(open(path))["points"] if p["predicted"].get(way)}


def _experts(p: dict) -> str:
    spec = registry.load_model(p["model"])
    if spec.moe is None:
        return "none (dense)"
    m = re.search(r"routed_experts=([a-z0-9_]+)", p["scenario"])
    return m[1] if m else spec.dtypes.routed_experts


def _errs(p: dict, way: str) -> tuple[float, float]:
    m, q = p["measured"], p["predicted"][way]
    return q["ttft_ms"] / m["ttft_ms"] - 1, q["tpot_ms"] / m["tpot_ms"] - 1


def _fmt(s: dict) -> str:
    if not s["n"]:
        return f"{'-':>16}"
    return f"{100 * s['median_abs']:5.1f}% ({100 * s['signed_median']:+6.1f}%)"


def main(before: str, after: str, way: str = "imported") -> None:
    b, a = _points(before, way), _points(after, way)
    both = sorted(set(b) & set(a))
    print(f"before: {before}\nafter:  {after}\nway: {way}; rows priced by both: {len(both)}")
    print("median |error| (signed median) of the mean TTFT and TPOT, predicted / measured - 1\n")
    print(f"{'rows':34} {'n':>4}  {'TTFT before':>16} {'TTFT after':>16}  {'TPOT before':>16} {'TPOT after':>16}")
    groups: dict[str, list[str]] = defaultdict(list)
    for i in both:
        p = a[i]
        for g in ("all", f"engine {p['engine']}", f"model {p['model']}", f"experts {_experts(p)}",
                  f"experts {_experts(p)}, {p['engine']}"):
            groups[g].append(i)
    order = sorted(groups, key=lambda g: (g != "all", g.split()[0] != "engine", g.split()[0] != "model", g))
    for g in order:
        ids = groups[g]
        eb = [_errs(b[i], way) for i in ids]
        ea = [_errs(a[i], way) for i in ids]
        cells = [error_stats(e[k] for e in errs) for k in (0, 1) for errs in (eb, ea)]
        print(f"{g:34} {len(ids):>4}  {_fmt(cells[0])} {_fmt(cells[1])}  {_fmt(cells[2])} {_fmt(cells[3])}")


if __name__ == "__main__":
    main(*sys.argv[1:])
