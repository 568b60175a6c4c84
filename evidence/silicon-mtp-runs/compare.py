"""The groups evidence/silicon-mtp-runs/run.sh runs, at each stage: median |error| and signed
median of TPOT and TTFT by way, over all rows and apart for the rows of InferenceX's MTP sweeps
(`inferencex.DSR1_TRT_MTP_SWEEPS`) and those with attention DP, whose settings and pricing changed.

    python evidence/silicon-mtp-runs/compare.py > evidence/silicon-mtp-runs/compare.txt
"""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path

HERE = Path(__file__).parent
GROUPS = ("trtllm_h200_dsr1", "trtllm_b200_dsr1", "sglang_h200_dsr1", "trtllm_h100_qwen235", "vllm_h200_qwen235",
          "trtllm_h200_gptoss")
STAGES = ("before", "mtp", "after")  # 2882b0b; the MTP sweeps' settings and balancing; the prompts spread over DP ranks


def _errors(points, way, fig):
    return {p["id"]: p["predicted"][way][fig] / p["measured"][fig] - 1 for p in points if way in p["predicted"]}


def _cell(errs) -> str:
    if not errs:
        return f"{'':>21}"
    return f"{statistics.median(abs(e) for e in errs):6.1%} {statistics.median(errs):+7.1%} ({len(errs):>3})"


def paired_h200() -> None:
    """The measured TPOT of the H200 rows of the MTP sweep beside the other dates' rows of the same
    ISL, OSL, concurrency and layout."""
    pts = json.loads((HERE / "trtllm_h200_dsr1_mtp.json").read_text())["points"]
    def key(p) -> str:
        m = re.search(r"h200-sxm (\S+), trtllm.*C=(\d+), (\d+/\d+)", p["scenario"])
        return f"{m.group(1)} C={m.group(2)} {m.group(3)}"

    mtp = {}
    for p in pts:
        if "drafter mtp" in p["scenario"]:
            mtp.setdefault(key(p), p["measured"]["tpot_ms"])
    print("H200 TRT-LLM DeepSeek-R1, measured TPOT ms: the MTP sweep's rows beside the same loads on other dates")
    seen = set()
    for p in sorted(pts, key=lambda p: p["scenario"]):
        k = key(p)
        if "drafter mtp" in p["scenario"] or k not in mtp or k in seen:
            continue
        seen.add(k)
        m = p["measured"]["tpot_ms"]
        print(f"  {k:<40} {m:7.2f}  MTP sweep {mtp[k]:7.2f}  ratio {mtp[k] / m:.2f}")


def main() -> None:
    paired_h200()
    print()
    print("median |error|, signed median (rows) of each stage:", ", ".join(STAGES))
    for g in GROUPS:
        runs = {s: json.loads((HERE / f"{g}_{s}.json").read_text())["points"] for s in STAGES
                if (HERE / f"{g}_{s}.json").is_file()}
        last = runs[STAGES[-1]]
        ids = {p["id"] for p in last}
        mtp = {p["id"] for p in last if "drafter mtp" in p["scenario"]}
        dp = {p["id"] for p in last if " dp-attn+ep," in p["scenario"]}
        print(f"\n== {g}: {len(ids)} rows; {len(mtp)} of InferenceX's MTP sweeps, {len(dp)} with attention DP")
        for way in ("local", "imported"):
            for fig in ("tpot_ms", "ttft_ms"):
                errs = {s: _errors(runs[s], way, fig) for s in runs}
                print(f" {way} {fig}")
                for label, sel in (("all rows", ids), ("MTP sweeps", mtp), ("not MTP sweeps", ids - mtp),
                                   ("attention DP, not MTP", dp - mtp), ("attention DP, MTP", dp & mtp)):
                    if sel:
                        print(f"  {label:<24}" + "   ".join(_cell([errs[s][i] for i in sel if i in errs[s]]) if s in errs
                                                            else f"{'':>21}" for s in STAGES))


if __name__ == "__main__":
    main()
