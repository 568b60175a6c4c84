"""The findings document's markdown: one function per section, each reading only the doc dict."""

from __future__ import annotations


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


PROVIDER_LABELS = {"triton_w4a16": "perfmodel Triton W4A16", "triton_bf16": "perfmodel Triton bf16",
                   "torch._grouped_mm": "torch._grouped_mm"}
SHAPE_LABELS = {"kimi_I2048": "Kimi K2.6 expert (I=2048)", "kimi_tp8_I256": "Kimi K2.6 expert, TP8 slice (I=256)",
                "qwen3_30b_a3b": "Qwen3-30B-A3B expert"}


def series_label(key: str) -> str:
    """'moe:kimi_tp8_I256:triton_w4a16' -> 'Kimi K2.6 expert, TP8 slice (I=256), perfmodel Triton W4A16'."""
    parts = key.split(":")
    if len(parts) == 3:
        return f"{SHAPE_LABELS.get(parts[1], parts[1] + ' shape')}, {PROVIDER_LABELS.get(parts[2], parts[2])}"
    return key


def pct(x, signed: bool = True) -> str:
    return "n/a" if x is None else fmt(100.0 * x, signed=signed) + "%"


def iv(lo, hi) -> str:
    return f"[{fmt(lo)}–{fmt(hi)}]"


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


def tau_cell(p, spec: str = "", calibrated: bool = False) -> str:
    """τ with its 1σ and where it comes from ("τ modelled" unless a measured table/calibration).
    At budget 0 it says why: the drafter does not fit, no speculation is fastest, or none asked."""
    if not p.get("budget"):
        if p.get("speculation_fits") is False:
            return "1 (drafter does not fit)"
        return "1 (no speculation is fastest)" if spec not in ("", "none") else "1 (no speculation)"
    how = ("τ calibrated" if calibrated else "τ measured") if p.get("tau_measured") else "τ modelled"
    return f"{fmt(p['tau'])} ±{fmt(p.get('tau_sigma') or 0.0)} ({how})"


def _tput_dips(proj) -> list[str]:
    """Where aggregate tok/s falls as C grows between reported points, say why."""
    pts = [p for p in proj["points"] if p["fits_in_memory"]]
    out = []
    for a, b in zip(pts, pts[1:]):
        if b["tokens_per_s"] >= a["tokens_per_s"]:
            continue
        why = (f"the drafter no longer fits at C={b['concurrency']}, so the step runs without speculation"
               if b.get("speculation_fits") is False and a.get("budget") else
               f"the best tree budget falls from {a['budget']} to {b['budget']}" if a.get("budget") != b.get("budget")
               else "the step grows faster than C")
        out.append(f"aggregate tok/s falls from {fmt(a['tokens_per_s'])} at C={a['concurrency']} to "
                   f"{fmt(b['tokens_per_s'])} at C={b['concurrency']}: {why} (τ {fmt(a['tau'])} → {fmt(b['tau'])})")
    return out


def _proj_table(proj, calibrated: bool = False) -> list[str]:
    lines = ["| C | budget | τ ±1σ | step ms [90%] | tok/s per stream [90%] | tok/s total [90%] | bottleneck |",
             "|---:|---:|---|---|---|---|---|"]
    for p in proj["points"]:
        if not p["fits_in_memory"]:
            lines.append(f"| {p['concurrency']} | — | — | does not fit | — | — | {p['note']} |")
            continue
        i = p["interval"]
        lines.append(f"| {p['concurrency']} | {p['budget']} | {tau_cell(p, proj['spec'], calibrated)} | {fmt(p['step_ms'])} {iv(*i['step_ms'])} | "
                     f"{fmt(p['tokens_per_s_per_stream'])} {iv(*i['tokens_per_s_per_stream'])} | "
                     f"{fmt(p['tokens_per_s'])} {iv(*i['tokens_per_s'])} | {p['bottleneck']} |")
    notes = [f"C={p['concurrency']}: {p['budget_note']}" for p in proj["points"]
             if p["fits_in_memory"] and "budget_note" in p and not p["budget_note"].startswith("best budget")]
    if notes:
        lines += ["", "Budget: " + "; ".join(notes) + "."]
    dips = _tput_dips(proj)
    if dips:
        lines += ["", "Not monotone: " + "; ".join(dips) + "."]
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



