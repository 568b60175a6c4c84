"""The published serving points' TPOT errors before and after the per-slice rule, from the raw
outputs of `evidence/published-serving/run.sh` at two commits.

    python evidence/moe-slice-width/before_after.py BEFORE_COMMIT [AFTER_COMMIT]

Each run's all_points.json is read from git at the commit named (AFTER_COMMIT: the working tree's
file when left out). Groups: every point, the NVIDIA GPUs', and the H200 TRT-LLM DeepSeek-R1 FP8
points by the layout InferenceX ran (tp8ep1: experts TP8; tp8ep8: experts EP8)."""

import json
import subprocess
import sys
from pathlib import Path

from perfmodel.silicon_validate import error_stats

FILE = "evidence/published-serving/all_points.json"
NVIDIA = ("h100-sxm", "h200-sxm", "b200-sxm", "b300-sxm")


def load(commit: str | None) -> dict:
    if commit is None:
        return json.loads(Path(FILE).read_text())
    return json.loads(subprocess.run(["git", "show", f"{commit}:{FILE}"], capture_output=True, text=True, check=True).stdout)


GROUPS = {
    "all points": lambda p: True,
    "NVIDIA GPUs": lambda p: p["system"] in NVIDIA,
    "H200 TRT-LLM tp8ep1": lambda p: p["system"] == "h200-sxm" and "-tp8ep1-" in p["id"],
    "H200 TRT-LLM tp8ep8": lambda p: p["system"] == "h200-sxm" and "-tp8ep8-" in p["id"],
    "B200 TRT-LLM tp8ep1 (fp4)": lambda p: p["system"] == "b200-sxm" and "-trt-" in p["id"] and "-tp8ep1-" in p["id"],
    "AMD tp8ep1": lambda p: p["system"] in ("mi355x", "mi325x") and "-tp8ep1-" in p["id"],
}


def main() -> None:
    before, after = load(sys.argv[1]), load(sys.argv[2] if len(sys.argv) > 2 else None)
    print(f"TPOT, predicted / published - 1 (+: predicted too slow); before: {sys.argv[1]}, after: "
          f"{sys.argv[2] if len(sys.argv) > 2 else 'the working tree'}")
    print(f"{'group':>28} {'points':>6} {'median |err| before':>20} {'after':>7} {'signed before':>14} {'after':>7}")
    for name, keep in GROUPS.items():
        stats = []
        for res in (before, after):
            errs = [p["predicted"]["local"]["tpot_ms"] / p["measured"]["tpot_ms"] - 1
                    for p in res["points"] if "local" in p["predicted"] and keep(p)]
            stats.append(error_stats(errs))
        b, a = stats
        print(f"{name:>28} {a['n']:>6} {b['median_abs']:>20.1%} {a['median_abs']:>7.1%} {b['signed_median']:>+14.1%} "
              f"{a['signed_median']:>+7.1%}")
    print("\nper point (H200 and B200 TRT-LLM): published, predicted before, after")
    prev = {p["id"]: p for p in before["points"]}
    for p in after["points"]:
        if p["engine"] == "trtllm" and "local" in p["predicted"] and p["id"] in prev:
            m, b, a = p["measured"]["tpot_ms"], prev[p["id"]]["predicted"]["local"]["tpot_ms"], p["predicted"]["local"]["tpot_ms"]
            print(f"{p['id']:>52} {m:7.2f} {b:7.2f} ({b / m - 1:+4.0%}) {a:7.2f} ({a / m - 1:+4.0%})")


if __name__ == "__main__":
    main()
