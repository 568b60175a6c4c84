"""The notes' figures, drawn only from their data dict (`findings.build_doc_data`): the step
breakdown of both machines at the same concurrencies, tok/s per user and per GPU against
concurrency, and tok/s against the tree budget (speculative runs).

Every figure: legend outside the axes, one fixed colour per step component, plain-number ticks
on log axes, human labels, and byte-identical PNGs for identical input (no software/date
metadata, fixed hash salt). A point where speculation was asked for but the drafter no longer
fits is drawn apart from the speculative curve, never joined to it by a line."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter  # noqa: E402

from perfmodel.reports.sections import fmt  # noqa: E402

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
            nospec = p.get("speculation_fits") is False
            ax.text(x, bottom, ("S" if who == "source" else "T") + ("†" if nospec else ""), ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(len(Cs)), [f"C={C}" for C in Cs])
    apart = any(q.get("speculation_fits") is False for proj in (sp, tp) if proj for q in proj["points"] if q["fits_in_memory"])
    ax.set_xlabel("concurrency (S = source bar, T = target bar" + ("; † no speculation: the drafter does not fit" if apart else "")
                  + ")")
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
        n = proj["target"]["n_gpus"]
        pts = [p for p in proj["points"] if p["fits_in_memory"]]
        spec = [p for p in pts if p.get("speculation_fits") is not False]
        apart = [p for p in pts if p.get("speculation_fits") is False]
        lab = f"{n}× {proj['target']['display_name']} ({who})"
        for ax, key, scale in zip(axes, ("tokens_per_s_per_stream", "tokens_per_s"), (1, n)):
            C = [p["concurrency"] for p in spec]
            ax.plot(C, [p[key] / scale for p in spec], "o-", color=MACHINE_COLORS[who], label=lab)
            ax.fill_between(C, [p["interval"][key][0] / scale for p in spec], [p["interval"][key][1] / scale for p in spec],
                            color=MACHINE_COLORS[who], alpha=0.2, linewidth=0, label=f"90% interval ({who})")
            if apart:
                ax.errorbar([p["concurrency"] for p in apart], [p[key] / scale for p in apart],
                            yerr=[[p[key] / scale - p["interval"][key][0] / scale for p in apart],
                                  [p["interval"][key][1] / scale - p[key] / scale for p in apart]],
                            fmt="x", color=MACHINE_COLORS[who], ms=8, capsize=3, linestyle="none",
                            label=f"no speculation: drafter does not fit ({who})")
    for ax, t in zip(axes, ("tok/s per user", "tok/s per GPU")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        _plain_log(ax)
        ax.set_xlabel("concurrency C (sequences)")
        ax.set_ylabel(t)
        ax.grid(True, which="both", alpha=0.3)
        ax.set_title(t, fontsize=10)
    axes[1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
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


def write_all(doc: dict, out, stem: str) -> dict[str, str]:
    """Draw every figure the data supports into `out`; return {key: file name}."""
    figs = {"breakdown": f"{stem}_breakdown.png", "throughput": f"{stem}_throughput.png"}
    breakdown(doc, out / figs["breakdown"])
    throughput(doc, out / figs["throughput"])
    if budget(doc, out / f"{stem}_budget.png"):
        figs["budget"] = f"{stem}_budget.png"
    return figs
