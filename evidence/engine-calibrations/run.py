"""Engine calibrations from aiconfigurator's measured serving points (run from the repository root:
python evidence/engine-calibrations/run.py [--per-group N] [--engines vllm,sglang,trtllm] [--write]).

For each engine family: the aggregated rows of aiconfigurator-core's silicon_sample.csv that
perfmodel expresses (`perfmodel.silicon`), a stratified subset (at most N rows per model and
system, spanning their loads), each row a calibration point with its mean TTFT and mean TPOT,
priced through the serving simulation against the row's system's imported per-op profile
(`perfmodel.aic.import_profile`, the row's engine version where the database has it: way (b)).
`perfmodel.calibrate.fit` fits the engine's factors (FACTORS) with each GPU's points held out in
turn (leave-one-system-out), then again with each model's held out (leave-one-model-out).
--write ships the leave-one-system-out fit as perfmodel/data/engines/<engine>.json.
Errors: predicted / measured - 1 (+: perfmodel too slow).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from perfmodel import aic, silicon
from perfmodel.calibrate import CalibrationInput, ObservedPoint, fit, prepare, write_result
from perfmodel.profile import save_profile
from perfmodel.request import resolve_profile
from perfmodel.silicon_validate import error_stats

ROOT = Path(__file__).resolve().parents[2]
# The engine beyond its kernels: its host work per step, and its wait before a prompt's first
# token (in decode steps: the scheduler settings the rows do not record, InferenceX's TRT-LLM
# batch waiting and SGLang scheduler_recv_interval). The per-op rows underneath are the engine's
# own kernels on the row's system, so kernel factors are left at 1: fitted beside the host term on
# a few rows per engine they moved far (SGLang's bw.gemm x0.15) and carried worse to held-out
# models (run_five_factors_sglang_6a02438.txt: TPOT leave-one-model-out median +166%).
FACTORS = ["engine_host_us", "engine_ttft_steps"]


def sha() -> str:
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()


def stats(errs: list[float]) -> str:
    """`silicon_validate.error_stats` of `errs` as one line of text."""
    s = error_stats(errs)
    if not s["n"]:
        return "n   0"
    return (f"n {s['n']:3d}  median |err| {s['median_abs']:6.1%}  p90 |err| {s['p90_abs']:6.1%}  "
            f"signed median {s['signed_median']:+6.1%}")


def points_for(expressed, folder: Path, db, local) -> tuple[list[ObservedPoint], list[str]]:
    paths: dict[tuple, Path] = {}
    out, skipped = [], []
    for e in expressed:
        r = e.row
        vs = db.versions(r.system, r.backend)
        version = r.backend_version if r.backend_version in vs else db.current(r.system, r.backend)
        key = (r.system, r.backend, version)
        if key not in paths:
            prof = aic.import_profile(db, r.system, f"{r.backend}@{version}", local)
            p = folder / f"{r.system}-{r.backend}-{version}.json"
            save_profile(prof.model_dump(mode="json", exclude_none=True), p)
            paths[key] = p
        try:
            pt = ObservedPoint(target=e.target, gpus=e.gpus, model=e.model, parallel=e.parallel,
                               concurrency=e.concurrency, isl=r.isl, osl=r.osl, min_length_ratio=r.min_length_ratio,
                               engine=e.engine,
                               dtypes=dict(e.dtypes) or None, max_batched_tokens=e.max_batched_tokens, profile=str(paths[key]),
                               ttft_ms=r.ttft_ms, tpot_ms=r.tpot_ms, label=f"{r.id} [{r.system} {version}]")
            prepare(len(out), pt.singles()[0], local)  # refused as the fit would refuse it: kept out, with the reason
            out.append(pt)
        except ValueError as x:
            skipped.append(f"{r.id}: {str(x).splitlines()[0]}")
    return out, skipped


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--per-group", type=int, default=2)
    ap.add_argument("--engines", default="vllm,sglang,trtllm")
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--held-out", default="gpu,model", help="the leave-one-out fits run: gpu, model or both")
    a = ap.parse_args()
    db = aic.Database.installed()
    local = resolve_profile(None)
    rows = silicon.load_rows(db)
    ok, refused = silicon.express_all(rows)
    print(f"perfmodel at {sha()}; {aic.PACKAGE} {db.version}; {len(rows)} aggregated rows, {len(ok)} expressed, "
          f"{len(refused)} not; factors fitted: {', '.join(FACTORS)}")
    summary = {}
    with tempfile.TemporaryDirectory(prefix="perfmodel-enginecal-") as tmp:
        for engine in a.engines.split(","):
            sub = silicon.stratified([e for e in ok if e.engine == engine], a.per_group, silicon.group_key)
            pts, skipped = points_for(sub, Path(tmp), db, local)
            print(f"\n== {engine}: {len(pts)} rows ({a.per_group} per model and system) ==")
            for s in skipped:
                print(f"  skipped {s}")
            versions = sorted({p.label.split()[-1].rstrip("]") for p in pts})
            runs = {}
            for held in a.held_out.split(","):
                inp = CalibrationInput(engine=f"{engine} (aiconfigurator-core {db.version} silicon sample; versions "
                                              f"{', '.join(versions)})", points=pts, factors=FACTORS, held_out=held)
                t0 = time.perf_counter()
                try:
                    res = fit(inp, local, "imported per-op profiles")
                except ValueError as x:
                    print(f"  fit failed: {str(x).splitlines()[0]}")
                    break
                runs[held] = res
                print(f"  fit, each {held}'s points held out: {time.perf_counter() - t0:.0f} s")
            if not runs:
                continue
            res = runs["gpu"]
            print("  factors: " + ", ".join(f"{f.name} {f.value:.3g} (sigma {f.sigma_post:.3g}, prior {f.sigma_prior:.3g})"
                                            for f in res.factors))
            lomo = {(p.index, p.figure): p.loo_err for p in runs["model"].points} if "model" in runs else {}
            print(f"  {'row':<70} {'fig':<7} {'measured':>9} {'uncal':>9} {'fitted':>9} {'uncal':>7} {'fitted':>7} "
                  f"{'LOSO':>7} {'LOMO':>7}")
            table = {}
            for p in res.points:
                lm = lomo.get((p.index, p.figure))
                print(f"  {p.label[:70]:<70} {p.figure:<7} {p.observed:9.2f} {p.uncalibrated:9.2f} {p.predicted:9.2f} "
                      f"{p.uncalibrated / p.observed - 1:+7.1%} {p.err:+7.1%} {p.loo_err:+7.1%} "
                      + (f"{lm:+7.1%}" if lm is not None else "    n/a"))
                for kind, v in (("uncalibrated", p.uncalibrated / p.observed - 1), ("fitted", p.err),
                                ("leave-one-system-out", p.loo_err), ("leave-one-model-out", lm)):
                    if v is not None:
                        table.setdefault((kind, p.figure), []).append(v)
            for (kind, fig), errs in sorted(table.items()):
                print(f"  {engine:<7} {fig:<8} {kind:<22} {stats(errs)}")
            summary[engine] = {f"{kind} {fig}": errs for (kind, fig), errs in table.items()} | {
                "rows": [p.label.split()[0] for p in res.points if p.figure == "tpot_ms"]}
            if a.write:
                out = ROOT / "perfmodel" / "data" / "engines" / f"{engine}.json"
                out.parent.mkdir(parents=True, exist_ok=True)
                write_result(res, out)
                print(f"  written {out.relative_to(ROOT)}")
    (Path(__file__).parent / f"errors_{a.engines.replace(',', '_')}.json").write_text(json.dumps(summary, indent=1) + "\n")


if __name__ == "__main__":
    sys.exit(main())
