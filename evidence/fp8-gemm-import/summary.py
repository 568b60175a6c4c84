"""The imported way of `validate --silicon` before and after the gemm_fp8 law, overall, by engine, model
and system, from the two runs' JSON.

    python evidence/fp8-gemm-import/summary.py [NAME] > evidence/fp8-gemm-import/summary[_NAME].txt

Before: evidence/imported-prefill/silicon_after.json (the import with prefill laws, FP8 dense GEMMs
at gemm_bf16's law at the FP8 rate); after: silicon_after.json here. Both: 4 rows per model x
system x engine (`--sample 4`), the same rows. NAME (default silicon_after) picks another "after" run.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
RUNS = {"before": HERE.parent / "imported-prefill" / "silicon_after.json",
        "after": HERE / f"{sys.argv[1] if len(sys.argv) > 1 else 'silicon_after'}.json"}


def main() -> None:
    runs = {name: json.loads(path.read_text()) for name, path in RUNS.items()}
    keys = {name: {p["id"] for p in r["points"]} for name, r in runs.items()}
    print(f"rows: before {len(runs['before']['points'])}, after {len(runs['after']['points'])}, "
          f"the same rows: {keys['before'] == keys['after']}")
    print("imported way: median |error| and (signed median) of predicted / measured - 1")
    print(f"{'by':7} {'group':16} {'rows':>5}  {'TTFT before':>18} {'TTFT after':>18}  {'TPOT before':>18} {'TPOT after':>18}")
    for by in ("overall", "engine", "model", "system"):
        for before in [s for s in runs["before"]["summary"] if s["source"] == "imported" and s["by"] == by]:
            after = next((s for s in runs["after"]["summary"]
                          if (s["source"], s["by"], s["group"]) == ("imported", by, before["group"])), None)
            if after is None:
                continue
            cells = [f"{s[m]['median_abs']:7.1%} ({s[m]['signed_median']:+6.1%})" for m in ("ttft", "tpot") for s in (before, after)]
            print(f"{by:7} {before['group']:16} {after['ttft']['n']:5d}  {cells[0]:>18} {cells[1]:>18}  {cells[2]:>18} {cells[3]:>18}")


if __name__ == "__main__":
    main()