def anchors_section(doc: dict, figs: dict[str, str]) -> list[str]:
    """Measured anchors on the profile GPU."""
    doc["target"]["projection"]
    sp = doc["source"]["projection"] if doc["source"] else None
    a = doc["anchors"]
    L: list[str] = []
    L.append(f"## 3. Measured anchors on the profile GPU ({a['gpu']})")
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
        l2 = " (L2-resident: above the DRAM peak)" if f["bw_frac_peak"] > 1 else ""
        L.append(f"| {cls} | {fmt(f['t0_us'])} | {fmt(f['bw_GBps'])}{l2} | {pct(f['bw_frac_peak'], False)} | "
                 f"{fmt(f['tflops'])} | {f['n_points']} | {pct(f['rmse_rel'], False)} | {f['source'] or f['bench']} |")
    L.append("")
    L.append("**MoE efficiency curve** (achieved bandwidth against tokens per step, per shape and kernel):"
             if a["moe_curves"] else "**MoE efficiency curve:** no measurement: spec-derived (the MoE classes use "
             "the assumed efficiencies above).")
    if a["moe_curves"]:
        L.append("")
        L.append("| MoE shape, kernel | points | plateau (GB/s) | plateau % of peak | tokens per step at 90% of plateau |")
        L.append("|---|---:|---:|---:|---:|")
        for k, c in sorted(a["moe_curves"].items()):
            L.append(f"| {series_label(k)} | {len(c['points'])} | {fmt(c['plateau_GBps'])} | {pct(c['plateau_frac_peak'], False)} | "
                     f"{fmt(round(c['T_at_90pct_plateau']))} |")
        if "moe" in figs:
            L.append("")
            L.append(f"![MoE efficiency]({figs['moe']})")
    L.append("")
    o = a["overheads"]
    if o:
        tri = (f" (a Triton kernel through its Python launcher: {fmt(o['launch_eager_triton_us'])} µs)"
               if o.get("launch_eager_triton_us") else "")
        L.append(f"**Dispatch overhead:** eager launch {fmt(o['launch_eager_us'])} µs{tri}, CUDA-graph node "
                 f"{fmt(o['graph_node_us'])} µs, graph launch {fmt(o['graph_launch_us'])} µs, host loop per step "
                 f"{fmt(o['host_step_us'])} µs ({o['source'] or 'dispatch bench'}). The host loop is perfmodel's own "
                 "argmax-and-sync decode loop, not a serving engine's scheduler: an engine's per-step host work is "
                 "the separate `engine_host` term (section 1).")
        calls = o.get("launch_eager_call_us") or {}
        if calls:
            f = o.get("eager_interleave_factor", 1.0)
            L.append("Eager calls as timed, each in a loop of its own: " + ", ".join(
                f"{c} {fmt(v)} µs" for c, v in calls.items()) + (
                f"; made in turn, one of each, {fmt(f)}x their sum, and the step model multiplies each eager call by "
                "that factor" if f != 1.0 else "") + " (they price `--no-graphs` only).")
        if a["dispatch_samples"]:
            L.append("Raw: " + ", ".join(f"{s['what']} {fmt(s['median_ms'] * 1e3)} µs" for s in a["dispatch_samples"]) + ".")
        L.append("")
    L.append("**Collectives:** " + (" ".join(
        f"{c['op']} on {c['n_gpus']} GPUs over {c['link'] or 'local link'} ({'graph' if c['graph'] else 'eager'}): "
        f"latency {fmt(c['latency_us'])} µs, {fmt(c['bw_GBps'])} GB/s per GPU, rmse {pct(c['rmse_rel'], False)} "
        f"({c['source'] or 'collectives bench'})." for c in a["collectives"])
        if a["collectives"] else "not measured in this profile; the projection uses each interconnect's calibrated "
        "spec (sections 4 and 7)."))
    L.append("")
    L.append("**Tree building:** " + (" ".join(
        f"{k.upper()}: t0 {fmt(f['t0_us'])} µs + {fmt(f['per_node_us'])} µs per node (C·B), rmse "
        f"{pct(f['rmse_rel'], False)}, {f['n_points']} points ({f['source']})." for k, f in a["treebuild"].items())
        if a["treebuild"] else "no fit in the profile."))
    L.append("")
    return L


