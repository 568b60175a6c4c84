"""The shipped engine calibrations on every row aiconfigurator's estimator priced, split by whether the
calibration was fitted on the row (run from the repository root:
python evidence/engine-calibrations/estimator_rows.py [MORE.jsonl ...] > estimator_rows.txt).

The shipped fits (perfmodel/data/engines/<engine>.json) were fitted on the rows the estimator priced in
run.py's AIC_RESULTS. The estimator's later runs (MORE.jsonl: every model perfmodel expresses, the
Llama rows given the config it ships of their architecture, `silicon_validate.AIC_SHIPPED_CONFIGS`)
priced rows no calibration saw. Each row is priced as run.py prices it (its imported per-op profile, its
server's settings), uncalibrated and through its engine's shipped factors; beside it, the estimator's
own errors on the same row. Errors: predicted / measured - 1 (+: too slow)."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import run as R  # noqa: E402

from perfmodel import aic, silicon  # noqa: E402
from perfmodel.calibrate import load_result, prepare  # noqa: E402
from perfmodel.model.calibration import Factors  # noqa: E402
from perfmodel.request import resolve_profile  # noqa: E402
from perfmodel.silicon_validate import error_stats, merge_aic, read_aic  # noqa: E402


def estimates(files: list[str]) -> dict[str, dict]:
    """The rows the estimator priced in any of `files`."""
    runs = merge_aic(read_aic((R.ROOT / f).read_text(), f) for f in files)
    return {i: r for i, r in runs.items() if "tpot_ms" in r and "ttft_ms" in r}


def line(label: str, rows: list[dict], fig: str) -> str:
    rs = [r for r in rows if r["figure"] == fig]
    cells = []
    for k in ("uncalibrated", "calibrated", "aiconfigurator"):
        s = error_stats([r[k] for r in rs])
        cells.append(f"{k} {s['median_abs']:6.1%} ({s['signed_median']:+6.1%})" if s["n"] else f"{k} n/a")
    return f"  {label:<34} {fig:<8} n {len(rs):3d}  " + "  ".join(cells)


def main() -> None:
    more = sys.argv[1:]
    db = aic.Database.installed()
    local = resolve_profile(None)
    ok, _ = silicon.express_all(silicon.load_rows(db))
    fitted_on = set(estimates(R.AIC_RESULTS))
    est = estimates(R.AIC_RESULTS + more)
    sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=R.ROOT).stdout.strip()
    print(f"perfmodel at {sha}; {aic.PACKAGE} {db.version}; the estimator's results: {', '.join(R.AIC_RESULTS + more)}; "
          f"{len(est)} rows priced, {len(fitted_on)} of them in the shipped fits' files")
    rows = []
    with tempfile.TemporaryDirectory(prefix="perfmodel-estimator-rows-") as tmp:
        for engine in ("vllm", "sglang", "trtllm"):
            cal = load_result(str(R.ROOT / "perfmodel" / "data" / "engines" / f"{engine}.json"))
            factors = Factors(values={f.name: f.value for f in cal.factors})
            sub = [e for e in ok if e.engine == engine and e.row.id in est]
            pts, skipped = R.points_for(sub, Path(tmp), db, local)
            for s in skipped:
                print(f"  skipped {s}")
            for i, pt in enumerate(pts):
                rid = pt.label.split()[0]
                e = next(x for x in sub if x.row.id == rid)
                for single in pt.singles():
                    fig, observed = single.figure
                    prep = prepare(i, single, local)
                    rows.append({"engine": engine, "id": rid, "model": e.model, "system": e.row.system, "figure": fig,
                                 "fitted_on": rid in fitted_on,
                                 "uncalibrated": prep.predict(Factors()) / observed - 1,
                                 "calibrated": prep.predict(factors) / observed - 1,
                                 "aiconfigurator": est[rid][fig] / observed - 1})
    print("median |error| (signed median)")
    for engine in ("vllm", "sglang", "trtllm", None):
        er = [r for r in rows if engine is None or r["engine"] == engine]
        name = engine or "pooled"
        for label, rs in ((f"{name}, rows the fit saw", [r for r in er if r["fitted_on"]]),
                          (f"{name}, rows no fit saw", [r for r in er if not r["fitted_on"]]),
                          (f"{name}, every row", er)):
            for fig in ("tpot_ms", "ttft_ms"):
                print(line(label, rs, fig))
    print("rows no fit saw, by model and system (signed median: uncalibrated, calibrated, aiconfigurator)")
    groups = sorted({(r["engine"], r["model"], r["system"]) for r in rows if not r["fitted_on"]})
    for g in groups:
        for fig in ("tpot_ms", "ttft_ms"):
            rs = [r for r in rows if not r["fitted_on"] and (r["engine"], r["model"], r["system"]) == g and r["figure"] == fig]
            med = [error_stats([r[k] for r in rs])["signed_median"] for k in ("uncalibrated", "calibrated", "aiconfigurator")]
            print(f"  {g[0]:<7} {g[1]:<16} {g[2]:<10} {fig:<8} n {len(rs):2d}  " + "  ".join(f"{m:+7.1%}" for m in med))


if __name__ == "__main__":
    sys.exit(main())
