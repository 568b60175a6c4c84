"""Before / after the imported prefill laws, both ways, from the two `validate --silicon` runs' JSON.

    python evidence/imported-prefill/summary.py > evidence/imported-prefill/summary.txt
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> None:
    runs = {name: json.loads((HERE / f"silicon_{name}.json").read_text()) for name in ("before", "after")}
    print("median |error| and signed median of predicted / measured - 1, overall and by engine (4 rows per model x system x engine)")
    print(f"{'way':9} {'group':8} {'rows':>5}  {'TTFT before':>18} {'TTFT after':>18}  {'TPOT before':>18} {'TPOT after':>18}")
    for way in ("local", "imported"):
        rows = [(s["group"], s) for s in runs["before"]["summary"] if s["source"] == way and s["by"] in ("overall", "engine")]
        for group, before in rows:
            after = next(s for s in runs["after"]["summary"] if (s["source"], s["group"]) == (way, group) and s["by"] == before["by"])
            cells = []
            for metric in ("ttft", "tpot"):
                for s in (before, after):
                    m = s[metric]
                    cells.append(f"{m['median_abs']:7.1%} ({m['signed_median']:+6.1%})")
            print(f"{way:9} {group:8} {before['ttft']['n']:5d}  {cells[0]:>18} {cells[1]:>18}  {cells[2]:>18} {cells[3]:>18}")


if __name__ == "__main__":
    main()