def specs_section(doc: dict, figs: dict[str, str]) -> list[str]:
    """Source vs target specs."""
    doc["target"]["projection"]
    doc["source"]["projection"] if doc["source"] else None
    doc["anchors"]
    doc["summary"]
    L: list[str] = []
    L.append("## 4. Source vs target specs")
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
    return L


def projection_section(doc: dict, figs: dict[str, str]) -> list[str]:
    """Projection per concurrency, both machines."""
    tp = doc["target"]["projection"]
    sp = doc["source"]["projection"] if doc["source"] else None
    a = doc["anchors"]
    L: list[str] = []
    L.append("## 5. Projection per concurrency")
    L.append("")
    L.append(f"### Target: {_machine(tp)}")
    L.append("")
    L += _proj_table(tp, doc["calibrated"])
    L.append("")
    if sp:
        L.append(f"### Source: {_machine(sp)}")
        L.append("")
        L += _proj_table(sp, doc["calibrated"])
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
    return L


def figures_section(doc: dict, figs: dict[str, str]) -> list[str]:
    """Figures."""
    tp = doc["target"]["projection"]
    doc["source"]["projection"] if doc["source"] else None
    a = doc["anchors"]
    L: list[str] = []
    L.append("## 6. Figures")
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
    return L


def assumptions_section(doc: dict, figs: dict[str, str]) -> list[str]:
    """Assumptions, their sources, and what would change the conclusion."""
    tp = doc["target"]["projection"]
    sp = doc["source"]["projection"] if doc["source"] else None
    a = doc["anchors"]
    S = doc["summary"]
    L: list[str] = []
    L.append("## 7. Assumptions and their sources")
    L.append("")
    L.append(f"- Profile: {tp['profile']['label']}" + ("" if a["measured"] else " — no measurement: spec-derived") + ".")
    for who, d in (("target", doc["target"]), ("source", doc["source"])):
        if d is None:
            continue
        for k, rule in d["projection"]["rules"].items():
            if rule:
                L.append(f"- Transfer rule, {who}, {k}: {rule.removeprefix(f'{k}: ')}.")
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
                (plo, phi), (qlo, qhi) = p["interval"]["tokens_per_s"], q["interval"]["tokens_per_s"]
                ov = plo <= qhi and qlo <= phi
                L.append(f"- At C={C} the target's 90% interval {iv(plo, phi)} "
                         + ("overlaps" if ov else "lies entirely " + ("above" if plo > qhi else "below"))
                         + f" the source's {iv(qlo, qhi)} tok/s total"
                         + (": the ranking of the two machines is not settled." if ov else "."))
    recs = [r for r in doc["recommendations"] if r.get("rank_gain") is not None]
    if len(recs) > 1 and recs[0]["rank_gain"] > 0:
        L.append(f"- The first recommendation leads the second by {fmt(100 * (recs[0]['rank_gain'] - recs[1]['rank_gain']))} "
                 "percentage points of the ranking gain (section 8); a term off by more than that could reorder them.")
    if not a["measured"]:
        L.append("- Any measurement: every class efficiency, latency floor and overhead above is assumed.")
    L.append("")
    return L


def _title(doc: dict, figs: dict[str, str]) -> list[str]:
    tp = doc["target"]["projection"]
    return [f"# {tp['model']} decode on {_machine(tp)}: findings", "",
            f"Every number below is in `{figs['json']}` (`target.projection` is exactly the output of "
            f"`{doc['target']['command']}`).", "",
            f"Settings: parallel {tp['parallel']}, context {fmt(tp['context'])} tokens, speculative decoding {tp['spec']}"
            + (f" (tree build on {tp['tree_build'].upper()})" if tp["tree_build"] else "")
            + f", CUDA graphs {'on' if tp['graphs'] else 'off'}.", ""]


