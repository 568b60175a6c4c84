"""run.sh's groups side by side: TPOT and TTFT median |error| and signed median, both ways, per label.

    python evidence/qwen3-fp8-step/summary.py before kvbf16 after > evidence/qwen3-fp8-step/summary.txt
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
GROUPS = ("vllm_h200_sxm_qwen3-235b-a22b", "sglang_h200_sxm_qwen3-235b-a22b", "trtllm_h100_sxm_qwen3-235b-a22b",
          "sglang_h200_sxm_deepseek-v3", "vllm_b300_sxm_kimi-k2.6")


def main(labels: list[str]) -> None:
    print("median |error| (signed median) of predicted / measured - 1; rows; aiconfigurator's estimator on the rows it priced")
    for g in GROUPS:
        print(f"\n{g}")
        for label in labels:
            d = json.loads((HERE / f"{label}_{g}.json").read_text())
            s = {(x["source"], x["by"]): x for x in d["summary"] if x["by"] == "overall"}
            parts = []
            for way in ("local", "imported"):
                x = s[(way, "overall")]
                parts.append(f"{way}: TPOT {x['tpot']['median_abs']:5.1%} ({x['tpot']['signed_median']:+6.1%}) "
                             f"TTFT {x['ttft']['median_abs']:5.1%} ({x['ttft']['signed_median']:+6.1%})")
            b = {x["source"]: x for x in d.get("beside_aiconfigurator", []) if x["by"] == "overall" and x["way"] == "imported"}
            if "imported" in b:
                m, a = b["imported"]["tpot"], b["aiconfigurator"]["tpot"]
                parts.append(f"the estimator's {m['n']} rows, TPOT: imported {m['median_abs']:.1%} ({m['signed_median']:+.1%}), "
                             f"aiconfigurator {a['median_abs']:.1%} ({a['signed_median']:+.1%})")
            print(f"  {label:7s} n={s[('imported', 'overall')]['tpot']['n']:3d}  " + " | ".join(parts))


if __name__ == "__main__":
    main(sys.argv[1:])
