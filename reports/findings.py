"""Findings document for one target: markdown + PNG figures + the JSON every number comes from.

`write_report(req, out, source=...)` runs the projection for the target and, with the same
flags, for the source machine (the one the user has today), gathers the profile's measured
anchors, a sensitivity ranking and the what-ifs of `perfmodel.explore` (each evaluated
at every reported concurrency on both machines) into one dict (`doc_data`), writes it as
`<NAME>.json`, and formats the markdown (`sections.py`) and the figures (`figures.py`) only
from that dict. `doc_data["target"]["projection"]` is exactly what `perfmodel project
--format json` prints for `doc_data["target"]["command"]`. The same input gives the same bytes.
"""

from __future__ import annotations

import re
from dataclasses import replace
from functools import partial
from pathlib import Path

from perfmodel.api import projector as Projector
from perfmodel.errors import ProjectionError
from perfmodel.explore import DELTA, evaluate, sensitivity
from perfmodel.model import whatif
from perfmodel.reports import figures, sections
from perfmodel.reports.sections import fmt  # noqa: F401  (re-exported: tests parse numbers with it)
from perfmodel.reports.writer import check_out, dump_json, staged_report
from perfmodel.request import production_floors
from perfmodel.scenario import Request

FORM_FACTOR_SUFFIXES = ("-sxm", "-server")
COMPONENT_COLORS = figures.COMPONENT_COLORS


class ReportError(ValueError):
    """Cannot write the report; the CLI prints the message as one line and exits 2."""


# ------------------------------------------------------------------------------ helpers
def _check_writable(out: Path) -> None:
    try:
        check_out(out)  # touches nothing: the report is staged beside `out` (reports/writer.py)
    except OSError as e:
        raise ReportError(str(e)) from None


def report_name(target: dict) -> str:
    gpu = target["gpu"]
    for suf in FORM_FACTOR_SUFFIXES:
        if gpu.endswith(suf):
            gpu = gpu[: -len(suf)]
    parts = [gpu, target["memory_kind"]] + ([target["link_kind"]] if target.get("link_kind") else [])
    return re.sub(r"[^A-Z0-9]+", "_", "_".join(parts).upper()).strip("_") + "_NOTES"


def _command(r: Request) -> str:
    parts = [f"perfmodel project --target {r.hw_file and '(hw-file)' or r.target} --gpus {r.gpus} --model {r.model}",
             f"--parallel {r.parallel} --concurrency {','.join(map(str, r.concurrency))} --context {r.context}",
             f"--spec {r.spec} --budget {r.budget} --acceptance {r.acceptance}",
             "--graphs" if r.graphs else "--no-graphs", f"--tree-build {r.tree_build}"]
    for flag, v in (("--profile", r.profile), ("--link", r.link), ("--observed", r.observed),
                    ("--hw-file", r.hw_file), ("--model-file", r.model_file)):
        if v:
            parts.append(f"{flag} {v}")
    if r.host_cpu_factor != 1.0:
        parts.append(f"--host-cpu-factor {r.host_cpu_factor:g}")
    return " ".join(parts) + " --format json"


def _gpu_specs(gpu, link) -> dict:
    m, c = gpu.memory, gpu.compute

    def sv(x):
        return None if x is None else {"value": x.value, "source": x.source}

    return {
        "name": gpu.name, "display_name": gpu.display_name, "architecture": gpu.architecture,
        "memory_kind": m.kind, "capacity_GB": sv(m.capacity_GB), "usable_GB": sv(m.usable_GB),
        "bandwidth_GBps": sv(m.bandwidth_GBps), "bf16_TFLOPS": sv(c.bf16_dense_TFLOPS),
        "fp8_TFLOPS": sv(c.fp8_dense_TFLOPS), "fp4_TFLOPS": sv(c.fp4_dense_TFLOPS),
        "scale_up": {"kind": gpu.scale_up.kind, "bw_per_dir_GBps": sv(gpu.scale_up.bw_per_dir_GBps)},
        "host_link": {"kind": gpu.host_link.kind, "bw_per_dir_GBps": sv(gpu.host_link.bw_per_dir_GBps)},
        "interconnect": None if link is None else {
            "name": link.name, "kind": link.kind, "topology": link.topology,
            "bw_per_dir_GBps": sv(link.peak.bw_per_dir_GBps),
            "allreduce_latency_us": sv(link.calibrated.allreduce_latency_us),
            "allreduce_busbw_GBps": sv(link.calibrated.allreduce_busbw_GBps),
            "alltoall_latency_us": sv(link.calibrated.alltoall_latency_us),
            "alltoall_busbw_GBps": sv(link.calibrated.alltoall_busbw_GBps)},
    }


