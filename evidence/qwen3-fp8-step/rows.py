"""Qwen3-235B-A22B-FP8's silicon rows on h200_sxm, row by row: measured TPOT against the imported
way's, by layout and concurrency, for vLLM and SGLang, and what the measured TPOT does as the
concurrency grows at one layout.

    python evidence/qwen3-fp8-step/rows.py LABEL > evidence/qwen3-fp8-step/rows_LABEL.txt

Reads LABEL_{vllm,sglang}_h200_sxm_qwen3-235b-a22b.json (run.sh's output). Per layout: the rows
(concurrency, isl/osl, measured TPOT, predicted, error), then the measured and predicted TPOT of the
layout's rows with the fewest and the most requests (osl >= 500, where prompts are a small part of
a request's steps), and the Spearman rank correlation of each with the concurrency.
"""

from __future__ import annotations

import json
import re
import sys
from collections import defaultdict
from pathlib import Path

from scipy.stats import spearmanr

HERE = Path(__file__).resolve().parent


def main(label: str) -> None:
    for engine in ("vllm", "sglang"):
        d = json.loads((HERE / f"{label}_{engine}_h200_sxm_qwen3-235b-a22b.json").read_text())
        print(f"== {engine}: {len(d['points'])} rows ({label}); TPOT ms, error = predicted / measured - 1")
        by = defaultdict(list)
        for p in d["points"]:
            layout = re.search(r"on \d+x \S+ (\S+),", p["scenario"])[1]
            isl, osl = map(int, re.search(r"_(\d+)x(\d+)_c", p["id"]).groups())
            by[(p["scenario"].split(" on ")[1].split("x ")[0], layout)].append((p, isl, osl))
        for (gpus, layout), pts in sorted(by.items()):
            print(f"  {gpus} GPUs {layout}")
            pts.sort(key=lambda t: (t[0]["scenario"].split("C=")[1], t[1], t[2]))
            for p, isl, osl in sorted(pts, key=lambda t: (int(t[0]["scenario"].split("C=")[1].split(",")[0]), t[1], t[2])):
                c = int(p["scenario"].split("C=")[1].split(",")[0])
                m, q = p["measured"]["tpot_ms"], p["predicted"]["imported"]["tpot_ms"]
                aic = p["predicted"].get("aiconfigurator", {}).get("tpot_ms")
                print(f"    C={c:3d} {isl:5d}/{osl:<5d} measured {m:6.2f}  imported {q:6.2f} ({q / m - 1:+6.1%})"
                      + (f"  aiconfigurator {aic:6.2f} ({aic / m - 1:+6.1%})" if aic else ""))
            long = [(int(p["scenario"].split("C=")[1].split(",")[0]), p) for p, isl, osl in pts if osl >= 500]
            if len({c for c, _ in long}) >= 3:
                cs = [c for c, _ in long]
                ms = [p["measured"]["tpot_ms"] for _, p in long]
                qs = [p["predicted"]["imported"]["tpot_ms"] for _, p in long]
                lo, hi = min(long, key=lambda t: t[0]), max(long, key=lambda t: t[0])
                print(f"    osl >= 500: C {lo[0]} -> {hi[0]}: measured {lo[1]['measured']['tpot_ms']:.2f} -> "
                      f"{hi[1]['measured']['tpot_ms']:.2f}, imported {lo[1]['predicted']['imported']['tpot_ms']:.2f} -> "
                      f"{hi[1]['predicted']['imported']['tpot_ms']:.2f}; Spearman with C: measured "
                      f"{spearmanr(cs, ms)[0]:+.2f}, imported {spearmanr(cs, qs)[0]:+.2f} ({len(long)} rows)")
        print()


if __name__ == "__main__":
    main(sys.argv[1])