def describes_section(doc: dict, figs: dict[str, str]) -> list[str]:
    """What the numbers describe: whose kernels, which profile, calibrated or not."""
    tp = doc["target"]["projection"]
    prov = doc["anchors"]["provenance"]
    L = ["## 1. What this describes", "",
         f"- **{doc['describes']}**.",
         f"- Profile `{tp['profile']['path']}`: {prov.get('gpu_name', '?')}, measured {prov.get('timestamp', '?')}, "
         f"git `{prov.get('git_sha', '?')}`.",
         "- Every per-kernel floor and efficiency below was measured on **perfmodel's own Triton kernels** (MoE, "
         "attention, norms) and torch GEMMs, timed graph-captured on the profile GPU and carried to other GPUs by the "
         "transfer rules (section 7). "
         + ("The calibration below scales them toward the engine's." if doc["calibrated"] else
            "A serving engine's kernels have other floors.")]
    if doc["calibrated"]:
        c = tp["calibration"]
        loo = c.get("loo_median_abs_err")
        L.append(f"- Calibrated to **{c['engine']}** from {c['n_points']} point(s) on {', '.join(c['machines'])}: the "
                 "floors and efficiencies above are scaled by the fitted factors below, carried to the target by the "
                 "transfer rules. Leave-one-out median error: " + ("n/a (one point)" if loo is None else f"{fmt(100 * loo)}%")
                 + ".")
        det = sorted(n for n, f in c["factors"].items() if f["determined"])
        L.append(f"- {len(det)} of {len(c['factors'])} factors are pinned down by the points"
                 + (f" ({', '.join(det)})" if det else "")
                 + "; the others are only loosely constrained (posterior σ at least 0.7× the prior's), so their "
                 "values are weak evidence and their σ widens every interval below.")
        L += ["", "| factor | value | σ posterior (relative; µs for the host term) | pinned down by the data |",
              "|---|---|---|---|"]
        for name, f in sorted(c["factors"].items()):
            host = name == "engine_host_us"
            L.append(f"| {name} | {fmt(f['value'])}{' µs' if host else ''} | {fmt(f['sigma_post'])}{' µs' if host else ''} | "
                     f"{'yes' if f['determined'] else 'no (σ near its prior)'} |")
        L += [f"- Warning: {w}" for w in c.get("warnings", [])]
        L.append("")
    else:
        L.append("- **Uncalibrated** to any serving engine: no `--calibration` was given. The section *with "
                 "production-class floors* below shows the same projection with the floors of cited production "
                 "decode kernels.")
    eh = doc["host"]["engine_host_ms"]
    L.append(f"- Host: the measured {fmt(doc['host']['loop_us'])} µs \"host step\" is perfmodel's own argmax-and-sync "
             "decode loop, not a serving engine's scheduler. An engine's per-step host work is the `engine_host` term: "
             + (f"{fmt(1e3 * max(eh.values())) if eh and max(eh.values()) > 0 else '0'} µs per step here, fitted by the "
                "calibration." if doc["calibrated"]
                else "0 by default (uncalibrated); `perfmodel calibrate` fits it from engine measurements."))
    acc = tp.get("acceptance")
    ftau = (tp.get("calibration") or {}).get("factors", {}).get("tau")
    if acc and ftau and ftau["determined"]:
        L.append(f"- Acceptance τ is **calibrated**: the {acc['source']} preset × the fitted factor {fmt(ftau['value'])}; "
                 f"its uncertainty is the posterior σ ({pct(ftau['sigma_post'], False)} of τ). It is part of every tok/s "
                 "interval.")
    elif acc:
        L.append(f"- Acceptance τ is **{'measured' if acc['measured'] else 'modelled'}** ({acc['source']}); its "
                 f"uncertainty: {acc['sigma']}. It is part of every tok/s interval.")
    if doc["concurrency_added"]:
        L.append("- Concurrencies added to the ones asked for ("
                 + ", ".join(map(str, doc["concurrency_asked"])) + "): "
                 + "; ".join(f"C={C}: {why}" for C, why in doc["concurrency_added"].items()) + ".")
    for n in doc["monotone_notes"]:
        L.append(f"- {n}")
    L.append("")
    pf = doc.get("production_floors")
    if pf:
        L += ["### With production-class floors (what-if, uncalibrated profile)", "",
              "Each kernel class's floor t0 lowered to a cited batch-1 decode latency of a production kernel where that "
              "is lower (`perfmodel/data/production_floors.yaml`); everything else unchanged:", ""]
        fits = doc["anchors"]["fits"]
        for cls, f in sorted(pf["floors"].items()):
            ours = [v["t0_us"] for k, v in fits.items() if k.split(".")[0] == cls]
            a = f.get("floor_us")
            if a is None:
                L.append(f"- {cls}: kept ({f['source']})")
            elif ours and a >= min(ours):
                L.append(f"- {cls}: kept: perfmodel's fitted {fmt(min(ours))} µs is already at or below the cited "
                         f"{fmt(a)} µs per call ({f['kernel']}; {f['source']})")
            else:
                L.append(f"- {cls}: lowered to {fmt(a)} µs per call ({f['kernel']}; {f['source']})")
        L.append("")
        changed = any(p["fits_in_memory"] and b["fits_in_memory"] and p["step_ms"] != b["step_ms"]
                      for who in ("target", "source") if isinstance(pf.get(who), list)
                      for p, b in zip(pf[who], doc[who]["projection"]["points"]))
        if not changed:
            L += ["No floor is lowered, so this variant equals the projection below at every reported concurrency on "
                  "both machines: perfmodel's fitted floors are already at or below every cited production floor.", ""]
        for who in ("target", "source"):
            pts = pf.get(who)
            if not isinstance(pts, list) or not changed:
                continue
            base = {p["concurrency"]: p for p in doc[who]["projection"]["points"]}
            L += [f"| {who}: C | step ms (perfmodel kernels) | step ms (production floors) | tok/s per stream | change |",
                  "|---:|---:|---:|---:|---:|"]
            for p in pts:
                b = base[p["concurrency"]]
                if not (p["fits_in_memory"] and b["fits_in_memory"]):
                    L.append(f"| {p['concurrency']} | — | — | does not fit | — |")
                    continue
                L.append(f"| {p['concurrency']} | {fmt(b['step_ms'])} | {fmt(p['step_ms'])} | "
                         f"{fmt(p['tokens_per_s_per_stream'])} | {pct(p['tokens_per_s_per_stream'] / b['tokens_per_s_per_stream'] - 1)} |")
            L.append("")
    return L