def _num(d: dict, *keys):
    for k in keys:
        v = d.get(k)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return float(v)
    return None


def _anchors(profile, pgpu) -> dict:
    """Section 2: what was measured on the profile's GPU, from the profile object."""
    prov = profile.provenance
    peak_bw = pgpu.memory.bandwidth_GBps.value
    peak_tf = pgpu.compute.bf16_dense_TFLOPS.value
    measured = prov.kind == "measured"
    a = {"measured": measured, "provenance": {k: v for k, v in prov.model_dump().items() if v not in (None, "")},
         "gpu": pgpu.name, "peak_bw_GBps": peak_bw, "peak_bf16_TFLOPS": peak_tf}
    ce = profile.ceilings
    a["ceilings"] = {"copy_GBps": ce.copy_GBps, "read_GBps": ce.read_GBps, "bf16_TFLOPS": ce.bf16_TFLOPS,
                     "fp8_TFLOPS": ce.fp8_TFLOPS, "source": ce.source,
                     "copy_frac_peak": ce.copy_GBps / peak_bw if ce.copy_GBps else None,
                     "read_frac_peak": ce.read_GBps / peak_bw if ce.read_GBps else None,
                     "bf16_frac_peak": ce.bf16_TFLOPS / peak_tf if ce.bf16_TFLOPS else None}
    a["fits"] = {cls: {"t0_us": f.t0_us, "bw_GBps": f.bw_GBps, "bw_frac_peak": f.bw_GBps / peak_bw,
                       "tflops": f.tflops, "tflops_frac_peak": f.tflops / peak_tf, "rmse_rel": f.rmse_rel,
                       "n_points": f.n_points, "bench": f.bench, "source": f.source}
                 for cls, f in profile.fits.items()}
    o = profile.overheads
    a["overheads"] = o.model_dump() if o else None
    a["collectives"] = [c.model_dump(exclude={"residuals_rel"}) for c in profile.collectives]
    a["treebuild"] = {k: f.model_dump(exclude={"residuals_rel"}) for k, f in profile.treebuild.items()}
    a["benches"] = {n: {"status": b.status, "n_samples": len(b.samples), "note": b.note}
                    for n, b in profile.benches.items()}

    # MoE efficiency curve: achieved GB/s vs tokens per shape/provider; plateau = best median.
    curves = {}
    for bench in ("moe", "moe_w4a16", "moe_bf16"):
        b = profile.benches.get(bench)
        for s in (b.samples if b else []):
            T = _num(s.shape, "T", "tokens", "M", "C")
            gbps = s.achieved_GBps or (s.bytes / (s.median_ms * 1e6) if s.bytes and s.median_ms > 0 else None)
            if T is None or gbps is None:
                continue
            key = f"{bench}:{s.shape.get('shape', s.shape.get('name', ''))}:{s.provider}".strip(":")
            curves.setdefault(key, []).append([T, gbps])
    moe = {}
    for key, pts in curves.items():
        pts.sort()
        plateau = max(g for _, g in pts)
        t90 = next(T for T, g in pts if g >= 0.9 * plateau)
        moe[key] = {"points": pts, "plateau_GBps": plateau, "plateau_frac_peak": plateau / peak_bw,
                    "T_at_90pct_plateau": t90}
    a["moe_curves"] = moe

    # Roofline points: every sample with bytes and flops, except fp8 ones: the roofline drawn
    # is the bf16 one, and an fp8 GEMM would sit above its roof.
    roof = []
    for name, b in profile.benches.items():
        for s in b.samples:
            if "fp8" in str(s.shape.get("op", "")) or "fp8" in str(s.shape.get("dtype", "")):
                continue
            if s.bytes and s.flops and s.median_ms and s.median_ms > 0:
                roof.append([name, s.flops / s.bytes, s.flops / (s.median_ms * 1e-3) / 1e12])
    a["roofline_points"] = roof

    disp = profile.benches.get("dispatch")
    # each sample named by what it timed, and an eager call also by its class ("eager_call gemm_bf16")
    a["dispatch_samples"] = [{"what": " ".join(str(s.shape[k]) for k in ("what", "class") if k in s.shape),
                              "median_ms": s.median_ms}
                             for s in (disp.samples if disp else [])]
    return a


