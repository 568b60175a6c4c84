"""`perfmodel validate`: projections against measurements.

(a) End-to-end synthetic decode steps stored in profiles. One-GPU points are predicted from
    the embedded profile's component fits (the self-check). Multi-GPU points (TP over NVLink)
    are predicted from the ONE-GPU profile plus the link spec — the collectives measured on
    those GPUs are not used, so the check is a real cross-configuration prediction.
(b) A shipped table of published decode figures (perfmodel/data/published.yaml), projected
    from the embedded profile through the transfer rules onto the published hardware.
"""

from __future__ import annotations

import statistics
from importlib import resources
from pathlib import Path

from perfmodel.api import cached_self_check, projector
from perfmodel.errors import ProjectionError
from perfmodel.inputs import parse_yaml
from perfmodel.model.calibration import factors_of
from perfmodel.model.e2e import predict_e2e
from perfmodel.model.layers import Batch, Decode, Layout, Prefill
from perfmodel.model.machine import build_machine, missing_fits
from perfmodel.model.project import Projector
from perfmodel.model.result import Point
from perfmodel.model.step import Z90, batch_estimate, step_estimate
from perfmodel.profile import Profile, load_profile
from perfmodel.request import (
    _check_profile_refs,
    e2e_inputs,
    profile_path,
    profile_source_gpu,
    resolve_profile,
    shipped_profiles,
)
from perfmodel.scenario import Request
from perfmodel.specs import registry


def published_rows() -> list[dict]:
    text = resources.files("perfmodel").joinpath("data", "published.yaml").read_text()
    return parse_yaml(text, "perfmodel/data/published.yaml")


def _e2e_rows(prof: Profile, base: Profile, path: str) -> list[dict]:
    rows = []
    # Multi-GPU points: the 1-GPU benches plus the link spec (measured collectives dropped).
    # Predicted on the GPU the points were measured on, from `base`'s benches: another GPU's
    # base goes through the transfer rules (measure there, project here).
    src, target = profile_source_gpu(base), profile_source_gpu(prof)
    models, link = e2e_inputs(prof, target)
    for p, est in predict_e2e(prof.e2e, base, src, registry.load_memory_kinds(), models, link, target=target):
        pred = est.step_us / 1e3
        lo, hi = pred - Z90 * est.sigma_us / 1e3, pred + Z90 * est.sigma_us / 1e3
        kind = f"e2e-{p.n_gpus}gpu" + ("" if p.parallel == "tp" else "-ep")  # EP layouts apart from TP
        rows.append({"kind": kind, "point": f"{p.name} C={p.concurrency} q={p.q} L={p.context}",
                     "measured": p.step_ms, "unit": "ms/step", "predicted": pred, "err": pred / p.step_ms - 1,
                     "in_interval": lo <= p.step_ms <= hi, "source": f"{Path(path).name} ({prof.provenance.gpu_name})"})
    return rows


def _published(base_path: str | None, calibration: str | None = None) -> list[dict]:
    rows = []
    for r in published_rows():
        req = Request(target=r["gpu"], gpus=r["gpus"], model=r["model"], parallel=r["parallel"],
                      concurrency=[r["concurrency"]], context=r["context"], profile=base_path,
                      dtypes=r.get("dtypes"), calibration=calibration)
        pj = projector(req)
        pt = pj.projection().points[0]
        if not pt.fits_in_memory:
            rows.append({"kind": "published", "point": r["id"], "measured": r["figure"], "unit": r["unit"],
                         "predicted": None, "err": None, "in_interval": False,
                         "source": r["source"] + " — projected not to fit"})
            continue
        total = r["unit"] == "tok/s total"
        pred = pt.tokens_per_s if total else pt.tokens_per_s_per_stream
        iv = pt.interval.tokens_per_s if total else pt.interval.tokens_per_s_per_stream
        if total and r.get("osl"):
            pred, iv = _with_prefill(pj, r, pt)
        rows.append({"kind": "published", "point": f"{r['id']} ({r['engine']})", "measured": r["figure"],
                     "unit": r["unit"], "predicted": pred, "err": pred / r["figure"] - 1,
                     "in_interval": iv[0] <= r["figure"] <= iv[1], "source": r["source"]})
    return rows


def _with_prefill(pj: Projector, r: dict, pt: Point) -> tuple[float, list[float]]:
    """Whole-request throughput: C requests each prefill `isl` tokens (one forward of C·isl
    tokens, priced by the same step model, compute-bound there) and decode `osl` tokens:
    C·osl / (t_prefill + osl · t_step)."""
    C, isl, osl = r["concurrency"], r["isl"], r["osl"]
    pre_ms = step_estimate(pj.model, pj.machine, pj.layout, C, isl, 0, graph=pj.req.graphs).step_us / 1e3

    def tput(step_ms: float) -> float:
        return C * osl / ((pre_ms + osl * step_ms) / 1e3)

    lo, hi = pt.interval.step_ms
    return tput(pt.step_ms), [tput(hi), tput(lo)]


