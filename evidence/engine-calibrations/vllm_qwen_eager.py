"""The vLLM Qwen3-235B-FP8 rows on H200 of the calibration set (errors_vllm.json), priced
uncalibrated on the local profile with CUDA graphs (as the rows are priced everywhere else) and
eagerly (`graphs=False`: every kernel launched from the host), beside the measured TPOT. Run from
the repository root: python evidence/engine-calibrations/vllm_qwen_eager.py
Errors: predicted / measured - 1."""

import json
import subprocess
from pathlib import Path

from perfmodel import silicon
from perfmodel.silicon_validate import price

git = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
print(f"perfmodel at {git}; local profile, uncalibrated")
rows = json.loads((Path(__file__).parent / "errors_vllm.json").read_text())["vllm"]["rows"]
ids = {r["id"] for r in rows if r["model"] == "qwen3-235b-a22b"}
print(f"{'row':<100} {'GPUs':>4} {'C':>4} {'TPOT':>6} {'graphs':>7} {'eager':>7}")
for e in silicon.express_all(silicon.load_rows())[0]:
    if e.row.id in ids:
        g, n = price(e), price(e, graphs=False)
        print(f"{e.row.id:<100} {e.gpus:4d} {e.concurrency:4d} {e.row.tpot_ms:6.1f} "
              f"{g['tpot_ms'] / e.row.tpot_ms - 1:+7.1%} {n['tpot_ms'] / e.row.tpot_ms - 1:+7.1%}")