def _largest_fit(points: list[dict]) -> dict | None:
    ok = [p for p in points if p["fits_in_memory"]]
    return max(ok, key=lambda p: p["concurrency"]) if ok else None


def _describes(proj: dict, profile) -> str:
    """What the projection's floors and efficiencies describe: the lead's `describes` string
    when the projection carries one (calibrated runs), else from the profile's provenance."""
    if proj.get("describes"):
        return proj["describes"]
    pv = profile.provenance
    if pv.kind != "measured":
        return f"spec-derived: no measurement; assumed class efficiencies for {pv.gpu_name} (perfmodel/model/derived.py)"
    return (f"perfmodel kernels measured on {pv.gpu_name} ({str(pv.timestamp)[:10]}, git {str(pv.git_sha or '?')[:7]}): "
            "perfmodel's own Triton kernels, uncalibrated to any serving engine")


def _whatifs(req: Request, base: dict, has_moe: bool, has_drafter: bool) -> list[dict]:
    rows = [evaluate(req, w, base["points"]) for w in whatif.variants(req, has_moe, has_drafter, production_floors())]
    return whatif.rank(rows)


def _monotone_notes(proj: dict) -> list[str]:
    """Where tok/s falls with C at a fixed budget for a real reason, say so."""
    notes = []
    if proj["parallel"] == "ep":
        n = proj["target"]["n_gpus"]
        notes.append(f"parallel ep runs attention data-parallel: each GPU holds ceil(C/{n}) sequences, so attention "
                     f"time steps up when C passes a multiple of {n} and aggregate tok/s can dip just past one.")
    return notes


def _production_variant(req: Request, Cs: list[int], src_req: Request | None) -> dict:
    out = {}
    for who, r in (("target", req), ("source", src_req)):
        if r is None:
            continue
        try:
            pts = Projector(replace(r, concurrency=Cs), whatif=partial(whatif.with_production_floors, floors=production_floors())).run()["points"]
        except ProjectionError as e:
            out[who] = {"skipped": str(e)}
            continue
        out[who] = [{k: p.get(k) for k in ("concurrency", "fits_in_memory", "budget", "tau", "step_ms",
                                           "tokens_per_s_per_stream", "tokens_per_s", "bottleneck", "interval")}
                    for p in pts]
    out["floors"] = production_floors()
    return out