def _summary(rows: list[dict]) -> dict:
    by = {}
    for kind in sorted({r["kind"] for r in rows}):
        errs = [abs(r["err"]) for r in rows if r["kind"] == kind and r["err"] is not None]
        cov = [r["in_interval"] for r in rows if r["kind"] == kind and r["in_interval"] is not None]
        by[kind] = {"n": len(errs), "median_abs_err": statistics.median(errs) if errs else None,
                    "max_abs_err": max(errs) if errs else None,
                    "coverage": sum(cov) / len(cov) if cov else None}
    allerr = [abs(r["err"]) for r in rows if r["err"] is not None]
    return {"by_kind": by, "median_abs_err": statistics.median(allerr) if allerr else None}


def _foreign_rows(prof: Profile, base: Profile, path: str) -> list[dict]:
    """The torch-only stack (kernels perfmodel did not write): calibrate on two of its points
    (`calibrate.calibration_pair`), predict the rest. `foreign-calibrated` starts from the
    kernel set "torch" (the laws of torch's own ops, timed in isolation by the attention, MoE
    and elementwise benches); `foreign-uncalibrated` is that set before calibrating;
    `foreign-calibrated-own-kernels` starts from perfmodel's own kernels instead."""
    from perfmodel.calibrate import CalibrationInput, calibration_pair, fit, points_from_foreign, predict_interval, prepare
    from perfmodel.model.calibration import Factors

    gpu = prof.provenance.gpu_spec or profile_source_gpu(base).name
    pts = points_from_foreign(prof, gpu)
    if len(pts) < 3:
        return []
    pair = calibration_pair(pts)
    rows = []
    for kernels, kind in (("torch", "foreign-calibrated"), ("perfmodel", "foreign-calibrated-own-kernels")):
        if kernels != "perfmodel" and not any(k.endswith(f"@{kernels}") for k in base.fits):
            continue  # an older profile: no laws of that kernel set
        cal = fit(CalibrationInput(engine="torch-only decode stack (cuBLAS, SDPA, torch._grouped_mm, NCCL)",
                                   kernels=kernels, points=[pts[i] for i in pair]), base, base.label)
        src = (f"{Path(path).name} ({prof.provenance.gpu_name}); kernel set {kernels}; calibrated on "
               + " and ".join(pts[i].describe() for i in pair))
        for i, p in enumerate(pts):
            if i in pair:
                continue
            prep = prepare(i, p, base, kernels)
            pred, lo, hi = predict_interval(prep, cal, Z90)
            out = [(kind, pred, lo <= p.step_ms <= hi)]
            if kind == "foreign-calibrated":
                out.append(("foreign-uncalibrated", prep.estimate(Factors()).step_us / 1e3, None))
            for k, v, inside in out:
                rows.append({"kind": k, "point": p.describe(), "measured": p.step_ms, "unit": "ms/step", "predicted": v,
                             "err": v / p.step_ms - 1, "in_interval": inside, "source": src})
    return rows


def _foreign_prefill_rows(prof: Profile, base: Profile, path: str) -> list[dict]:
    """The torch-only stack's prefill and mixed (chunked-prefill + decode) steps (bench
    `foreign_prefill`: eager, no host loop), each predicted as one batch (`step.batch_estimate`)
    from `base`'s benches, kernel set "torch", uncalibrated (kind `foreign-prefill`)."""
    res = prof.benches.get("foreign_prefill")
    if res is None or res.status != "ok" or not any(k.endswith("@torch") for k in base.fits):
        return []
    src = profile_source_gpu(base)
    mach = build_machine(src, 1, None, base, src, registry.load_memory_kinds(), graph=False, kernel_set="torch")
    rows = []
    for s in res.samples:
        sh = s.shape
        if int(sh.get("n_gpus", 1)) != 1:
            continue
        groups = [Prefill(n=int(sh["prefill_n"]), tokens=int(sh["prefill_T"]), prefix=int(sh["prefill_P"]))]
        if int(sh.get("decode_n", 0)):
            groups.append(Decode(n=int(sh["decode_n"]), context=int(sh["decode_ctx"])))
        est = batch_estimate(registry.load_model(sh["model"]), mach, Layout("tp", 1), Batch(groups=tuple(groups),
                             logits=sh.get("logits", "last")), graph=False, host=False, n_layers=int(sh["n_layers"]))
        pred = est.step_us / 1e3
        lo, hi = pred - Z90 * est.sigma_us / 1e3, pred + Z90 * est.sigma_us / 1e3
        rows.append({"kind": "foreign-prefill", "point": f"{sh['model']} {sh['batch']}", "measured": s.median_ms,
                     "unit": "ms/step", "predicted": pred, "err": pred / s.median_ms - 1, "in_interval": lo <= s.median_ms <= hi,
                     "source": f"{Path(path).name} ({prof.provenance.gpu_name}); kernel set torch; uncalibrated"})
    return rows


