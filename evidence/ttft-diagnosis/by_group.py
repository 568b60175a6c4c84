"""TTFT and TPOT errors of a `validate --silicon` run by group (run from the repository root:
python evidence/ttft-diagnosis/by_group.py RUN.json [WAY]; `git show REV:PATH > FILE` reads
an earlier run).

RUN.json: the JSON a `bash evidence/silicon-validation/run.sh` run wrote (every row's measured
and predicted figures). Each row's benchmark comes from its `silicon_data_source` note in the
installed silicon sample (`perfmodel.silicon.load_rows`): InferenceX's runs (lengths drawn from
0.8 x isl/osl, `Row.min_length_ratio`) or aiconfigurator's own gap-analysis runs (fixed lengths).
Errors: predicted / measured - 1 (+: perfmodel too slow); median |error| and signed median.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

from perfmodel import silicon


def bucket(c: int) -> str:
    return next(f"C<={b}" for b in (1, 4, 16, 64, 256, 10**9) if c <= b).replace("C<=1000000000", "C>256")


def main() -> None:
    run = json.load(open(sys.argv[1]))
    way = sys.argv[2] if len(sys.argv) > 2 else "local"
    rows = {r.id: r for r in silicon.load_rows()}
    pts = []
    for p in run["points"]:
        pr = p["predicted"].get(way, {})
        if "ttft_ms" not in pr:
            continue
        r = rows[p["id"]]
        pts.append({"engine": p["engine"], "bench": "inferencex" if r.min_length_ratio < 1 else "gap-analysis",
                    "C": bucket(r.concurrency), "isl": r.isl, "model": p["model"],
                    "ttft": pr["ttft_ms"] / p["measured"]["ttft_ms"] - 1, "tpot": pr["tpot_ms"] / p["measured"]["tpot_ms"] - 1})
    print(f"{Path(sys.argv[1]).name} ({run['profile']} profile), way {way}: {len(pts)} rows priced")
    for by in (("engine",), ("engine", "bench"), ("engine", "C"), ("engine", "isl"), ("model",)):
        g = defaultdict(list)
        for x in pts:
            g[tuple(x[k] for k in by)].append(x)
        print(f"\nby {' x '.join(by)}")
        for k in sorted(g, key=str):
            a, b = np.array([x["ttft"] for x in g[k]]), np.array([x["tpot"] for x in g[k]])
            print(f"  {' '.join(map(str, k)):<28} n {len(a):4d}  TTFT |err| {np.median(abs(a)):5.0%} signed {np.median(a):+5.0%}"
                  f"  TPOT |err| {np.median(abs(b)):4.0%} signed {np.median(b):+5.0%}")


if __name__ == "__main__":
    main()
