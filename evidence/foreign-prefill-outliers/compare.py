"""The torch stack's prefill and mixed steps: the embedded H200 profile's samples beside the same
shapes timed again on an H100 by diag_mixed.py (diag_mixed_h100.log). An H100 has the H200's
compute and 70% of its memory bandwidth, so no step should be faster there.

python evidence/foreign-prefill-outliers/compare.py > evidence/foreign-prefill-outliers/compare.txt"""
import json
import re
from pathlib import Path

here = Path(__file__).parent
prof = json.loads((here / "../../perfmodel/data/h200-sxm.json").read_text())
h200 = {(s["shape"]["model"], s["shape"]["batch"]): s["median_ms"] for s in prof["benches"]["foreign_prefill"]["samples"]}
names = {"mixed 1x512@8192 + 64@2048": "--prefill 1x512@8192 --decode 64@2048", "prefill 1x512@0": "--prefill 1x512@0",
         "mixed 1x2048@0 + 32@4096": "--prefill 1x2048@0 --decode 32@4096", "prefill 1x2048@0": "--prefill 1x2048@0"}
print(f"{'model':<15} {'batch':<40} {'H200 profile ms':>16} {'H100 rerun ms':>14} {'H100/H200':>10}")
for line in (here / "diag_mixed_h100.log").read_text().splitlines():
    m = re.match(r"(\S+) (.+): ([0-9.]+) ms$", line)
    if m and m.group(2) in names:
        model, batch, ms = m.group(1), names[m.group(2)], float(m.group(3))
        ref = h200.get((model, batch))
        if ref:
            print(f"{model:<15} {batch:<40} {ref:>16.2f} {ms:>14.2f} {ms / ref:>10.2f}")
