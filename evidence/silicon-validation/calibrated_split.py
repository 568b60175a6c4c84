"""The calibrated way on every expressed row, split by whether a row was one the shipped engine
calibrations were fitted on (the rows aiconfigurator's estimator priced,
`../engine-calibrations/errors_<engine>.json`) or not, beside the imported way (the same per-op
profiles, no calibration) on the same rows.

    python evidence/silicon-validation/calibrated_split.py all_rows_calibrated.json all_rows.json \
        > evidence/silicon-validation/calibrated_split.txt   (run in this folder)

Median |error| (signed median) of predicted / measured - 1, per engine and overall.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from perfmodel.silicon_validate import error_stats

HERE = Path(__file__).parent


def _fitted_ids() -> set[str]:
    out = set()
    for p in sorted((HERE.parent / "engine-calibrations").glob("errors_*.json")):
        if "_" in p.stem[len("errors_"):]:
            continue
        for d in json.loads(p.read_text()).values():
            out |= {r["id"] for r in d["rows"]}
    return out


def _fmt(xs: list[float]) -> str:
    s = error_stats(xs)
    return f"{s['median_abs']:6.1%} ({s['signed_median']:+6.1%})" if s["n"] else f"{'n/a':>16}"


def main() -> None:
    cal = {p["id"]: p for p in json.loads((HERE / sys.argv[1]).read_text())["points"]}
    imp = {p["id"]: p for p in json.loads((HERE / sys.argv[2]).read_text())["points"]}
    fitted = _fitted_ids()
    print(f"{sys.argv[1]} (calibrated) beside {sys.argv[2]} (imported); {len(fitted)} rows the calibrations were fitted on")
    print(f"{'rows':<34} {'figure':<8} {'n':>5}  {'imported':>16}  {'calibrated':>16}")
    for engine in ("all", "sglang", "trtllm", "vllm"):
        for part, keep in (("fitted on", lambda i: i in fitted), ("not fitted on", lambda i: i not in fitted)):
            for fig in ("tpot_ms", "ttft_ms"):
                a, b = [], []
                for i, p in cal.items():
                    q = imp.get(i)
                    if q is None or not keep(i) or (engine != "all" and p["engine"] != engine):
                        continue
                    pc, pi = p["predicted"].get("calibrated", {}), q["predicted"].get("imported", {})
                    if fig in pc and fig in pi:
                        m = p["measured"][fig]
                        a.append(pi[fig] / m - 1)
                        b.append(pc[fig] / m - 1)
                print(f"{engine + ', ' + part:<34} {fig:<8} {len(a):5d}  {_fmt(a)}  {_fmt(b)}")


if __name__ == "__main__":
    main()