def summary_section(doc: dict, figs: dict[str, str]) -> list[str]:
    tp = doc["target"]["projection"]
    sp = doc["source"]["projection"] if doc["source"] else None
    S = doc["summary"]
    L = ["## 2. Summary", ""]
    for label, C in (("at C=1", S["c1"]), ("at the largest C that fits", S["cmax"])):
        if C is None:
            continue
        p = next(q for q in tp["points"] if q["concurrency"] == C)
        cap = label[0].upper() + label[1:] + ("" if C == 1 else f" (C={C})")
        if not p["fits_in_memory"]:
            L.append(f"- {cap}: does not fit.")
            continue
        line = (f"- **{cap}**: {fmt(p['tokens_per_s_per_stream'])} tok/s per stream "
                f"{iv(*p['interval']['tokens_per_s_per_stream'])}, {fmt(p['tokens_per_s'])} tok/s total "
                f"{iv(*p['interval']['tokens_per_s'])} (90% interval, step and τ) on the target, τ {tau_cell(p, tp['spec'], doc['calibrated'])}")
        if sp:
            q = next(x for x in sp["points"] if x["concurrency"] == C)
            if q["fits_in_memory"]:
                line += (f"; source: {fmt(q['tokens_per_s_per_stream'])} per stream, {fmt(q['tokens_per_s'])} total "
                         f"({fmt(p['tokens_per_s'] / q['tokens_per_s'])}× on the target)")
            else:
                line += "; the source does not fit this concurrency"
        L.append(line + ".")
    ok = [p for p in tp["points"] if p["fits_in_memory"]]
    best = max(ok, key=lambda p: p["tokens_per_s"]) if ok else None
    if best and best["concurrency"] != S["cmax"]:
        L.append(f"- Highest aggregate throughput on the target among the reported concurrencies: C={best['concurrency']}, "
                 f"{fmt(best['tokens_per_s'])} tok/s total {iv(*best['interval']['tokens_per_s'])}, above the largest "
                 "C that fits (section 5 says why).")
    L.append(f"- Largest concurrency that fits in memory (no speculation): target {fmt(tp['max_concurrency_that_fits'])}"
             + (f", source {fmt(sp['max_concurrency_that_fits'])}" if sp else "") + ".")
    L.append("")
    L.append("- " + (_bottleneck_sentence(sp, "source") if sp else f"Source {doc['source_name']}: {doc['source_error']}"))
    L.append("- " + _bottleneck_sentence(tp, "target"))
    L.append("")
    return L


