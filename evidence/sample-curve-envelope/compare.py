"""Two price82.py outputs side by side (A then B): per figure, engine, model and system, the signed
and absolute median errors uncalibrated and the absolute calibrated, then pooled
(python evidence/sample-curve-envelope/compare.py A.json B.json)."""

import json
import sys
from collections import defaultdict

import numpy as np

a = json.load(open(sys.argv[1]))
b = {(r["engine"], r["id"], r["fig"]): r for r in json.load(open(sys.argv[2]))}
g = defaultdict(list)
for r in a:
    s = b[(r["engine"], r["id"], r["fig"])]
    system = next((x for x in ("b200", "b300", "h200", "h100") if x in r["id"]), "?")
    model = "qwen" if "qwen" in r["id"] else ("kimi" if "kimi" in r["id"] else "dsr1")
    g[(r["fig"], r["engine"], model, system)].append(
        (r["uncal"] / r["meas"] - 1, s["uncal"] / s["meas"] - 1, r["cal"] / r["meas"] - 1, s["cal"] / s["meas"] - 1))
for k, v in sorted(g.items()):
    v = np.array(v)
    cells = (np.median(v[:, 0]), np.median(v[:, 1]), np.median(abs(v[:, 0])), np.median(abs(v[:, 1])),
             np.median(abs(v[:, 2])), np.median(abs(v[:, 3])))
    print(k, len(v), " uncal signed {:+.1f} -> {:+.1f} |e| {:.1f} -> {:.1f}   cal |e| {:.1f} -> {:.1f}".format(*tuple(100 * x for x in cells)))
for fig in ("tpot_ms", "ttft_ms"):
    v = np.array([x for k, vv in g.items() if k[0] == fig for x in vv])
    print(fig, "uncal {:.1f} -> {:.1f}  cal {:.1f} -> {:.1f}".format(*tuple(100 * np.median(abs(v[:, i])) for i in range(4))))
