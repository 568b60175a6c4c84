"""Engine calibrations from aiconfigurator's measured serving points, on the rows its own estimator
priced (run from the repository root: python evidence/engine-calibrations/run.py [--per-group N]
[--more-per-group N] [--engines vllm,sglang,trtllm] [--held-out gpu,model] [--write]).

For each engine family: the aggregated rows of aiconfigurator-core's silicon_sample.csv that
perfmodel expresses (`perfmodel.silicon`) and that aiconfigurator's estimator priced in its saved
runs (AIC_RESULTS, read back with `silicon_validate.read_aic`: the estimator is not run here), all
of them or, with --per-group N, a stratified subset (at most N rows per model and system, spanning
their loads); --more-per-group N adds up to N of the engine's other expressed rows per model and
system (every system and model the sample holds for the engine, spanning their loads), so that the
fit and its held-out folds see more systems and models than the estimator's rows do. Each row is
a calibration point with its mean TTFT and mean TPOT, priced through the serving simulation with
its server's settings where InferenceX's scripts give them (`silicon.Expressed.scenario`) against
the row's system's imported per-op profile (`perfmodel.aic.import_profile`, the row's engine
version where the database has it: way (b)).
`perfmodel.calibrate.fit` fits the engine's factors (FORMS) with each GPU's points held out in
turn (leave-one-system-out, LOSO), then again with each model's held out (leave-one-model-out,
LOMO). Every row prints perfmodel's errors (uncalibrated, fitted, LOSO, LOMO) beside the
estimator's on the same row, and the summary lines give both on the same rows (the rows the estimator
priced), then perfmodel's on every fitted row.
--write ships the leave-one-system-out fit as perfmodel/data/engines/<engine>.json.
Errors: predicted / measured - 1 (+: too slow).
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
from perfmodel.request import resolve_profile
from perfmodel.silicon_validate import _Imports, error_stats, read_aic

ROOT = Path(__file__).resolve().parents[2]
# aiconfigurator's estimator (0.12.0) on stratified samples of the expressed rows (run_aic.py); a
# row in several files has the same estimate in each.
AIC_RESULTS = ["evidence/silicon-validation/aic_estimator_4_per_group.jsonl",
               "evidence/silicon-validation/aic_estimator_8_per_group.jsonl",
               "evidence/engine-calibrations/aiconfigurator_per_group2.jsonl"]
# The engine beyond its kernels: its host work per step, and its wait before a prompt's first
# token, in ms (its per-request work no step prices: tokenising, the scheduler's receive, the HTTP
# and streaming path) and in decode steps (the scheduler settings the rows do not record,
# InferenceX's TRT-LLM batch waiting and SGLang scheduler_recv_interval). The per-op rows underneath
# are the engine's own kernels on the row's system, so kernel factors are left at 1: fitted beside
# the host term on a few rows per engine they moved far (SGLang's bw.gemm x0.15) and carried worse
# to held-out models (run_five_factors_sglang_6a02438.txt: TPOT leave-one-model-out median +166%).
# A prompt's step also pays the engine's host time per kernel it launches outside CUDA graphs
# (engine_prefill_launch_us: a per-prompt floor that does not shrink with the GPUs,
# evidence/dsr1-ttft-floor/). Each engine's factors and loss are the form whose median errors held
# out by system, TPOT plus TTFT, were lowest among those compared on its rows (variants/,
# compare.txt), or, among forms within a point of it, the one that carried best to rows no fit saw
# (estimator_rows.txt and ../silicon-validation/calibrated_split.txt). vLLM's host time per step was
# kept that way until the imports read the database's expert-parallel MoE rows; on them its form
# without it is 3.5 points lower held out (TPOT 17.9% + TTFT 32.3% against 21.3% + 32.4%,
# variants/launch-ms-host-cauchy/ and run_vllm.txt).
# The cauchy loss, whose pull fades past a point's 1 sigma, keeps a group of rows the model misses
# by far (SGLang's B300 rows with 8192-token prompts, vLLM's H200 Qwen3-235B rows) from setting the
# factors a held-out system then gets.
FORMS = {"vllm": (["engine_prefill_launch_us", "engine_ttft_ms"], "cauchy"),
         "sglang": (["engine_host_us", "engine_ttft_ms"], "cauchy"),
         "trtllm": (["engine_host_us", "engine_ttft_ms", "engine_prefill_launch_us"], "cauchy")}


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
    imports = _Imports(db, local, folder)  # the imported profiles `validate --silicon` prices the rows on
    out, skipped = [], []
    for e in expressed:
        r = e.row
        path = imports.path(r)
        try:
            pt = ObservedPoint(**e.scenario(), concurrency=e.concurrency, profile=str(path), ttft_ms=r.ttft_ms,
                               tpot_ms=r.tpot_ms, label=f"{r.id} [{r.system} {imports.version(r)}]")
            prepare(len(out), pt.singles()[0], local)  # refused as the fit would refuse it: kept out, with the reason
            out.append(pt)
        except ValueError as x:
            skipped.append(f"{r.id}: {str(x).splitlines()[0]}")
    return out, skipped


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--per-group", type=int, default=0, help="at most N rows per model and system (0: every row)")
    ap.add_argument("--more-per-group", type=int, default=0,
                    help="add up to N of the engine's expressed rows the estimator did not price, per model and system")
    ap.add_argument("--engines", default="vllm,sglang,trtllm")
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--held-out", default="gpu,model", help="the leave-one-out fits run: gpu, model or both")
    ap.add_argument("--factors", default="", help="the factors fitted, comma-separated (default: the engine's FORMS)")
    ap.add_argument("--loss", default="", help="the fit's loss, squares, soft_l1 or cauchy (default: the engine's FORMS)")
    ap.add_argument("--aic-results", default="", help="more of the estimator's results files (comma-separated): their "
                                                       "rows join the fit (a variant's; the shipped fits read AIC_RESULTS)")
    ap.add_argument("--tag", default="", help="a variant's name: its errors file goes to variants/<tag>/")
    a = ap.parse_args()
    db = aic.Database.installed()
    local = resolve_profile(None)
    rows = silicon.load_rows(db)
    ok, refused = silicon.express_all(rows)
    est: dict[str, dict] = {}
    for f in AIC_RESULTS + [x for x in a.aic_results.split(",") if x]:
        est |= {i: r for i, r in read_aic((ROOT / f).read_text(), f).items() if "tpot_ms" in r and "ttft_ms" in r}
    print(f"perfmodel at {sha()}; {aic.PACKAGE} {db.version}; {len(rows)} aggregated rows, {len(ok)} expressed, "
          f"{len(refused)} not; {len(est)} priced by aiconfigurator's estimator "
          f"({', '.join(AIC_RESULTS + [x for x in a.aic_results.split(',') if x])})"
          + (f"; factors fitted: {a.factors}" if a.factors else "") + (f"; loss {a.loss}" if a.loss else ""))
    summary = {}
    with tempfile.TemporaryDirectory(prefix="perfmodel-enginecal-") as tmp:
        for engine in a.engines.split(","):
            factors = a.factors.split(",") if a.factors else FORMS[engine][0]
            loss = a.loss or FORMS[engine][1]
            sub = [e for e in ok if e.engine == engine and e.row.id in est]
            if a.per_group:
                sub = silicon.stratified(sub, a.per_group, silicon.group_key)
            if a.more_per_group:
                sub += silicon.stratified([e for e in ok if e.engine == engine and e.row.id not in est],
                                          a.more_per_group, silicon.group_key)
            pts, skipped = points_for(sub, Path(tmp), db, local)
            groups = sorted({(e.model, e.row.system) for e in sub})
            n_est = sum(1 for p in pts if p.label.split()[0] in est)
            print(f"\n== {engine}: {n_est} rows " + (f"(at most {a.per_group} per model and system) " if a.per_group else "")
                  + "of those aiconfigurator's estimator priced"
                  + (f", {len(pts) - n_est} more (at most {a.more_per_group} per model and system)" if a.more_per_group else "")
                  + "; models x systems: "
                  + ", ".join(f"{m} {s} {sum(1 for e in sub if (e.model, e.row.system) == (m, s))}" for m, s in groups)
                  + " ==")
            print(f"  factors fitted: {', '.join(factors)}; loss {loss}")
            for s in skipped:
                print(f"  skipped {s}")
            versions = sorted({p.label.split()[-1].rstrip("]") for p in pts})
            runs = {}
            for held in a.held_out.split(","):
                inp = CalibrationInput(engine=f"{engine} (aiconfigurator-core {db.version} silicon sample; versions "
                                              f"{', '.join(versions)})", points=pts, factors=factors, held_out=held, loss=loss)
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
            res = runs.get("gpu") or next(iter(runs.values()))
            print("  factors: " + ", ".join(f"{f.name} {f.value:.3g} (sigma {f.sigma_post:.3g}, prior {f.sigma_prior:.3g})"
                                            for f in res.factors))
            loso = {(p.index, p.figure): p.loo_err for p in runs["gpu"].points} if "gpu" in runs else {}
            lomo = {(p.index, p.figure): p.loo_err for p in runs["model"].points} if "model" in runs else {}
            print(f"  {'row':<70} {'fig':<7} {'measured':>9} {'uncal':>7} {'fitted':>7} {'LOSO':>7} {'LOMO':>7} {'aic':>7}")
            rows_out = []
            for p in res.points:
                rid = p.label.split()[0]
                e = next(x for x in sub if x.row.id == rid)
                errs = {"uncalibrated": p.uncalibrated / p.observed - 1, "fitted": p.err,
                        "leave-one-system-out": loso.get((p.index, p.figure)),
                        "leave-one-model-out": lomo.get((p.index, p.figure)),
                        "aiconfigurator": est[rid][p.figure] / p.observed - 1 if rid in est else None}
                print(f"  {p.label[:70]:<70} {p.figure:<7} {p.observed:9.2f} "
                      + " ".join(f"{v:+7.1%}" if v is not None else "    n/a" for v in errs.values()))
                rows_out.append({"id": rid, "model": e.model, "system": e.row.system, "figure": p.figure,
                                 "measured": p.observed, "predicted": p.predicted} | errs)
            same = [r for r in rows_out if r["aiconfigurator"] is not None]
            for label, rs in (("", same), (" every fitted row", rows_out if len(same) < len(rows_out) else [])):
                for fig in ("tpot_ms", "ttft_ms"):
                    kinds = ("uncalibrated", "fitted", "leave-one-system-out", "leave-one-model-out")
                    for kind in kinds + (() if label else ("aiconfigurator",)):
                        errs = [r[kind] for r in rs if r["figure"] == fig and r[kind] is not None]
                        if errs:
                            print(f"  {engine:<7} {fig:<8} {kind:<22} {stats(errs)}{label}")
            for by in ("system", "model"):
                for g in sorted({r[by] for r in rows_out}):
                    for fig in ("tpot_ms", "ttft_ms"):
                        rs = [r for r in rows_out if r[by] == g and r["figure"] == fig]
                        line = "  ".join(f"{k} {error_stats([r[k] for r in rs if r[k] is not None])['median_abs'] or 0:6.1%}"
                                         for k in ("leave-one-system-out", "leave-one-model-out", "aiconfigurator")
                                         if any(r[k] is not None for r in rs))
                        print(f"  by {by} {g:<16} {fig:<8} n {len(rs):3d}  median |err|: {line}")
            summary[engine] = {"factors": {f.name: f.value for f in res.factors}, "rows": rows_out}
            if a.write:
                out = ROOT / "perfmodel" / "data" / "engines" / f"{engine}.json"
                out.parent.mkdir(parents=True, exist_ok=True)
                write_result(res, out)
                print(f"  written {out.relative_to(ROOT)}")
    folder = Path(__file__).parent / ("variants/" + a.tag if a.tag else "")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"errors_{a.engines.replace(',', '_')}.json").write_text(json.dumps(summary, indent=1) + "\n")


if __name__ == "__main__":
    sys.exit(main())
