"""The forms of the engine calibrations side by side, on the same rows, beside aiconfigurator's estimator
(run from the repository root after run.py: python evidence/engine-calibrations/compare.py).

Reads the errors files run.py writes: errors_<engine>.json here (the shipped fit) and
variants/<tag>/errors_<engine>.json (the forms compared with it: the factors fitted and the fit's
loss, run.py --factors/--loss/--tag). Per engine and figure, one line per form: its factors and
the median |error| on every row uncalibrated, fitted, held out by system (LOSO) and by model
(LOMO), and aiconfigurator's on the same rows: the rows it priced. A form fitted on more rows
(run.py --more-per-group) also gets a line on every row it fitted ("+ every row"), without the
estimator's column. Last, each form every engine has (the shipped fits first) pooled: every
engine's rows the estimator priced, one line per figure.
"""

from __future__ import annotations

import json
from pathlib import Path

from perfmodel.silicon_validate import error_stats

HERE = Path(__file__).parent
KINDS = ("uncalibrated", "fitted", "leave-one-system-out", "leave-one-model-out", "aiconfigurator")
SHORT = {"uncalibrated": "uncal", "fitted": "fitted", "leave-one-system-out": "LOSO", "leave-one-model-out": "LOMO",
         "aiconfigurator": "aic"}


def forms() -> list[tuple[str, Path]]:
    one = [p for p in sorted(HERE.glob("errors_*.json")) if "_" not in p.stem[len("errors_"):]]  # one engine a file
    return [("shipped", p) for p in one] + [(p.parent.name, p) for p in sorted(HERE.glob("variants/*/errors_*.json"))]


def main() -> None:
    by_engine: dict[str, list] = {}
    for name, path in forms():
        for engine, d in json.loads(path.read_text()).items():
            by_engine.setdefault(engine, []).append((name, d))
    for engine, runs in sorted(by_engine.items()):
        print(f"== {engine}: median |error| (signed median) on the same rows ==")
        for fig in ("tpot_ms", "ttft_ms"):
            print(f"  {fig:<8} {'form':<24} {'n':>3} " + " ".join(f"{SHORT[k]:>15}" for k in KINDS) + "  factors")
            for name, d in runs:
                every = [r for r in d["rows"] if r["figure"] == fig]
                same = [r for r in every if r.get("aiconfigurator") is not None]
                facs = ", ".join(f"{k} {v:.4g}" for k, v in d["factors"].items())
                for label, rows in ((name, same), (name + " + every row", every if len(every) > len(same) else [])):
                    if not rows:
                        continue
                    cells = []
                    for k in KINDS:
                        s = error_stats([r[k] for r in rows if r.get(k) is not None])
                        cells.append(f"{s['median_abs']:6.1%} ({s['signed_median']:+6.1%})" if s["n"] else f"{'n/a':>15}")
                    print(f"  {fig:<8} {label:<24} {len(rows):3d} " + " ".join(cells) + f"  {facs}")
    pooled = [name for name, _ in next(iter(by_engine.values()))
              if all(any(n == name for n, _ in runs) for runs in by_engine.values())]  # forms every engine has
    for form in pooled:
        rows_all = [r for runs in by_engine.values() for name, d in runs if name == form for r in d["rows"]
                    if r.get("aiconfigurator") is not None]
        print(f"== {form}, pooled over {', '.join(sorted(by_engine))}: median |error| (signed median) on the same rows ==")
        for fig in ("tpot_ms", "ttft_ms"):
            rows = [r for r in rows_all if r["figure"] == fig]
            cells = []
            for k in KINDS:
                st = error_stats([r[k] for r in rows if r.get(k) is not None])
                cells.append(f"{SHORT[k]} {st['median_abs']:.1%} ({st['signed_median']:+.1%})" if st["n"] else f"{SHORT[k]} n/a")
            print(f"  {fig:<8} n {len(rows):3d}  " + "  ".join(cells))

if __name__ == "__main__":
    main()