def _whatif_list(rows: list[dict], proj: dict) -> list[str]:
    L, n = [], 0
    nospec = {p["concurrency"] for p in proj["points"] if p["fits_in_memory"] and p.get("speculation_fits") is False}
    for r in rows:
        if "skipped" in r:
            continue
        n += 1
        head = f"{n}. **{r['change']}** — ranking gain {pct(r['rank_gain'])}" if r["rank_gain"] is not None else \
            f"{n}. **{r['change']}** — not evaluable where both fit"
        if r["rank_gain"] is not None and all(x["gain"] == 0 for x in r["per_concurrency"] if x["fits"]):
            head += " (no effect at any reported concurrency)"
        elif r["rank_gain"] is not None and r["rank_gain"] <= 0:
            head += " (no gain: keep the current setting)"
        L.append(head + "; " + ", ".join(
            f"C={x['concurrency']}: {pct(x['gain'])}" if x["fits"] else f"C={x['concurrency']}: {x['why']}"
            for x in r["per_concurrency"]))
        for x in r["per_concurrency"]:
            if not x["fits"]:
                continue
            b, nw = x["base"], x["new"]
            if nw["step_ms"] == b["step_ms"] and nw["tau"] == b["tau"]:
                why = ": the drafter does not fit at this concurrency" if x["concurrency"] in nospec else ""
                L.append(f"   - C={x['concurrency']}: no change (step {fmt(b['step_ms'])} ms, budget {b['budget']}{why}).")
                continue
            verb = "removes" if x["component_new_ms"] < x["component_base_ms"] else "adds"
            L.append(f"   - C={x['concurrency']}: {verb} {fmt(abs(x['component_new_ms'] - x['component_base_ms']))} ms of "
                     f"{x['component']} ({fmt(x['component_base_ms'])} → {fmt(x['component_new_ms'])} ms); step "
                     f"{fmt(b['step_ms'])} → {fmt(nw['step_ms'])} ms, τ {fmt(b['tau'])} → {fmt(nw['tau'])}, budget "
                     f"{b['budget']} → {nw['budget']}: {fmt(b['tokens_per_s_per_stream'])} → "
                     f"{fmt(nw['tokens_per_s_per_stream'])} tok/s per stream = {pct(x['gain'])}.")
    skipped = [r for r in rows if "skipped" in r]
    if skipped:
        L += ["", "Not evaluated: " + "; ".join(f"{r['change']} ({r['skipped']})" for r in skipped) + "."]
    return L


def recommendations_section(doc: dict, figs: dict[str, str]) -> list[str]:
    tp = doc["target"]["projection"]
    L = ["## 8. Recommendations (every what-if at every reported concurrency, on both machines)", "",
         f"Each row re-runs the same projection with one change (`perfmodel/model/whatif.py`), at the base point's "
         f"tree budget unless the row says the budget is re-chosen. Ranked by one rule: {doc['rank_rule']}. Gains are in "
         "tok/s per stream (at a fixed C the total moves by the same %).", "",
         f"### Target: {_machine(tp)}", ""]
    L += _whatif_list(doc["recommendations"], tp)
    if doc["source"]:
        L += ["", f"### Source: {_machine(doc['source']['projection'])}", ""]
        L += _whatif_list(doc["source_whatifs"], doc["source"]["projection"])
    L.append("")
    return L


SECTIONS = (_title, describes_section, summary_section, anchors_section, specs_section, projection_section,
            figures_section, assumptions_section, recommendations_section)


def markdown(doc: dict, figs: dict[str, str]) -> str:
    return "\n".join(line for section in SECTIONS for line in section(doc, figs))
