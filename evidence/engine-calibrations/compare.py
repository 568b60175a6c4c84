"""perfmodel's engine calibrations beside aiconfigurator's estimator on the same silicon rows (run from
the repository root after run.py: python evidence/engine-calibrations/compare.py).

Reads errors_*.json (run.py: per engine, each row's errors, uncalibrated and leave-one-system-out)
and aiconfigurator_per_group2.jsonl (evidence/silicon-validation/run_aic.py 2: aiconfigurator's
SILICON-mode estimate of the same stratified rows), and tabulates both on the rows both priced.
"""

from __future__ import annotations

import json
from pathlib import Path

from run import stats  # this folder's run.py (the script's own folder is on the path)

from perfmodel import silicon
from perfmodel.silicon_validate import read_aic

HERE = Path(__file__).parent


def main() -> None:
    rows = {r.id: r for r in silicon.load_rows()}
    aic = read_aic((HERE / "aiconfigurator_per_group2.jsonl").read_text())
    for f in sorted(HERE.glob("errors_*.json")):
        for engine, d in json.loads(f.read_text()).items():
            ids = d["rows"]
            both = [i for i, rid in enumerate(ids) if "error" not in aic.get(rid, {"error": "not run"})]
            print(f"== {engine}: {len(ids)} rows calibrated on; aiconfigurator priced {len(both)} of them ==")
            for fig, key in (("ttft_ms", "ttft"), ("tpot_ms", "tpot")):
                ours = d.get(f"leave-one-system-out {fig}", [])
                unc = d.get(f"uncalibrated {fig}", [])
                theirs = [aic[ids[i]][fig] / getattr(rows[ids[i]], fig) - 1 for i in both]
                print(f"  {fig} perfmodel imported, uncalibrated, all rows      {stats(unc)}")
                print(f"  {fig} perfmodel calibrated, leave-one-system-out, all  {stats(ours)}")
                print(f"  {fig} perfmodel calibrated, leave-one-system-out, both {stats([ours[i] for i in both])}")
                print(f"  {fig} aiconfigurator, both                            {stats(theirs)}")
            for i in both:
                r = rows[ids[i]]
                print(f"    {ids[i][:60]:<60} {r.system:<9} TTFT perfmodel {d['leave-one-system-out ttft_ms'][i]:+6.1%} "
                      f"aiconfigurator {aic[ids[i]]['ttft_ms'] / r.ttft_ms - 1:+6.1%}; TPOT perfmodel "
                      f"{d['leave-one-system-out tpot_ms'][i]:+6.1%} aiconfigurator {aic[ids[i]]['tpot_ms'] / r.tpot_ms - 1:+6.1%}")


if __name__ == "__main__":
    main()
