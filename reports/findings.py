"""Findings document for one target: markdown + PNG figures + the JSON every number comes from.

`write_report(req, out, source=...)` runs the projection for the target and, with the same
flags, for the source machine (the one the user has today), gathers the profile's measured
anchors, a sensitivity ranking and one-change-at-a-time recommendations into one dict
(`doc_data`), writes it as `<NAME>.json`, and formats the markdown and the figures only from
that dict. `doc_data["target"]["projection"]` is exactly what `perfmodel project --format
json` prints for `doc_data["target"]["command"]`.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import replace
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from perfmodel.model.project import Projector, ProjectionError, Request  # noqa: E402
from perfmodel.model.sensitivity import DELTA, _perturbations, sensitivity  # noqa: E402


class ReportError(ValueError):
    """Cannot write the report; the CLI prints the message as one line and exits 2."""


# One fixed colour per step component, used by every figure (tab20-based, colour-blind aware
# enough to tell 12 stacked segments apart).
COMPONENT_COLORS = {
    "moe": "#1f77b4",
    "attention": "#ff7f0e",
    "dense": "#2ca02c",
    "elementwise": "#98df8a",
    "lm_head": "#8c564b",
    "latency_floor": "#d62728",
    "collectives": "#9467bd",
    "dispatch": "#e377c2",
    "host": "#7f7f7f",
    "draft": "#bcbd22",
    "tree_build": "#17becf",
    "engine_host": "#c5b0d5",
}
MACHINE_COLORS = {"source": "#4c72b0", "target": "#dd8452"}
# Kernel classes and benches drawn in the colour of the component they price.
CLASS_COMPONENT = {"moe_w4a16": "moe", "moe_bf16": "moe", "attention_mla": "attention", "attention_gqa": "attention",
                   "gemm_bf16": "dense", "elementwise": "elementwise"}
BENCH_COMPONENT = {"moe": "moe", "attention": "attention", "gemm": "dense", "elementwise": "elementwise",
                   "treebuild": "tree_build", "dispatch": "dispatch", "collectives": "collectives"}
FORM_FACTOR_SUFFIXES = ("-sxm", "-server")


# ------------------------------------------------------------------------------ formatting
def fmt(x, signed: bool = False) -> str:
    """The one number format of the document (tests parse it back)."""
    if x is None:
        return "n/a"
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return str(x)
    if isinstance(x, int):
        s = f"{x:,}"
    else:
        a = abs(x)
        s = f"{x:,.0f}" if a >= 1000 else f"{x:.1f}" if a >= 100 else f"{x:.2f}" if a >= 1 else f"{x:.3f}"
    return ("+" + s) if signed and x >= 0 else s


def pct(x, signed: bool = True) -> str:
    return "n/a" if x is None else fmt(100.0 * x, signed=signed) + "%"


def iv(lo, hi) -> str:
    return f"[{fmt(lo)}–{fmt(hi)}]"


# ------------------------------------------------------------------------------ helpers
def _check_writable(out: Path) -> None:
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".perfmodel-write-probe"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        raise ReportError(f"cannot write the report to {out}: {e.strerror or e}") from None


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

    # Roofline points: every sample with bytes and flops.
    roof = []
    for name, b in profile.benches.items():
        for s in b.samples:
            if s.bytes and s.flops and s.median_ms and s.median_ms > 0:
                roof.append([name, s.flops / s.bytes, s.flops / (s.median_ms * 1e-3) / 1e12])
    a["roofline_points"] = roof

    disp = profile.benches.get("dispatch")
    a["dispatch_samples"] = [{"what": str(s.shape.get("what", "")), "median_ms": s.median_ms}
                             for s in (disp.samples if disp else [])]
    return a


def _pt_summary(p: dict) -> dict:
    keep = ("concurrency", "step_ms", "tokens_per_s_per_stream", "tokens_per_s", "tau", "budget", "bottleneck",
            "breakdown_ms", "fits_in_memory")
    return {k: p[k] for k in keep if k in p}


def _largest_fit(points: list[dict]) -> dict | None:
    ok = [p for p in points if p["fits_in_memory"]]
    return max(ok, key=lambda p: p["concurrency"]) if ok else None


def _variants(req: Request, model_has_moe: bool, model_has_drafter: bool, c1_budget: int | None) -> list[dict]:
    """One change each: (label, request edit or machine edit)."""
    v = []
    if req.spec == "ddtree":
        other = "cpu" if req.tree_build == "gpu" else "gpu"
        v.append({"key": "tree_build", "change": f"tree building on the {other.upper()} (now {req.tree_build.upper()})",
                  "req": {"tree_build": other}})
    v.append({"key": "graphs", "change": "CUDA graphs " + ("off (eager launches)" if req.graphs else "on"),
              "req": {"graphs": not req.graphs}})
    if req.spec != "none":
        if req.budget != "auto":
            v.append({"key": "budget", "change": f"tree budget auto (now fixed {req.budget})", "req": {"budget": "auto"}})
        elif c1_budget:
            v.append({"key": "budget", "change": f"tree budget fixed at {c1_budget} (the C=1 best) instead of auto",
                      "req": {"budget": c1_budget}})
    if model_has_moe:
        for par in ("tp", "ep", "tp-attn-ep-moe"):
            if par != req.parallel:
                v.append({"key": f"parallel_{par}", "change": f"parallel {par} (now {req.parallel})", "req": {"parallel": par}})
    if model_has_drafter:
        for spec in ("none", "chain", "ddtree"):
            if spec != req.spec:
                v.append({"key": f"spec_{spec}", "change": f"speculative decoding {spec} (now {req.spec})",
                          "req": {"spec": spec, "budget": "auto"}})
    pert = _perturbations()
    v.append({"key": "latency_floor_half", "change": "per-kernel latency floors halved (fused / persistent kernels)",
              "machine": ("per-kernel latency floor", 0.5)})
    if req.gpus > 1:
        v.append({"key": "collective_latency_half", "change": "collective latency −50% (e.g. one-shot / NVLS all-reduce)",
                  "machine": ("collective latency", 0.5)})
    v.append({"key": "host_half", "change": "host overhead −50% (per step and per launch)",
              "machine": ("host overhead (per step, per launch)", 0.5)})
    v.append({"key": "graph_node_half", "change": "CUDA-graph node cost −50%", "machine": ("graph node cost", 0.5)})
    for x in v:
        if "machine" in x:
            x["fn"] = pert[x["machine"][0]]
    return v


def _recommendations(req: Request, base: dict, Cs: list[int], has_moe: bool, has_drafter: bool) -> list[dict]:
    base_pts = {p["concurrency"]: p for p in base["points"]}
    c1_budget = base_pts[Cs[0]].get("budget") if base_pts[Cs[0]]["fits_in_memory"] else None
    rows = []
    for v in _variants(req, has_moe, has_drafter, c1_budget):
        r2 = replace(req, concurrency=Cs, **v.get("req", {}))
        try:
            pj = Projector(r2)
            if "fn" in v:
                v["fn"](pj, v["machine"][1])
            res = pj.run()
        except (ProjectionError, ValueError) as e:
            rows.append({"key": v["key"], "change": v["change"], "skipped": str(e).splitlines()[0]})
            continue
        per_c = []
        for p in res["points"]:
            b = base_pts[p["concurrency"]]
            if not (p["fits_in_memory"] and b["fits_in_memory"]):
                per_c.append({"concurrency": p["concurrency"], "fits": False})
                continue
            comps = set(b["breakdown_ms"]) | set(p["breakdown_ms"])
            diff = {c: p["breakdown_ms"].get(c, 0.0) - b["breakdown_ms"].get(c, 0.0) for c in comps}
            top = max(diff, key=lambda c: abs(diff[c]))
            per_c.append({"concurrency": p["concurrency"], "fits": True,
                          "base": _pt_summary(b) | {"breakdown_ms": None},
                          "new": _pt_summary(p) | {"breakdown_ms": None},
                          "component": top, "component_base_ms": b["breakdown_ms"].get(top, 0.0),
                          "component_new_ms": p["breakdown_ms"].get(top, 0.0),
                          "gain": p["tokens_per_s_per_stream"] / b["tokens_per_s_per_stream"] - 1})
        gains = [x["gain"] for x in per_c if x["fits"]]
        rows.append({"key": v["key"], "change": v["change"], "per_concurrency": per_c,
                     "rank_gain": max(gains) if gains else None})
    rows.sort(key=lambda r: -(r.get("rank_gain") if r.get("rank_gain") is not None else -1e9))
    return rows


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
    Cs = sorted(set(req.concurrency) | {1, max_t} | ({max_s} if max_s else set()))
    rq = replace(req, concurrency=Cs)
    pj = Projector(rq)
    res = pj.run()
    src = None
    if src_err is None:
        srq = replace(src_req0, concurrency=Cs)
        spj = Projector(srq)
        src = {"command": _command(srq), "projection": spj.run(), "specs": _gpu_specs(spj.gpu, spj.link)}
    pgpu = pj.source_gpu
    doc = {
        "schema": "perfmodel-findings/1",
        "target": {"command": _command(rq), "projection": res, "specs": _gpu_specs(pj.gpu, pj.link)},
        "source": src, "source_error": src_err, "source_name": source,
        "profile_gpu": _gpu_specs(pgpu, None),
        "anchors": _anchors(pj.profile, pgpu),
        "memory_kinds": {k: {"achievable_fraction": v.achievable_fraction.value,
                             "source": v.achievable_fraction.source, "uncertainty_rel": v.uncertainty_rel}
                         for k, v in pj.mk.kinds.items() if k in {pj.gpu.memory.kind, pgpu.memory.kind}
                         | ({src and src["specs"]["memory_kind"]} - {None})},
    }
    c1 = next(p for p in res["points"] if p["concurrency"] == 1)
    cmax = _largest_fit(res["points"])
    doc["summary"] = {"c1": c1["concurrency"], "cmax": cmax["concurrency"] if cmax else None}
    sens_cs = [1] + ([cmax["concurrency"]] if cmax and cmax["concurrency"] != 1 else [])
    doc["sensitivity"] = {str(C): sensitivity(replace(rq, concurrency=[C]), C) for C in sens_cs}
    doc["sensitivity_delta"] = DELTA
    doc["recommendations"] = _recommendations(rq, res, sens_cs, pj.model.moe is not None, pj.model.drafter is not None)
    return doc, pj.profile


# ------------------------------------------------------------------------------ figures
def _save(fig, path) -> None:
    """Every figure is written the same way: tight layout, 110 dpi PNG, figure closed."""
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _fig_breakdown(doc, path):
    tp = doc["target"]["projection"]
    sp = doc["source"]["projection"] if doc["source"] else None
    Cs = [p["concurrency"] for p in tp["points"]]
    fig, ax = plt.subplots(figsize=(max(7, 1.3 * len(Cs) + 2), 4.8))
    used = set()
    w = 0.38
    for i, C in enumerate(Cs):
        for j, (who, proj) in enumerate((("source", sp), ("target", tp))):
            if proj is None:
                continue
            p = next(q for q in proj["points"] if q["concurrency"] == C)
            x = i + (j - 0.5) * (w + 0.02)
            if not p["fits_in_memory"]:
                ax.text(x, 0, "no fit", rotation=90, ha="center", va="bottom", fontsize=8, color="0.4")
                continue
            bottom = 0.0
            for comp in COMPONENT_COLORS:
                v = p["breakdown_ms"].get(comp, 0.0)
                if v <= 0:
                    continue
                ax.bar(x, v, w, bottom=bottom, color=COMPONENT_COLORS[comp],
                       edgecolor=MACHINE_COLORS[who], linewidth=0.8, label=None if comp in used else comp)
                used.add(comp)
                bottom += v
            ax.text(x, bottom, "S" if who == "source" else "T", ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(len(Cs)), [f"C={C}" for C in Cs])
    ax.set_ylabel("step time (ms)")
    src_name = doc["source"]["projection"]["target"]["gpu"] if sp else "—"
    ax.set_title(f"Step-time breakdown: S = {tp['target']['n_gpus']}× {src_name}, "
                 f"T = {tp['target']['n_gpus']}× {tp['target']['gpu']}", fontsize=10)
    ax.legend(fontsize=7, ncol=2, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    _save(fig, path)


def _fig_throughput(doc, path):
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.3))
    for who in ("source", "target"):
        d = doc[who]
        if d is None:
            continue
        proj = d["projection"]
        pts = [p for p in proj["points"] if p["fits_in_memory"]]
        C = [p["concurrency"] for p in pts]
        lab = f"{proj['target']['n_gpus']}× {proj['target']['gpu']} ({who})"
        for ax, key in zip(axes, ("tokens_per_s", "tokens_per_s_per_stream")):
            y = [p[key] for p in pts]
            lo = [p["interval"][key][0] for p in pts]
            hi = [p["interval"][key][1] for p in pts]
            ax.plot(C, y, "o-", color=MACHINE_COLORS[who], label=lab)
            ax.fill_between(C, lo, hi, color=MACHINE_COLORS[who], alpha=0.2, linewidth=0)
    for ax, t in zip(axes, ("aggregate tok/s", "tok/s per stream")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("concurrency C")
        ax.set_ylabel(t)
        ax.grid(True, which="both", alpha=0.3)
        ax.set_title(f"{t} (band: 90% interval)", fontsize=10)
    axes[0].legend(fontsize=8)
    _save(fig, path)


def _fig_roofline(doc, path):
    a = doc["anchors"]
    fig, ax = plt.subplots(figsize=(7.5, 5))
    ai = [10 ** (k / 20) for k in range(-40, 81)]
    bw, tf = a["peak_bw_GBps"], a["peak_bf16_TFLOPS"]
    ax.plot(ai, [min(tf, x * bw / 1e3) for x in ai], "k-", lw=1.5, label=f"datasheet roof ({fmt(bw)} GB/s, {fmt(tf)} TF)")
    ce = a["ceilings"]
    mbw = ce["read_GBps"] or ce["copy_GBps"]
    if mbw or ce["bf16_TFLOPS"]:
        mbw, mtf = mbw or bw, ce["bf16_TFLOPS"] or tf
        ax.plot(ai, [min(mtf, x * mbw / 1e3) for x in ai], "k--", lw=1.2,
                label=f"measured ceilings ({fmt(mbw)} GB/s, {fmt(mtf)} TF)")
    for cls, f in a["fits"].items():
        col = COMPONENT_COLORS[CLASS_COMPONENT.get(cls, "host")]
        ax.plot(ai, [min(f["tflops"], x * f["bw_GBps"] / 1e3) for x in ai], ":", color=col, lw=1,
                label=f"fit {cls}")
    seen = set()
    for bench, x, y in a["roofline_points"]:
        comp = BENCH_COMPONENT.get(bench)
        col = COMPONENT_COLORS[comp] if comp else "0.2"
        ax.scatter([x], [y], s=14, color=col, alpha=0.8, edgecolor="none",
                   label=None if bench in seen else f"measured: {bench}")
        seen.add(bench)
    if not a["roofline_points"]:
        ax.text(0.03, 0.95, "no measurement: spec-derived profile\n(dotted: assumed class laws)",
                transform=ax.transAxes, va="top", fontsize=9, color="0.3")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP / byte)")
    ax.set_ylabel("achieved TFLOP/s")
    ax.set_title(f"Roofline on the profile GPU ({a['gpu']})", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    _save(fig, path)


def _fig_budget(doc, path) -> bool:
    tp = doc["target"]["projection"]
    pts = [p for p in tp["points"] if p.get("budget_curve")]
    if not pts:
        return False
    fig, ax = plt.subplots(figsize=(7.5, 4.6))
    cmap = plt.get_cmap("viridis")
    for i, p in enumerate(pts):
        col = cmap(i / max(1, len(pts) - 1))
        curve = [c for c in p["budget_curve"] if c["fits_in_memory"] and c["budget"] > 0]
        none = [c for c in p["budget_curve"] if c["fits_in_memory"] and c["budget"] == 0]
        if curve:
            ax.plot([c["budget"] for c in curve], [c["tokens_per_s_per_stream"] for c in curve], "o-", color=col,
                    ms=4, label=f"C={p['concurrency']}")
        if none:
            ax.axhline(none[0]["tokens_per_s_per_stream"], color=col, ls=":", lw=1)
        if p["budget"]:
            ax.plot([p["budget"]], [p["tokens_per_s_per_stream"]], "*", color="red", ms=13, mec="k", mew=0.5)
    ax.plot([], [], "*", color="red", mec="k", ms=11, label="best budget")
    ax.plot([], [], ":", color="0.3", label="no speculation")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("tree budget B (draft nodes per step)")
    ax.set_ylabel("tok/s per stream")
    ax.set_title(f"{tp['spec']} on {tp['target']['n_gpus']}× {tp['target']['gpu']}: tok/s vs tree budget", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    _save(fig, path)
    return True


def _fig_tornado(doc, path):
    sens = doc["sensitivity"]
    fig, axes = plt.subplots(1, len(sens), figsize=(6.2 * len(sens), 4.2), squeeze=False)
    for ax, (C, rows) in zip(axes[0], sens.items()):
        rows = list(reversed(rows))
        y = range(len(rows))
        ax.barh(y, [100 * r["minus"] for r in rows], color="#4c72b0", label=f"input −{int(100 * DELTA)}%")
        ax.barh(y, [100 * r["plus"] for r in rows], color="#c44e52", label=f"input +{int(100 * DELTA)}%")
        ax.set_yticks(list(y), [r["input"] for r in rows], fontsize=8)
        ax.axvline(0, color="k", lw=0.8)
        ax.set_xlabel("change in tok/s per stream (%)")
        ax.set_title(f"Sensitivity on {doc['target']['projection']['target']['gpu']}, C={C}", fontsize=10)
        ax.grid(True, axis="x", alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
    _save(fig, path)


def _fig_moe(doc, path) -> bool:
    curves = doc["anchors"]["moe_curves"]
    if not curves:
        return False
    fig, ax = plt.subplots(figsize=(7.5, 4.4))
    peak = doc["anchors"]["peak_bw_GBps"]
    for i, (k, c) in enumerate(sorted(curves.items())):
        ax.plot([p[0] for p in c["points"]], [100 * p[1] / peak for p in c["points"]], "o-", ms=3,
                color=plt.get_cmap("tab10")(i % 10), label=k)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("tokens per step T")
    ax.set_ylabel(f"achieved bandwidth (% of {fmt(peak)} GB/s peak)")
    ax.set_title(f"MoE efficiency on {doc['anchors']['gpu']} (measured)", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    _save(fig, path)
    return True


# ------------------------------------------------------------------------------ markdown
def _machine(proj) -> str:
    t = proj["target"]
    return f"{t['n_gpus']}× {t['display_name']}" + (f" over {t['link']}" if t["link"] else "")


def _bottleneck_sentence(proj, who: str) -> str:
    p = next(q for q in proj["points"] if q["concurrency"] == 1)
    if not p["fits_in_memory"]:
        return f"On the {who} ({_machine(proj)}) the model does not fit at C=1."
    bd = p["breakdown_ms"]
    top = max(bd, key=bd.get)
    second = sorted(bd, key=bd.get)[-2] if len(bd) > 1 else None
    s = (f"On the {who} ({_machine(proj)}) at C=1 the {fmt(p['step_ms'])} ms step is bound by **{p['bottleneck']}**; "
         f"the largest term is {top} ({fmt(bd[top])} ms, {pct(bd[top] / p['step_ms'], False)})")
    if second:
        s += f", then {second} ({fmt(bd[second])} ms)"
    return s + "."


def _proj_table(proj) -> list[str]:
    lines = ["| C | budget | τ | step ms [90%] | tok/s per stream [90%] | tok/s total [90%] | bottleneck |",
             "|---:|---:|---:|---|---|---|---|"]
    for p in proj["points"]:
        if not p["fits_in_memory"]:
            lines.append(f"| {p['concurrency']} | — | — | does not fit | — | — | {p['note']} |")
            continue
        i = p["interval"]
        lines.append(f"| {p['concurrency']} | {p['budget']} | {fmt(p['tau'])} | {fmt(p['step_ms'])} {iv(*i['step_ms'])} | "
                     f"{fmt(p['tokens_per_s_per_stream'])} {iv(*i['tokens_per_s_per_stream'])} | "
                     f"{fmt(p['tokens_per_s'])} {iv(*i['tokens_per_s'])} | {p['bottleneck']} |")
    return lines


def _spec_row(label, s_src, s_tgt, s_prof, get) -> str:
    cells = []
    for s in (s_src, s_tgt, s_prof):
        try:
            v = get(s) if s else None
        except (KeyError, TypeError):
            v = None
        cells.append("—" if v is None else (fmt(v) if isinstance(v, (int, float)) else str(v)))
    return f"| {label} | " + " | ".join(cells) + " |"


def _markdown(doc: dict, figs: dict[str, str]) -> str:
    tp = doc["target"]["projection"]
    sp = doc["source"]["projection"] if doc["source"] else None
    a = doc["anchors"]
    S = doc["summary"]
    L: list[str] = []
    L.append(f"# {tp['model']} decode on {_machine(tp)}: findings")
    L.append("")
    L.append(f"Projection from the **{tp['profile']['kind']}** profile `{tp['profile']['path']}` "
             f"({tp['profile']['label']}); every number below is in `{figs['json']}` "
             f"(`target.projection` is exactly the output of `{doc['target']['command']}`).")
    L.append("")
    L.append(f"Settings: parallel {tp['parallel']}, context {fmt(tp['context'])} tokens, speculative decoding "
             f"{tp['spec']}" + (f" (tree build on {tp['tree_build'].upper()})" if tp['tree_build'] else "")
             + f", CUDA graphs {'on' if tp['graphs'] else 'off'}.")
    L.append("")
    # 1 -----------------------------------------------------------------------------------
    L.append("## 1. Summary")
    L.append("")
    for label, C in (("at C=1", S["c1"]), ("at the largest C that fits", S["cmax"])):
        if C is None:
            continue
        p = next(q for q in tp["points"] if q["concurrency"] == C)
        if not p["fits_in_memory"]:
            L.append(f"- {(label[0].upper() + label[1:])}: does not fit.")
            continue
        line = (f"- **{(label[0].upper() + label[1:]) if C == 1 else (label[0].upper() + label[1:]) + f' (C={C})'}**: {fmt(p['tokens_per_s_per_stream'])} tok/s per stream "
                f"{iv(*p['interval']['tokens_per_s_per_stream'])}, {fmt(p['tokens_per_s'])} tok/s total "
                f"{iv(*p['interval']['tokens_per_s'])} (90% interval) on the target")
        if sp:
            q = next(x for x in sp["points"] if x["concurrency"] == C)
            if q["fits_in_memory"]:
                line += (f"; source: {fmt(q['tokens_per_s_per_stream'])} per stream, {fmt(q['tokens_per_s'])} total "
                         f"({fmt(p['tokens_per_s'] / q['tokens_per_s'])}× on the target)")
            else:
                line += "; the source does not fit this concurrency"
        L.append(line + ".")
    L.append(f"- Largest concurrency that fits in memory (no speculation): target {fmt(tp['max_concurrency_that_fits'])}"
             + (f", source {fmt(sp['max_concurrency_that_fits'])}" if sp else "") + ".")
    L.append("")
    if sp:
        L.append("- " + _bottleneck_sentence(sp, "source"))
    else:
        L.append(f"- Source {doc['source_name']}: {doc['source_error']}")
    L.append("- " + _bottleneck_sentence(tp, "target"))
    L.append("")
    # 2 -----------------------------------------------------------------------------------
    L.append(f"## 2. Measured anchors on the profile GPU ({a['gpu']})")
    L.append("")
    prov = a["provenance"]
    if sp and sp["target"]["gpu"] != a["gpu"]:
        L.append(f"The anchors were measured on **{prov['gpu_name']}** (the profile's GPU), not on the source "
                 f"machine ({sp['target']['gpu']}): the source column below is itself a projection.")
    else:
        L.append(f"The anchors come from **{prov['gpu_name']}** (the profile's GPU).")
    L.append("")
    if not a["measured"]:
        L.append("> **no measurement: spec-derived.** This profile was derived from the datasheet with assumed "
                 "per-class efficiencies (`perfmodel/model/derived.py`); run `perfmodel measure` on the GPU to "
                 "replace these anchors.")
        L.append("")
    L.append("Provenance: " + "; ".join(f"{k} `{v}`" for k, v in prov.items()) + ".")
    L.append("")
    ce = a["ceilings"]
    L.append(f"**Achieved bandwidth vs peak ({fmt(a['peak_bw_GBps'])} GB/s datasheet):** "
             + (f"copy {fmt(ce['copy_GBps'])} GB/s ({pct(ce['copy_frac_peak'], False)}), "
                f"read {fmt(ce['read_GBps'])} GB/s ({pct(ce['read_frac_peak'], False)}), "
                f"bf16 GEMM {fmt(ce['bf16_TFLOPS'])} TFLOP/s ({pct(ce['bf16_frac_peak'], False)} of "
                f"{fmt(a['peak_bf16_TFLOPS'])}) — {ce['source'] or 'ceilings bench'}."
                if (ce["copy_GBps"] or ce["read_GBps"]) else "no ceilings measured (spec-derived)."))
    L.append("")
    L.append("Per kernel class, fit `t = t0 + max(bytes/bw, flops/F)`:")
    L.append("")
    L.append("| class | latency floor t0 (µs) | bw (GB/s) | % of peak bw | F (TFLOP/s) | points | rmse | source |")
    L.append("|---|---:|---:|---:|---:|---:|---:|---|")
    for cls, f in a["fits"].items():
        L.append(f"| {cls} | {fmt(f['t0_us'])} | {fmt(f['bw_GBps'])} | {pct(f['bw_frac_peak'], False)} | "
                 f"{fmt(f['tflops'])} | {f['n_points']} | {pct(f['rmse_rel'], False)} | {f['source'] or f['bench']} |")
    L.append("")
    L.append("**MoE efficiency curve:** " + ("" if a["moe_curves"] else
             "no measurement: spec-derived (the MoE classes use the assumed efficiencies above)."))
    if a["moe_curves"]:
        L.append("")
        L.append("| series | points | plateau (GB/s) | plateau % of peak | T reaching 90% of plateau |")
        L.append("|---|---:|---:|---:|---:|")
        for k, c in sorted(a["moe_curves"].items()):
            L.append(f"| {k} | {len(c['points'])} | {fmt(c['plateau_GBps'])} | {pct(c['plateau_frac_peak'], False)} | "
                     f"{fmt(c['T_at_90pct_plateau'])} |")
        if "moe" in figs:
            L.append("")
            L.append(f"![MoE efficiency]({figs['moe']})")
    L.append("")
    o = a["overheads"]
    if o:
        tri = (f" (a Triton kernel through its Python launcher: {fmt(o['launch_eager_triton_us'])} µs)"
               if o.get("launch_eager_triton_us") else "")
        L.append(f"**Dispatch overhead:** eager launch {fmt(o['launch_eager_us'])} µs{tri}, CUDA-graph node "
                 f"{fmt(o['graph_node_us'])} µs, graph launch {fmt(o['graph_launch_us'])} µs, host work per step "
                 f"{fmt(o['host_step_us'])} µs ({o['source'] or 'dispatch bench'}).")
        if a["dispatch_samples"]:
            L.append("Raw: " + ", ".join(f"{s['what']} {fmt(s['median_ms'] * 1e3)} µs" for s in a["dispatch_samples"]) + ".")
        L.append("")
    L.append("**Collectives:** " + (" ".join(
        f"{c['op']} on {c['n_gpus']} GPUs over {c['link'] or 'local link'} ({'graph' if c['graph'] else 'eager'}): "
        f"latency {fmt(c['latency_us'])} µs, {fmt(c['bw_GBps'])} GB/s per GPU, rmse {pct(c['rmse_rel'], False)} "
        f"({c['source'] or 'collectives bench'})." for c in a["collectives"])
        if a["collectives"] else "not measured in this profile; the projection uses each interconnect's calibrated "
        "spec (section 3 and section 6)."))
    L.append("")
    L.append("**Tree building:** " + (" ".join(
        f"{k.upper()}: t0 {fmt(f['t0_us'])} µs + {fmt(f['per_node_us'])} µs per node (C·B), rmse "
        f"{pct(f['rmse_rel'], False)}, {f['n_points']} points ({f['source']})." for k, f in a["treebuild"].items())
        if a["treebuild"] else "no fit in the profile."))
    L.append("")
    # 3 -----------------------------------------------------------------------------------
    L.append("## 3. Source vs target specs")
    L.append("")
    ss, st, spf = (doc["source"]["specs"] if doc["source"] else None), doc["target"]["specs"], doc["profile_gpu"]
    L.append(f"| | source: {ss['name'] if ss else '—'} | target: {st['name']} | profile GPU: {spf['name']} |")
    L.append("|---|---|---|---|")
    L.append(_spec_row("memory kind", ss, st, spf, lambda s: s["memory_kind"]))
    L.append(_spec_row("capacity (GB)", ss, st, spf, lambda s: s["capacity_GB"]["value"]))
    L.append(_spec_row("bandwidth (GB/s)", ss, st, spf, lambda s: s["bandwidth_GBps"]["value"]))
    L.append(_spec_row("bf16 dense (TFLOP/s)", ss, st, spf, lambda s: s["bf16_TFLOPS"]["value"]))
    L.append(_spec_row("fp8 dense (TFLOP/s)", ss, st, spf, lambda s: s["fp8_TFLOPS"]["value"]))
    L.append(_spec_row("fp4 dense (TFLOP/s)", ss, st, spf, lambda s: s["fp4_TFLOPS"]["value"]))
    L.append(_spec_row("scale-up link", ss, st, spf, lambda s: s["scale_up"]["kind"]))
    L.append(_spec_row("scale-up GB/s per direction", ss, st, spf, lambda s: s["scale_up"]["bw_per_dir_GBps"]["value"]))
    L.append(_spec_row("host link", ss, st, spf, lambda s: s["host_link"]["kind"]))
    L.append(_spec_row("interconnect used", ss, st, spf, lambda s: s["interconnect"]["name"]))
    L.append(_spec_row("all-reduce latency (µs)", ss, st, spf, lambda s: s["interconnect"]["allreduce_latency_us"]["value"]))
    L.append(_spec_row("all-reduce busbw (GB/s)", ss, st, spf, lambda s: s["interconnect"]["allreduce_busbw_GBps"]["value"]))
    L.append("")
    # 4 -----------------------------------------------------------------------------------
    L.append("## 4. Projection per concurrency")
    L.append("")
    L.append(f"### Target: {_machine(tp)}")
    L.append("")
    L += _proj_table(tp)
    L.append("")
    if sp:
        L.append(f"### Source: {_machine(sp)}")
        L.append("")
        L += _proj_table(sp)
        L.append("")
    sc = tp["self_check"]
    if sc["n_points"]:
        L.append(f"**Self-check** (the model predicting the profile's own {sc['n_points']} end-to-end steps on "
                 f"{a['gpu']}): median |error| {pct(sc['median_abs_err'], False)}, max {pct(sc.get('max_abs_err'), False)}; "
                 "it widens every interval above.")
    else:
        L.append("**Self-check:** not available — the profile has no end-to-end steps; intervals come from the "
                 "per-term uncertainties only.")
    L.append("")
    # 5 -----------------------------------------------------------------------------------
    L.append("## 5. Figures")
    L.append("")
    L.append("Step-time breakdown per concurrency (S = source, T = target; one colour per component in every figure):")
    L.append("")
    L.append(f"![step-time breakdown]({figs['breakdown']})")
    L.append("")
    L.append(f"![tok/s vs concurrency]({figs['throughput']})")
    L.append("")
    L.append(f"Roofline on the profile GPU{' (measured samples)' if a['roofline_points'] else ' (no measured samples: spec-derived)'}:")
    L.append("")
    L.append(f"![roofline]({figs['roofline']})")
    L.append("")
    if "budget" in figs:
        bests = [f"C={p['concurrency']}: B={p['budget']}" for p in tp["points"] if p.get("budget_curve")]
        L.append("tok/s vs tree budget (best budget starred; " + ", ".join(bests) + "):")
        L.append("")
        L.append(f"![tok/s vs tree budget]({figs['budget']})")
        L.append("")
    L.append(f"Sensitivity (each input ±{int(100 * doc['sensitivity_delta'])}%, tok/s per stream):")
    L.append("")
    L.append(f"![sensitivity tornado]({figs['tornado']})")
    L.append("")
    # 6 -----------------------------------------------------------------------------------
    L.append("## 6. Assumptions and their sources")
    L.append("")
    L.append(f"- Profile: {tp['profile']['label']}" + ("" if a["measured"] else " — no measurement: spec-derived") + ".")
    for who, d in (("target", doc["target"]), ("source", doc["source"])):
        if d is None:
            continue
        for k, rule in d["projection"]["rules"].items():
            if rule:
                L.append(f"- Transfer rule, {who}, {k}: {rule}.")
    for k, v in doc["memory_kinds"].items():
        L.append(f"- {k} achievable fraction of peak {fmt(v['achievable_fraction'])} (±{pct(v['uncertainty_rel'], False)}): "
                 f"{v['source']}.")
    if tp["acceptance"]:
        L.append(f"- Acceptance ({tp['acceptance']['source']}): {tp['acceptance']['description']}.")
    L.append(f"- Context {fmt(tp['context'])} tokens for every sequence; model preset `{tp['model']}`.")
    L.append("")
    L.append("**What would change the conclusion:**")
    L.append("")
    for C, rows in doc["sensitivity"].items():
        if rows:
            r0 = rows[0]
            L.append(f"- At C={C} the projection moves most with **{r0['input']}**: ±{int(100 * doc['sensitivity_delta'])}% "
                     f"moves tok/s by {pct(r0['minus'])} / {pct(r0['plus'])}"
                     + (f"; next {rows[1]['input']} ({pct(rows[1]['minus'])} / {pct(rows[1]['plus'])})." if len(rows) > 1 else "."))
    if sp:
        for C in (S["c1"], S["cmax"]):
            p = next((q for q in tp["points"] if q["concurrency"] == C), None)
            q = next((x for x in sp["points"] if x["concurrency"] == C), None)
            if p and q and p["fits_in_memory"] and q["fits_in_memory"]:
                ov = p["interval"]["tokens_per_s"][0] <= q["interval"]["tokens_per_s"][1]
                L.append(f"- At C={C} the target's 90% interval {iv(*p['interval']['tokens_per_s'])} "
                         + ("overlaps" if ov else "lies clear of")
                         + f" the source's {iv(*q['interval']['tokens_per_s'])} tok/s total"
                         + (": the ranking of the two machines is not settled." if ov else "."))
    recs = [r for r in doc["recommendations"] if r.get("rank_gain") is not None]
    if len(recs) > 1 and recs[0]["rank_gain"] > 0:
        L.append(f"- The first recommendation leads the second by {fmt(100 * (recs[0]['rank_gain'] - recs[1]['rank_gain']))} "
                 "percentage points of tok/s; a term off by more than that could reorder them.")
    if not a["measured"]:
        L.append("- Any measurement: every class efficiency, latency floor and overhead above is assumed.")
    L.append("")
    # 7 -----------------------------------------------------------------------------------
    L.append("## 7. Recommendations (ranked by projected gain on the target)")
    L.append("")
    L.append("Each row re-runs the same projection with one change; ranked by the larger of the gains at "
             f"C={S['c1']} and C={S['cmax']}. Gains are in tok/s per stream (at a fixed C the total moves by the same %).")
    L.append("")
    n = 0
    for r in doc["recommendations"]:
        if "skipped" in r:
            continue
        n += 1
        head = f"{n}. **{r['change']}** — " + ", ".join(
            f"C={x['concurrency']}: {pct(x['gain'])}" if x["fits"] else f"C={x['concurrency']}: does not fit"
            for x in r["per_concurrency"])
        if r["rank_gain"] is not None and r["rank_gain"] <= 0:
            head += " (no gain: keep the current setting)"
        L.append(head)
        for x in r["per_concurrency"]:
            if not x["fits"]:
                continue
            b, nw = x["base"], x["new"]
            if nw["step_ms"] == b["step_ms"] and nw["tau"] == b["tau"]:
                L.append(f"   - C={x['concurrency']}: no change (step {fmt(b['step_ms'])} ms, budget {b['budget']}).")
                continue
            verb = "removes" if x["component_new_ms"] < x["component_base_ms"] else "adds"
            dms = abs(x["component_new_ms"] - x["component_base_ms"])
            L.append(f"   - C={x['concurrency']}: {verb} {fmt(dms)} ms of {x['component']} "
                     f"({fmt(x['component_base_ms'])} → {fmt(x['component_new_ms'])} ms) of a {fmt(b['step_ms'])} ms step; "
                     f"step {fmt(b['step_ms'])} → {fmt(nw['step_ms'])} ms, τ {fmt(b['tau'])} → {fmt(nw['tau'])}, "
                     f"budget {b['budget']} → {nw['budget']}: {fmt(b['tokens_per_s_per_stream'])} → "
                     f"{fmt(nw['tokens_per_s_per_stream'])} tok/s per stream = {pct(x['gain'])}.")
    skipped = [r for r in doc["recommendations"] if "skipped" in r]
    if skipped:
        L.append("")
        L.append("Not evaluated: " + "; ".join(f"{r['change']} ({r['skipped']})" for r in skipped) + ".")
    L.append("")
    return "\n".join(L)


# ------------------------------------------------------------------------------ entry point
def write_report(req: Request, out: Path, source: str = "rtx-pro-6000") -> Path:
    """Write `<NAME>_NOTES.md`, `<NAME>_NOTES.json` and `<NAME>_*.png` into `out`; return the markdown path."""
    out = Path(out)
    _check_writable(out)
    doc, _ = build_doc_data(req, source)
    name = report_name(doc["target"]["projection"]["target"])
    stem = name[: -len("_NOTES")]
    figs = {"json": f"{name}.json", "breakdown": f"{stem}_breakdown.png", "throughput": f"{stem}_throughput.png",
            "roofline": f"{stem}_roofline.png", "tornado": f"{stem}_sensitivity.png"}
    try:
        _fig_breakdown(doc, out / figs["breakdown"])
        _fig_throughput(doc, out / figs["throughput"])
        _fig_roofline(doc, out / figs["roofline"])
        _fig_tornado(doc, out / figs["tornado"])
        if _fig_budget(doc, out / f"{stem}_budget.png"):
            figs["budget"] = f"{stem}_budget.png"
        if _fig_moe(doc, out / f"{stem}_moe_efficiency.png"):
            figs["moe"] = f"{stem}_moe_efficiency.png"
        doc["figures"] = {k: v for k, v in figs.items() if k != "json"}
        (out / figs["json"]).write_text(json.dumps(doc, indent=1, default=_json_default) + "\n")
        md = out / f"{name}.md"
        md.write_text(_markdown(doc, figs))
    except OSError as e:
        raise ReportError(f"cannot write the report to {out}: {e.strerror or e}") from None
    return md


def _json_default(o):
    if isinstance(o, float) and (math.isnan(o) or math.isinf(o)):
        return None
    if isinstance(o, (set, tuple)):
        return list(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


__all__ = ["ReportError", "write_report", "build_doc_data", "report_name", "fmt", "COMPONENT_COLORS"]
