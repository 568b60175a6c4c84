"""The findings document's figures, drawn only from its data dict (`findings.build_doc_data`).

Every figure: legend outside the axes, one fixed colour per step component / kernel class,
plain-number ticks on log axes, human labels, and byte-identical PNGs for identical input
(no software/date metadata, fixed hash salt)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter  # noqa: E402

from perfmodel.kernel_classes import CLASSES  # noqa: E402
from perfmodel.reports.sections import fmt, series_label  # noqa: E402

matplotlib.rcParams["svg.hashsalt"] = "perfmodel"

# One fixed colour per step component, used by every figure.
COMPONENT_COLORS = {
    "moe": "#1f77b4", "attention": "#ff7f0e", "dense": "#2ca02c", "elementwise": "#98df8a",
    "lm_head": "#8c564b", "latency_floor": "#d62728", "collectives": "#9467bd", "dispatch": "#e377c2",
    "host": "#7f7f7f", "engine_host": "#525252", "draft": "#bcbd22", "tree_build": "#17becf",
}
COMPONENT_LABELS = {
    "moe": "routed + shared experts (MoE)", "attention": "attention", "dense": "dense GEMMs",
    "elementwise": "norms / activations", "lm_head": "LM head", "latency_floor": "per-kernel latency floors",
    "collectives": "collectives", "dispatch": "graph nodes / launch", "host": "host loop (argmax + sync)",
    "engine_host": "engine host work", "draft": "drafter forward", "tree_build": "tree building",
}
MACHINE_COLORS = {"source": "#4c72b0", "target": "#dd8452"}
# Kernel classes and benches drawn in the colour of the component they price.
CLASS_COMPONENT = {c.name: c.component for c in CLASSES}
CLASS_LABELS = {c.name: c.label for c in CLASSES}
BENCH_COMPONENT = {"moe": "moe", "attention": "attention", "gemm": "dense", "elementwise": "elementwise",
                   "treebuild": "tree_build", "dispatch": "dispatch", "collectives": "collectives"}
BENCH_LABELS = {"moe": "MoE kernels", "attention": "attention kernels", "gemm": "GEMMs", "elementwise": "elementwise ops",
                "ceilings": "copy / read / GEMM ceilings", "e2e": "end-to-end steps"}


def _plain(x, _pos=None) -> str:
    if 0 < x < 1:
        return f"{x:g}"  # 0.01, not 0.010
    return fmt(int(round(x))) if x >= 1 and abs(x - round(x)) < 1e-9 else fmt(float(x))


def _plain_log(ax, axis: str = "both") -> None:
    """Plain numbers on log axes (no 6×10²): majors labelled, minors unlabelled, except that a
    base-10 axis spanning under three decades also labels 2× and 5× so its values can be read."""
    for name, a in (("x", ax.xaxis), ("y", ax.yaxis)):
        if axis not in ("both", name):
            continue
        a.set_major_formatter(FuncFormatter(_plain))
        a.set_minor_formatter(NullFormatter())
        lo, hi = (ax.get_xlim() if name == "x" else ax.get_ylim())
        if a.get_scale() == "log" and getattr(a.get_transform(), "base", 10) == 10 and lo > 0 and hi / lo < 1e3:
            a.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))


def _legend(ax, **kw):
    return ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, **kw)


def _save(fig, path) -> None:
    """Every figure is written the same way: legend room kept, 110 dpi PNG without metadata."""
    fig.savefig(path, dpi=110, bbox_inches="tight", metadata={"Software": None})
    plt.close(fig)


def breakdown(doc, path):
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
                ax.bar(x, v, w, bottom=bottom, color=COMPONENT_COLORS[comp], edgecolor=MACHINE_COLORS[who], linewidth=0.8,
                       label=None if comp in used else COMPONENT_LABELS.get(comp, comp))
                used.add(comp)
                bottom += v
            ax.text(x, bottom, "S" if who == "source" else "T", ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(len(Cs)), [f"C={C}" for C in Cs])
    ax.set_xlabel("concurrency (S = source bar, T = target bar)")
    ax.set_ylabel("step time (ms)")
    src_name = f"{sp['target']['n_gpus']}× {sp['target']['display_name']}" if sp else "—"
    ax.set_title(f"Step-time breakdown: S = {src_name},\n"
                 f"T = {tp['target']['n_gpus']}× {tp['target']['display_name']}", fontsize=9)
    _legend(ax)
    _save(fig, path)


def throughput(doc, path):
    fig, axes = plt.subplots(1, 2, figsize=(11.5, 4.3))
    for who in ("source", "target"):
        d = doc[who]
        if d is None:
            continue
        proj = d["projection"]
        pts = [p for p in proj["points"] if p["fits_in_memory"]]
        C = [p["concurrency"] for p in pts]
        lab = f"{proj['target']['n_gpus']}× {proj['target']['display_name']} ({who})"
        for ax, key in zip(axes, ("tokens_per_s", "tokens_per_s_per_stream")):
            ax.plot(C, [p[key] for p in pts], "o-", color=MACHINE_COLORS[who], label=lab)
            ax.fill_between(C, [p["interval"][key][0] for p in pts], [p["interval"][key][1] for p in pts],
                            color=MACHINE_COLORS[who], alpha=0.2, linewidth=0, label=f"90% interval ({who})")
    for ax, t in zip(axes, ("aggregate tok/s", "tok/s per stream")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        _plain_log(ax)
        ax.set_xlabel("concurrency C (sequences)")
        ax.set_ylabel(t)
        ax.grid(True, which="both", alpha=0.3)
        ax.set_title(t, fontsize=10)
    axes[1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    _save(fig, path)


def roofline(doc, path):
    a = doc["anchors"]
    fig, ax = plt.subplots(figsize=(8.5, 5))
    ai = [10 ** (k / 20) for k in range(-40, 81)]
    bw, tf = a["peak_bw_GBps"], a["peak_bf16_TFLOPS"]
    ax.plot(ai, [min(tf, x * bw / 1e3) for x in ai], "k-", lw=1.5, label=f"datasheet roof ({fmt(bw)} GB/s, {fmt(tf)} TFLOP/s)")
    ce = a["ceilings"]
    mbw = ce["read_GBps"] or ce["copy_GBps"]
    if mbw or ce["bf16_TFLOPS"]:
        mbw, mtf = mbw or bw, ce["bf16_TFLOPS"] or tf
        ax.plot(ai, [min(mtf, x * mbw / 1e3) for x in ai], "k--", lw=1.2,
                label=f"measured ceilings ({fmt(mbw)} GB/s, {fmt(mtf)} TFLOP/s)")
    # One fitted roof per kernel class (variants of a class share its line), in its colour.
    for cls in sorted(c for c in a["fits"] if "." not in c):
        f = a["fits"][cls]
        col = COMPONENT_COLORS[CLASS_COMPONENT.get(cls, "host")]
        ls = "-." if cls in ("moe_bf16", "attention_gqa") else ":"
        ax.plot(ai, [min(f["tflops"], x * f["bw_GBps"] / 1e3) for x in ai], ls, color=col, lw=1.2,
                label=f"fit: {CLASS_LABELS.get(cls, cls)}")
    seen = set()
    for bench, x, y in sorted(a["roofline_points"], key=lambda r: (r[0], r[1], r[2])):
        comp = BENCH_COMPONENT.get(bench)
        ax.scatter([x], [y], s=14, color=COMPONENT_COLORS[comp] if comp else "0.2", alpha=0.8, edgecolor="none",
                   label=None if bench in seen else f"measured: {BENCH_LABELS.get(bench, bench)}")
        seen.add(bench)
    if not a["roofline_points"]:
        ax.text(0.03, 0.95, "no measurement: spec-derived profile\n(dotted: assumed class laws)",
                transform=ax.transAxes, va="top", fontsize=9, color="0.3")
    ax.set_xscale("log")
    ax.set_yscale("log")
    _plain_log(ax)
    ax.set_xlabel("arithmetic intensity (FLOP / byte)")
    ax.set_ylabel("achieved TFLOP/s")
    ax.set_title(f"Roofline on the profile GPU ({a['gpu']})", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    _legend(ax)
    _save(fig, path)


def budget(doc, path) -> bool:
    tp = doc["target"]["projection"]
    pts = [p for p in tp["points"] if p.get("budget_curve")]
    if not pts:
        return False
    fig, ax = plt.subplots(figsize=(8.5, 4.6))
    cmap = plt.get_cmap("viridis")
    for i, p in enumerate(pts):
        col = cmap(i / max(1, len(pts) - 1))
        curve = [c for c in p["budget_curve"] if c["fits_in_memory"] and c["budget"] > 0]
        none = [c for c in p["budget_curve"] if c["fits_in_memory"] and c["budget"] == 0]
        if curve:
            ax.plot([c["budget"] for c in curve], [c["tokens_per_s_per_stream"] for c in curve], "o-", color=col,
                    ms=4, label=f"C={p['concurrency']}")
        if none:
            ax.axhline(none[0]["tokens_per_s_per_stream"], color=col, ls=":", lw=1,
                       label=f"C={p['concurrency']}, no speculation"
                       + (" (drafter does not fit)" if p.get("speculation_fits") is False else ""))
        if p["budget"]:
            ax.plot([p["budget"]], [p["tokens_per_s_per_stream"]], "*", color="red", ms=13, mec="k", mew=0.5)
    ax.plot([], [], "*", color="red", mec="k", ms=11, label="best budget")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    _plain_log(ax)
    ax.set_xlabel("tree budget B (draft nodes per step)")
    ax.set_ylabel("tok/s per stream")
    ax.set_title(f"{tp['spec']} on {tp['target']['n_gpus']}× {tp['target']['display_name']}: tok/s vs tree budget",
                 fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    _legend(ax)
    _save(fig, path)
    return True


def tornado(doc, path):
    sens = doc["sensitivity"]
    fig, axes = plt.subplots(1, len(sens), figsize=(7.4 * len(sens), 4.2), squeeze=False)
    for ax, (C, rows) in zip(axes[0], sens.items()):
        rows = list(reversed(rows))
        y = range(len(rows))
        ax.barh(y, [100 * r["minus"] for r in rows], color="#4c72b0", label=f"input −{int(100 * doc['sensitivity_delta'])}%")
        ax.barh(y, [100 * r["plus"] for r in rows], color="#c44e52", label=f"input +{int(100 * doc['sensitivity_delta'])}%")
        ax.set_yticks(list(y), [r["input"] for r in rows], fontsize=8)
        ax.axvline(0, color="k", lw=0.8)
        ax.set_xlabel("change in tok/s per stream (%)")
        ax.set_ylabel("input changed")
        ax.set_title(f"Sensitivity on {doc['target']['projection']['target']['gpu']}, C={C}", fontsize=10)
        ax.grid(True, axis="x", alpha=0.3)
    # one legend for the row, right of the last panel, so no legend sits over a neighbour's labels
    h, lab = axes[0][0].get_legend_handles_labels()
    axes[0][-1].legend(h, lab, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    fig.tight_layout(w_pad=2.0)
    _save(fig, path)


def moe(doc, path) -> bool:
    curves = doc["anchors"]["moe_curves"]
    if not curves:
        return False
    fig, ax = plt.subplots(figsize=(8.5, 4.4))
    peak = doc["anchors"]["peak_bw_GBps"]
    shapes = sorted({k.split(":")[1] if k.count(":") == 2 else k for k in curves})
    markers = "os^dvP"
    for k, c in sorted(curves.items()):
        prov = k.split(":")[2] if k.count(":") == 2 else ""
        shape = k.split(":")[1] if k.count(":") == 2 else k
        col = {"triton_w4a16": COMPONENT_COLORS["moe"], "triton_bf16": COMPONENT_COLORS["attention"]}.get(prov, "0.4")
        ax.plot([p[0] for p in c["points"]], [100 * p[1] / peak for p in c["points"]], "-",
                marker=markers[shapes.index(shape) % len(markers)], ms=4, color=col, label=series_label(k))
    ax.set_xscale("log", base=2)
    _plain_log(ax, "x")
    ax.set_xlabel("tokens per step T")
    ax.set_ylabel(f"achieved bandwidth (% of {fmt(peak)} GB/s peak)")
    ax.set_title(f"MoE efficiency on {doc['anchors']['gpu']} (measured)", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    _legend(ax)
    _save(fig, path)
    return True


def write_all(doc: dict, out, stem: str) -> dict[str, str]:
    """Draw every figure the data supports into `out`; return {key: file name}."""
    figs = {"breakdown": f"{stem}_breakdown.png", "throughput": f"{stem}_throughput.png",
            "roofline": f"{stem}_roofline.png", "tornado": f"{stem}_sensitivity.png"}
    breakdown(doc, out / figs["breakdown"])
    throughput(doc, out / figs["throughput"])
    roofline(doc, out / figs["roofline"])
    tornado(doc, out / figs["tornado"])
    if budget(doc, out / f"{stem}_budget.png"):
        figs["budget"] = f"{stem}_budget.png"
    if moe(doc, out / f"{stem}_moe_efficiency.png"):
        figs["moe"] = f"{stem}_moe_efficiency.png"
    return figs
