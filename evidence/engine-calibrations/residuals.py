"""Where the engine calibrations miss, from run.py's errors files (run from the repository root:
python evidence/engine-calibrations/residuals.py errors_vllm.json errors_sglang.json ...).

Per engine, model and system: the rows' signed median TPOT and TTFT errors uncalibrated, fitted,
held out by system (LOSO) and by model (LOMO), and aiconfigurator's on the same rows. Then, per
row, the time per step the uncalibrated TPOT lacks (measured - uncalibrated TPOT, ms: what one
per-step host term would have to add to that row alone) beside what could scale it (the model's
layers, the GPUs, the concurrency, the per-GPU decode step's size), with Spearman's rank
correlation of that time against each over the engine's rows: a host term that scales with one of
them would show here as a correlation near 1.
"""

import json
import statistics
import sys
from pathlib import Path

from scipy.stats import spearmanr

from perfmodel import silicon
from perfmodel.specs import registry

KINDS = ("uncalibrated", "fitted", "leave-one-system-out", "leave-one-model-out", "aiconfigurator")
SHORT = {"uncalibrated": "uncal", "fitted": "fitted", "leave-one-system-out": "LOSO", "leave-one-model-out": "LOMO",
         "aiconfigurator": "aic"}

expressed = {e.row.id: e for e in silicon.express_all(silicon.load_rows())[0]}


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def cell(x):
    return f"{x:+7.1%}" if x is not None else "    n/a"


for f in sys.argv[1:]:
    data = json.loads((Path(__file__).parent / Path(f).name).read_text())
    for engine, d in data.items():
        rows = d["rows"]
        print(f"== {engine} ({Path(f).name}; factors {', '.join(f'{k} {v:.4g}' for k, v in d['factors'].items())}) ==")
        print("  signed median error by model and system")
        print(f"  {'model':<16} {'system':<10} {'fig':<8} {'n':>3} " + " ".join(f"{SHORT[k]:>7}" for k in KINDS))
        for m, s in sorted({(r["model"], r["system"]) for r in rows}):
            for fig in ("tpot_ms", "ttft_ms"):
                rs = [r for r in rows if (r["model"], r["system"], r["figure"]) == (m, s, fig)]
                print(f"  {m:<16} {s:<10} {fig:<8} {len(rs):3d} " + " ".join(cell(med(r[k] for r in rs)) for k in KINDS))
        tp = [r for r in rows if r["figure"] == "tpot_ms"]
        print("  per row: TPOT the uncalibrated step lacks (ms) and what could scale it")
        print(f"  {'row':<72} {'lacks':>7} {'layers':>6} {'gpus':>4} {'C':>5} {'uncal':>7} {'LOSO':>7} {'aic':>7}")
        cols = {"layers": [], "gpus": [], "concurrency": [], "uncalibrated TPOT": [], "lacks": []}
        for r in sorted(tp, key=lambda r: (r["model"], r["system"], r["id"])):
            e = expressed[r["id"]]
            layers = registry.load_model(e.model).n_layers
            uncal = r["measured"] * (1 + r["uncalibrated"])
            lacks = r["measured"] - uncal
            for k, v in (("layers", layers), ("gpus", e.gpus), ("concurrency", e.concurrency), ("uncalibrated TPOT", uncal),
                         ("lacks", lacks)):
                cols[k].append(v)
            print(f"  {r['id'][:72]:<72} {lacks:7.2f} {layers:6d} {e.gpus:4d} {e.concurrency:5d} "
                  f"{cell(r['uncalibrated'])} {cell(r['leave-one-system-out'])} {cell(r['aiconfigurator'])}")
        for k in ("layers", "gpus", "concurrency", "uncalibrated TPOT"):
            rho = spearmanr(cols["lacks"], cols[k]).statistic if len(set(cols[k])) > 1 else float("nan")
            print(f"  Spearman rank correlation of the lacking time with {k}: {rho:+.2f}")
        print()