def _published_logo(base_path: str | None) -> list[dict]:
    """Leave one GPU out: for each engine with published points on several GPUs, calibrate on
    one GPU's points and predict the others' (kind `published-logo`)."""
    from perfmodel.calibrate import CalibrationError, CalibrationInput, fit, prepare

    base = resolve_profile(base_path)
    rows_in = published_rows()
    by_engine: dict[str, dict[str, list[dict]]] = {}
    for r in rows_in:
        by_engine.setdefault(r["engine"], {}).setdefault(r["gpu"], []).append(r)
    out = []
    for engine, by_gpu in sorted(by_engine.items()):
        if len(by_gpu) < 2:
            continue
        pts = {r["id"]: _observed(r) for rs in by_gpu.values() for r in rs}
        for gpu, cal_rows in sorted(by_gpu.items()):
            try:
                cal = fit(CalibrationInput(engine=engine, points=[pts[r["id"]] for r in cal_rows]), base, base.label)
            except CalibrationError:
                continue  # a calibration point the model cannot price (e.g. projected not to fit)
            f = factors_of(cal)
            for other, rs in sorted(by_gpu.items()):
                if other == gpu:
                    continue
                for r in rs:
                    try:
                        pred = prepare(0, pts[r["id"]], base).predict(f)
                    except CalibrationError:
                        continue
                    out.append({"kind": "published-logo", "point": f"{r['id']} ({engine}) from {gpu}",
                                "measured": r["figure"], "unit": r["unit"], "predicted": pred,
                                "err": pred / r["figure"] - 1, "in_interval": None,
                                "source": f"calibrated on {engine}'s {gpu} points: " + ", ".join(x["id"] for x in cal_rows)})
    return out


def _observed(r: dict):
    from perfmodel.calibrate import ObservedPoint

    total = r["unit"] == "tok/s total"
    return ObservedPoint(target=r["gpu"], gpus=r["gpus"], model=r["model"], parallel=r["parallel"],
                         concurrency=r["concurrency"], context=r["context"], dtypes=r.get("dtypes"),
                         isl=r.get("isl") if total else None, osl=r.get("osl") if total else None,
                         **({"tokens_per_s": float(r["figure"])} if total else {"tokens_per_s_per_stream": float(r["figure"])}),
                         label=r["id"])


def run_validation(profiles: list[str] | None = None, published: bool = True, base: str | None = None,
                   calibration: str | None = None) -> dict:
    """Each profile's e2e points are predicted from that same profile's 1-GPU benches (plus the
    link spec for multi-GPU points), unless `base` names the profile to predict from or the
    profile lacks kernel fits (a partial run); the published figures are predicted from
    `base` (default: the embedded profile)."""
    base_prof = resolve_profile(base)
    if calibration is not None:  # read and checked before any row is priced: a bad file fails fast
        from perfmodel.api import check_inputs

        check_inputs(Request(calibration=calibration))
    paths = [str(profile_path(p)) for p in profiles] if profiles else [str(p) for p in shipped_profiles()]
    rows: list[dict] = []
    for path in paths:
        try:
            prof = load_profile(path)
        except ValueError as e:
            raise ProjectionError(str(e)) from None
        _check_profile_refs(prof, path)
        own = base is None and not missing_fits(prof)  # a partial run (--only) cannot predict itself
        rows += _e2e_rows(prof, prof if own else base_prof, path)
        rows += _foreign_rows(prof, prof if own else base_prof, path)
        rows += _foreign_prefill_rows(prof, prof if own else base_prof, path)
    if published:
        rows += _published(base, calibration)
        if calibration is None:
            rows += _published_logo(base)
    if not rows:
        raise ProjectionError("nothing was checked: " + (", ".join(paths) or "no profiles") + " hold no end-to-end "
                              "points" + (" and --no-published skips the published figures" if not published else ""))
    return {"base_profile": base_prof.label, "rows": rows, "summary": _summary(rows),
            "self_check": {k: v for k, v in cached_self_check(base_prof, registry.load_memory_kinds()).items() if k != "points"}}