# ------------------------------------------------------------------------------ build doc_data
def build_doc_data(req: Request, source: str) -> tuple[dict, object]:
    pj0 = Projector(req)
    max_t = pj0.run()["max_concurrency_that_fits"]
    src_req0 = replace(req, target=source, hw_file=None, link=None)
    try:
        src_pj0 = Projector(src_req0)
        max_s = src_pj0.run()["max_concurrency_that_fits"]
        src_err = None
    except ProjectionError as e:
        src_pj0, max_s, src_err = None, None, str(e)
    asked = set(req.concurrency)
    added = {}
    for C, why in ((1, "a single stream: the latency case every report starts from"),
                   (max_t, "the largest concurrency that fits on the target without speculation"),
                   (max_s, "the largest concurrency that fits on the source without speculation")):
        if C and C not in asked and C not in added:
            added[C] = why
    Cs = sorted(asked | set(added))
    rq = replace(req, concurrency=Cs)
    pj = Projector(rq)
    res = pj.run()
    src, srq = None, None
    if src_err is None:
        srq = replace(src_req0, concurrency=Cs)
        spj = Projector(srq)
        src = {"command": _command(srq), "projection": spj.run(), "specs": _gpu_specs(spj.gpu, spj.link)}
    pgpu = pj.source_gpu
    has_moe, has_drafter = pj.model.moe is not None, pj.model.drafter is not None
    doc = {
        "schema": "perfmodel-findings/2",
        "describes": _describes(res, pj.profile),
        "calibrated": bool(res.get("calibration")),
        "target": {"command": _command(rq), "projection": res, "specs": _gpu_specs(pj.gpu, pj.link)},
        "source": src, "source_error": src_err, "source_name": source,
        "concurrency_asked": sorted(asked), "concurrency_added": {str(C): why for C, why in sorted(added.items())},
        "profile_gpu": _gpu_specs(pgpu, None),
        "anchors": _anchors(pj.profile, pgpu),
        "memory_kinds": {k: {"achievable_fraction": v.achievable_fraction.value,
                             "source": v.achievable_fraction.source, "uncertainty_rel": v.uncertainty_rel}
                         for k, v in sorted(pj.mk.kinds.items()) if k in {pj.gpu.memory.kind, pgpu.memory.kind}
                         | ({src and src["specs"]["memory_kind"]} - {None})},
        "host": {"loop_us": pj.profile.overheads.host_step_us if pj.profile.overheads else None,
                 "engine_host_ms": {str(p["concurrency"]): p["breakdown_ms"].get("engine_host", 0.0)
                                    for p in res["points"] if p["fits_in_memory"]}},
        "monotone_notes": _monotone_notes(res),
    }
    c1 = next(p for p in res["points"] if p["concurrency"] == 1)
    cmax = _largest_fit(res["points"])
    doc["summary"] = {"c1": c1["concurrency"], "cmax": cmax["concurrency"] if cmax else None}
    sens_cs = [1] + ([cmax["concurrency"]] if cmax and cmax["concurrency"] != 1 else [])
    doc["sensitivity"] = {str(C): sensitivity(replace(rq, concurrency=[C]), C) for C in sens_cs}
    doc["sensitivity_delta"] = DELTA
    doc["rank_rule"] = whatif.RANK_RULE
    doc["recommendations"] = _whatifs(rq, res, has_moe, has_drafter)
    doc["source_whatifs"] = _whatifs(srq, src["projection"], has_moe, has_drafter) if src else []
    if not doc["calibrated"]:
        doc["production_floors"] = _production_variant(rq, Cs, srq)
    return doc, pj.profile


# ------------------------------------------------------------------------------ entry point
def write_report(req: Request, out: Path, source: str = "rtx-pro-6000") -> Path:
    """Write `<NAME>_NOTES.md`, `<NAME>_NOTES.json` and `<NAME>_*.png` into `out`; return the markdown path."""
    out = Path(out)
    _check_writable(out)
    doc, _ = build_doc_data(req, source)
    name = report_name(doc["target"]["projection"]["target"])
    stem = name[: -len("_NOTES")]
    try:
        with staged_report(out) as stage:  # all files or none, only our own (reports/writer.py)
            figs = figures.write_all(doc, stage, stem)
            doc["figures"] = figs
            (stage / f"{name}.json").write_text(dump_json(doc))
            (stage / f"{name}.md").write_text(sections.markdown(doc, figs | {"json": f"{name}.json"}))
    except OSError as e:
        raise ReportError(f"cannot write the report to {out}: {e.strerror or e}") from None
    return out / f"{name}.md"


__all__ = ["ReportError", "write_report", "build_doc_data", "report_name", "fmt", "COMPONENT_COLORS"]
