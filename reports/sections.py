"""The notes' markdown: one function per section, each reading only the doc dict, answer first.

Order: the TL;DR (numbered findings with their intervals), what was measured on the source (the
user's own figures and the fit against each), the projection per concurrency, the bottleneck
shift as findings, the engine settings to change ranked at the concurrencies served (or at a
service level), the assumptions and what would change the answer, then appendix tables
(transfer rules, every what-if, the two machines' specs)."""

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


def pct(x, signed: bool = True) -> str:
    if x is None:
        return "n/a"
    v = 100.0 * x
    s = f"{v:.0f}" if abs(v) >= 10 else f"{v:.1f}"
    return ("+" if signed and v >= 0 else "") + s + "%"


def iv(lo, hi) -> str:
    return f"[{fmt(lo)}–{fmt(hi)}]"


COMPONENT_LABELS = {
    "moe": "MoE", "attention": "attention", "dense": "dense GEMMs", "elementwise": "norms / activations",
    "lm_head": "LM head", "latency_floor": "latency floors", "collectives": "collectives", "dispatch": "graph nodes / launch",
    "host": "host loop", "engine_host": "engine host work", "draft": "drafter", "tree_build": "tree building",
}


def cap(s: str) -> str:
    return s[:1].upper() + s[1:]


def label(comp: str) -> str:
    return COMPONENT_LABELS.get(comp, comp)


def _machine(proj) -> str:
    t = proj["target"]
    return f"{t['n_gpus']}× {t['display_name']}" + (f" over {t['link']}" if t["link"] else "")


def _short(proj) -> str:
    t = proj["target"]
    return f"{t['n_gpus']}× {t['gpu']}"


def _at(proj, C):
    return next((p for p in proj["points"] if p["concurrency"] == C), None)


def _fits(p) -> bool:
    return bool(p and p["fits_in_memory"])


def _layout(proj) -> str:
    from perfmodel.scenario import layout_of

    lay = layout_of(proj["parallel"])
    return f"{lay.name} ({lay.label(proj['target']['n_gpus'])})"


def _gain_cell(g, rng=None) -> str:
    if g is None:
        return "—"
    s = pct(g)
    return s + (f" [{pct(rng[0])}, {pct(rng[1])}]" if rng else "")


def _ttft(p) -> float | None:
    """A point's TTFT where the projection served whole requests (`--isl/--osl`): the median."""
    sv = p.get("serving")
    return sv["ttft_ms"]["median"] if sv else p.get("ttft_ms")


def _tpot(p) -> float | None:
    sv = p.get("serving")
    return sv["tpot_ms"]["median"] if sv else p.get("tpot_ms")


def _no_spec(p) -> bool:
    """Speculation was asked for but the drafter does not fit at this point (budget 0)."""
    return _fits(p) and p.get("speculation_fits") is False


# ------------------------------------------------------------------------------ sections
def _title(doc: dict, figs: dict[str, str]) -> list[str]:
    tp = doc["target"]["projection"]
    sp = doc["source"]["projection"] if doc["source"] else None
    src = f"from {_machine(sp)} today" if sp else f"(source {doc['source_name']}: {doc['source_error']})"
    spec = f", speculative decoding {tp['spec']}" if tp["spec"] != "none" else ""
    return [f"# {doc['model']['display_name']} decode on {_machine(tp)}", "",
            f"{src.capitalize() if not sp else 'Projected ' + src}; layout {_layout(tp)}, context {fmt(tp['context'])} "
            f"tokens{spec}, CUDA graphs {'on' if tp['graphs'] else 'off'}. Every number is in `{figs['json']}` "
            f"(`target.projection` is the output of `{doc['target']['command']}`).", ""]


def _headline(doc: dict) -> str:
    tp = doc["target"]["projection"]
    sp = doc["source"]["projection"] if doc["source"] else None
    parts = []
    for C in sorted({1, doc["rank"]["concurrency"] or 1}):
        p = _at(tp, C)
        if not _fits(p):
            continue
        i = p["interval"]
        s = (f"C={C}: {fmt(p['tokens_per_s_per_stream'])} tok/s per user {iv(*i['tokens_per_s_per_stream'])}, "
             f"{fmt(p['tokens_per_s_per_gpu'])} per GPU {iv(*(x / tp['target']['n_gpus'] for x in i['tokens_per_s']))}")
        q = _at(sp, C) if sp else None
        if _fits(q):
            s += f" ({fmt(p['tokens_per_s_per_gpu'] / q['tokens_per_s_per_gpu'])}× the source per GPU)"
        elif sp:
            s += " (the source does not fit it)"
        parts.append(s)
    rk = doc["rank"]
    if rk["mode"] == "sla" and rk.get("base"):
        b = rk["base"]
        parts.append(f"at ≥ {fmt(rk['sla_tok_s_per_user'])} tok/s per user at most {fmt(b['tokens_per_s_per_gpu'])} per GPU "
                     f"(C={b['concurrency']}, {fmt(b['tokens_per_s_per_stream'])} per user)")
    return "**Throughput** on the target: " + "; ".join(parts) + " (90% intervals)."


def _leaders(lead: list) -> str:
    if len(lead) == 1:
        return f"{label(lead[0][1])} at every concurrency that fits"
    return ", then ".join(f"{label(c)} {'at' if i == 0 else 'from'} C={C}" for i, (C, c) in enumerate(lead))


def _shift_sentence(doc: dict) -> str | None:
    sh = doc["shift"]
    bits = []
    sh_ = sh.get("shrink", []) + sh.get("grow", [])
    if sh_:
        s0 = sh_[0]
        bits.append(f"at C={s0['concurrency']} the source's {fmt(s0['source_step_ms'])} ms step becomes {fmt(s0['target_step_ms'])} ms, "
                    + ", ".join(f"{label(s['component'])} {fmt(s['source_ms'])} → {fmt(s['target_ms'])} ms" for s in sh_))
    fx = sh.get("fixed", {})
    if "target" in fx:
        bits.append(f"latency floors, launches and host become {pct(fx['target']['share'], False)} of the target's step"
                    + (f" (from {pct(fx['source']['share'], False)})" if "source" in fx else ""))
    lead = sh["leaders"]["target"]
    if lead:
        bits.append("the largest term on the target is " + _leaders(lead))
    return ("**Bottleneck shift**: " + "; ".join(bits) + " (section 3).") if bits else None


def _action_sentence(doc: dict) -> str:
    recs = doc["recommendations"]
    if not recs:
        return "**What to change**: no engine setting tried gains 1% or more at the concurrencies served (section 4)."
    r = recs[0]
    if doc["rank"]["mode"] == "sla":
        return (f"**What to change**: {r['change']}: {pct(r['gain'])} tok/s per GPU at ≥ {fmt(doc['rank']['sla_tok_s_per_user'])} "
                f"tok/s per user" + (f" [{pct(r['gain_range'][0])}, {pct(r['gain_range'][1])}]" if r["gain_range"] else "")
                + (f"; {len(recs) - 1} more in section 4." if len(recs) > 1 else "."))
    C = doc["rank"]["concurrency"]
    x = next((x for x in r["per_concurrency"] if x["concurrency"] == C and x.get("fits")), None)
    g = f"{_gain_cell(x['gain'], x.get('gain_range'))} at C={C}" if x else "n/a at the largest C asked for"
    best = max(((C2, g2) for C2, g2 in ((int(k), v) for k, v in r["gains"].items()) if g2 is not None), key=lambda t: t[1])
    more = f", {pct(best[1])} at C={best[0]}" if best[0] != C else ""
    return (f"**What to change**: {r['change']}: {g}{more} in tok/s per user"
            + (f"; {len(recs) - 1} more in section 4." if len(recs) > 1 else "."))


def _trust_sentence(doc: dict) -> str:
    tp = doc["target"]["projection"]
    c = doc["calibration"]
    if c is None:
        sc = doc["profile"]["self_check"]
        own = f" (its own e2e steps within {pct(sc['median_abs_err'], False)} median)" if sc.get("median_abs_err") is not None else ""
        return (f"**How far to trust it**: uncalibrated: the laws of perfmodel's own kernels measured on "
                f"{doc['profile']['gpu_name']}{own}; a serving engine's kernels differ: give your figures "
                "(`perfmodel calibrate`, `--observed`).")
    loo = c["loo_median_abs_err"]
    s = (f"**How far to trust it**: fitted to your {len(c['points'])} figure{'s' if len(c['points']) != 1 else ''} within "
         f"{pct(c['median_abs_err'], False)} median" + (f" ({pct(loo, False)} leave-one-out)" if loo is not None else ""))
    C = doc["rank"]["concurrency"]
    p = _at(tp, C) if C else None
    if _fits(p) and p.get("unpinned_factors"):
        k, e = next(iter(p["unpinned_factors"].items()))
        s += (f"; at C={C} the step rests {pct(abs(e), False)} on {k}, which your points do not pin, and its interval "
              "carries that")
    pinned = [f["name"] for f in c["factors"] if f["determined"]]
    return s + ("; pinned: " + ", ".join(pinned) if pinned else "; no factor is pinned by your points on its own") + "."


def _memory_sentence(doc: dict) -> str | None:
    tp = doc["target"]["projection"]
    nospec = [p["concurrency"] for p in tp["points"] if _no_spec(p)]
    s = f"**Memory**: the target holds up to C={fmt(tp['max_concurrency_that_fits'])} at {fmt(tp['context'])} tokens without speculation"
    if doc["source"]:
        s += f" (the source {fmt(doc['source']['projection']['max_concurrency_that_fits'])})"
    if nospec:
        s += f"; with the drafter and the smallest tree it no longer fits from C={min(nospec)}"
    return s + "."


def tldr_section(doc: dict, figs: dict[str, str]) -> list[str]:
    items = [_headline(doc), _shift_sentence(doc), _action_sentence(doc), _trust_sentence(doc), _memory_sentence(doc)]
    return ["## TL;DR", ""] + [f"{i}. {s}" for i, s in enumerate([x for x in items if x], 1)] + [""]


def measured_section(doc: dict, figs: dict[str, str]) -> list[str]:
    pf = doc["profile"]
    L = ["## 1. What was measured on the source", ""]
    c = doc["calibration"]
    if c is not None:
        L += [f"Your figures ({c['engine']}), the model before calibration, after it, and leave-one-out (fitted on the others):", "",
              "| # | point | figure | yours | model, uncalibrated | fitted | error | leave-one-out |",
              "|---:|---|---|---:|---:|---:|---:|---:|"]
        for p in c["points"]:
            L.append(f"| {p['index']} | {p['label']} | {p['figure']} | {fmt(p['observed'])} | {fmt(p['uncalibrated'])} | "
                     f"{fmt(p['predicted'])} | {pct(p['err'])} | {pct(p['loo_err'])} |")
        L.append("")
        L += [f"- {cap(w)}." for w in c["warnings"]]
        pairs = [u for u in c["undetermined"] if "token" in u["why"]]
        rest = [u for u in c["undetermined"] if u not in pairs]
        if pairs:
            L.append("- Floors and bandwidth not separated (one number of tokens per step): "
                     + "; ".join(" / ".join(u["factors"]) for u in pairs) + ".")
        L += [f"- Not separated: {', '.join(u['factors'])} ({u['why']})." for u in rest]
        L.append("")
    else:
        L += ["No figure of yours was given (`--calibration` or `--observed`): every number below prices perfmodel's own "
              "kernels, not your engine's.", ""]
    sc = pf["self_check"]
    L.append(f"Kernel laws: {'measured' if pf['measured'] else 'spec-derived (no measurement)'} on {pf['gpu_name']} "
             f"(profile `{pf['path']}`, {str(pf['timestamp'] or '')[:10]}, git {str(pf['git_sha'] or '?')[:7]}"
             + (f"; predicts its own {sc['n_points']} e2e steps within {pct(sc['median_abs_err'], False)} median"
                if sc.get("median_abs_err") is not None else "") + "), carried to both machines by the transfer rules "
             "(appendix A).")
    L.append("")
    return L


def projection_section(doc: dict, figs: dict[str, str]) -> list[str]:
    tp = doc["target"]["projection"]
    sp = doc["source"]["projection"] if doc["source"] else None
    n = tp["target"]["n_gpus"]
    ttft = any(_ttft(p) is not None for p in tp["points"])
    L = [f"## 2. Projection on the target ({_short(tp)})", ""]
    head = ["C", "tok/s per user [90%]", "tok/s per GPU [90%]", "vs source per GPU", "step ms",
            "TPOT ms (served)" if ttft else "TPOT ms"]
    head += ["TTFT ms"] if ttft else []
    head += ["τ (budget)", "GB per GPU: weights + KV / usable", "largest term"]
    L += ["| " + " | ".join(head) + " |", "|" + "|".join("---:" if i < len(head) - 3 else "---" for i in range(len(head))) + "|"]
    added = {int(k) for k in doc["concurrency_added"]}
    for p in tp["points"]:
        C = p["concurrency"]
        mark = ("*" if C in added else "") + ("†" if _no_spec(p) else "")
        m = p["memory_GB"]
        mem = f"{fmt(m['weights'])} + {fmt(m['kv'])} / {fmt(m['usable'])}"
        if not p["fits_in_memory"]:
            L.append(f"| {C}{mark} | does not fit | | | | |" + (" |" if ttft else "") + f" | {mem} | |")
            continue
        i = p["interval"]
        q = _at(sp, C) if sp else None
        vs = f"{fmt(p['tokens_per_s_per_gpu'] / q['tokens_per_s_per_gpu'])}×" if _fits(q) else ("no fit" if sp else "—")
        tau = f"{fmt(p['tau'])} ({p['budget']})" if p["budget"] else "1 (no drafter)" if _no_spec(p) else "1"
        row = [f"{C}{mark}", f"{fmt(p['tokens_per_s_per_stream'])} {iv(*i['tokens_per_s_per_stream'])}",
               f"{fmt(p['tokens_per_s_per_gpu'])} {iv(*(x / n for x in i['tokens_per_s']))}", vs, fmt(p["step_ms"]),
               fmt(_tpot(p))]
        row += [fmt(_ttft(p))] if ttft else []
        top = max(p["breakdown_ms"], key=lambda k: (p["breakdown_ms"][k], k))
        row += [tau, mem, f"{label(top)} ({pct(p['breakdown_ms'][top] / p['step_ms'], False)})"]
        L.append("| " + " | ".join(row) + " |")
    L.append("")
    if added:
        L.append("\\* added to the concurrencies asked for: " + "; ".join(f"C={C}: {w}" for C, w in doc["concurrency_added"].items())
                 + ".")
    if any(_no_spec(p) for p in tp["points"]):
        L.append("† the drafter and the smallest tree no longer fit in memory here: the step runs without speculation, "
                 "so this point is not on the speculative curve (the figure marks it apart).")
    if tp.get("layout_notes"):
        L += tp["layout_notes"]
    L += ["", f"![tok/s per user and per GPU]({figs['throughput']})", ""]
    return L


def shift_section(doc: dict, figs: dict[str, str]) -> list[str]:
    sh = doc["shift"]
    tp = doc["target"]["projection"]
    sp = doc["source"]["projection"] if doc["source"] else None
    L = ["## 3. What stops dominating, what starts", ""]
    F = []
    for verb, s in [("smaller", x) for x in sh.get("shrink", [])] + [("larger", x) for x in sh.get("grow", [])]:
        F.append(f"**{cap(label(s['component']))}, {verb} on the target**: {fmt(s['source_ms'])} ms of the source's "
                 f"{fmt(s['source_step_ms'])} ms step ({pct(s['source_ms'] / s['source_step_ms'], False)}) at C={s['concurrency']}, "
                 f"{fmt(s['target_ms'])} ms of the target's {fmt(s['target_step_ms'])} ms "
                 f"({pct(s['target_ms'] / s['target_step_ms'], False)}).")
    fx = sh.get("fixed", {})
    if "target" in fx:
        up = "source" in fx and fx["target"]["share"] > fx["source"]["share"]
        F.append(f"**Fixed per-step costs {'grow' if up else 'fall'} in share**: latency floors, launches and host are "
                 f"{fmt(fx['target']['ms'])} ms, {pct(fx['target']['share'], False)} of the target's step at C={fx['concurrency']}"
                 + (f", against {fmt(fx['source']['ms'])} ms, {pct(fx['source']['share'], False)}, on the source" if "source" in fx
                    else "") + (": they do not shrink with bandwidth." if up else ": the bandwidth-bound terms grow around them."))
    for who, proj in (("target", tp), ("source", sp)):
        lead = sh["leaders"].get(who) if proj else None
        if lead:
            F.append(f"**Largest term on the {who}**: {_leaders(lead)}.")
    mo = sh.get("moe")
    if mo:
        tok = mo["tokens_to"] / mo["tokens_from"]
        F.append((f"**MoE saturates from C={mo['from']}**: " if mo["saturated"] else "**MoE**: ")
                 + f"on the target {fmt(mo['from_ms'])} ms at C={mo['from']}, {fmt(mo['to_ms'])} ms at C={mo['to']} for "
                 f"{tok:.3g}× the tokens per step" + (": the experts a step reads stop growing." if mo["saturated"] else "."))
    if sh.get("attention_cause"):
        F.append(f"**Attention takes over from C={sh['attention_from']}**: {sh['attention_cause']}.")
    L += [f"{i}. {f}" for i, f in enumerate(F, 1)]
    L += ["", f"![step-time breakdown, both machines]({figs['breakdown']})", ""]
    return L


def _speculation_line(doc: dict) -> str | None:
    tp = doc["target"]["projection"]
    if tp["spec"] == "none":
        return None
    pts = [p for p in tp["points"] if _fits(p)]
    bud = ", ".join(f"C={p['concurrency']}: {p['budget'] or 'off'}" for p in pts)
    off = [p["concurrency"] for p in pts if not p["budget"] and p.get("speculation_fits")]
    s = f"Speculation budget per concurrency on the target (best of the candidates): {bud}"
    if off:
        s += (f"; no speculation is fastest from C={min(off)}: turn it off above that batch size (vLLM "
              "speculative_disable_by_batch_size, TensorRT-LLM max_concurrency; `--spec-off-above`)")
    return s + "."


def recommendations_section(doc: dict, figs: dict[str, str]) -> list[str]:
    rk = doc["rank"]
    recs = doc["recommendations"]
    L = ["## 4. What to change", ""]
    rng = (f"[range]: the gain when each of {', '.join(rk['range_inputs'])} moves ±{int(100 * rk['delta'])}%"
           if rk["range_inputs"] else "")
    if rk["mode"] == "sla":
        b = rk["base"]
        if b is None:
            return L + [f"No concurrency reaches {fmt(rk['sla_tok_s_per_user'])} tok/s per user on the target.", ""]
        L += [f"Ranked by tok/s per GPU at ≥ {fmt(rk['sla_tok_s_per_user'])} tok/s per user (the best of C in "
              f"{', '.join(map(str, rk['grid']))}): now {fmt(b['tokens_per_s_per_gpu'])} per GPU at C={b['concurrency']} "
              f"({fmt(b['tokens_per_s_per_stream'])} per user). {rng}; changes under +1% left out.", "",
              "| # | change | C | tok/s per user | tok/s per GPU | gain per GPU [range] |", "|---:|---|---:|---:|---:|---|"]
        for i, r in enumerate(recs, 1):
            n = r["new"]
            L.append(f"| {i} | {r['change']} | {n['concurrency']} | {fmt(n['tokens_per_s_per_stream'])} | "
                     f"{fmt(n['tokens_per_s_per_gpu'])} | {_gain_cell(r['gain'], r['gain_range'])} |")
    else:
        Cs = rk["concurrencies"]
        if not recs:
            L.append(f"No engine setting tried gains 1% or more at C={', '.join(map(str, Cs))} (appendix B lists them all).")
        else:
            L += [f"Ranked by the gain in tok/s per user at C={rk['concurrency']}, the largest concurrency asked for that fits "
                  f"(then by the best gain at any of C={', '.join(map(str, Cs))}); {rng}; settings under +1% everywhere "
                  "left out (appendix B has every what-if).", "",
                  "| # | change | " + " | ".join(f"C={C}" for C in Cs) + f" | at C={rk['concurrency']} |",
                  "|---:|---|" + "---|" * len(Cs) + "---|"]
            for i, r in enumerate(recs, 1):
                cells = []
                for C in Cs:
                    x = next((x for x in r["per_concurrency"] if x["concurrency"] == C), None)
                    cells.append(_gain_cell(x["gain"], x.get("gain_range")) if x and x.get("fits") else "no fit")
                x = next((x for x in r["per_concurrency"] if x["concurrency"] == rk["concurrency"] and x.get("fits")), None)
                why = "—" if x is None else (
                    f"{'removes' if x['component_new_ms'] < x['component_base_ms'] else 'adds'} "
                    f"{fmt(abs(x['component_new_ms'] - x['component_base_ms']))} ms of {label(x['component'])}")
                L.append(f"| {i} | {r['change']} | " + " | ".join(cells) + f" | {why} |")
    s = _speculation_line(doc)
    L += ["", s] if s else []
    if "budget" in figs:
        L += ["", f"![tok/s per user against the tree budget]({figs['budget']})"]
    L.append("")
    return L


def assumptions_section(doc: dict, figs: dict[str, str]) -> list[str]:
    tp = doc["target"]["projection"]
    L = ["## 5. Assumptions and what would change the answer", ""]
    L.append(f"- {cap(doc['describes'])}.")
    if tp["acceptance"]:
        L.append(f"- Acceptance τ ({tp['acceptance']['source']}): {tp['acceptance']['description']}.")
    L.append(f"- Context {fmt(tp['context'])} tokens for every sequence; model preset `{tp['model']}`, KV cache "
             f"{doc['model']['kv_dtype']}.")
    for k, v in doc["memory_kinds"].items():
        L.append(f"- {k}: achievable {pct(v['achievable_fraction'], False)} of the datasheet bandwidth "
                 f"(±{pct(v['uncertainty_rel'], False)}; {v['source']}).")
    sens = doc["sensitivity"]
    Cs = list(sens)
    names = list(dict.fromkeys(r["input"] for C in reversed(Cs) for r in sens[C]))
    if names:
        d = int(100 * doc["sensitivity_delta"])
        L += ["", f"Sensitivity: tok/s per user when one input moves −{d}% / +{d}% (most influential first):", "",
              "| input | " + " | ".join(f"C={C}" for C in Cs) + " |", "|---|" + "---|" * len(Cs)]
        for n in names:
            cells = []
            for C in Cs:
                r = next((r for r in sens[C] if r["input"] == n), None)
                cells.append(f"{pct(r['minus'])} / {pct(r['plus'])}" if r else "—")
            L.append(f"| {n} | " + " | ".join(cells) + " |")
    sp = doc["source"]["projection"] if doc["source"] else None
    for C in doc["rank"]["concurrencies"][-1:]:
        p, q = _at(tp, C), (_at(sp, C) if sp else None)
        if _fits(p) and _fits(q):
            (plo, phi), (qlo, qhi) = p["interval"]["tokens_per_s"], q["interval"]["tokens_per_s"]
            if plo <= qhi and qlo <= phi:
                L += ["", f"At C={C} the two machines' 90% intervals overlap ({iv(plo, phi)} against {iv(qlo, qhi)} tok/s "
                          "total): which is faster there is not settled."]
    recs = [r for r in doc["recommendations"] if r.get("rank_gain") is not None]
    if len(recs) > 1:
        L += ["", f"The first change leads the second by {fmt(100 * (recs[0]['rank_gain'] - recs[1]['rank_gain']))} points of "
                  "gain; an input off by more than that could reorder them."]
    L.append("")
    return L


_RULE_KEYS = ("all_reduce", "all_to_all", "overheads", "compute_dtypes")


def _rule(rule: str | None, key: str) -> str:
    return "—" if not rule else rule.removeprefix(f"{key}: ").replace("|", "/")


def appendix_section(doc: dict, figs: dict[str, str]) -> list[str]:
    tp = doc["target"]["projection"]
    sp = doc["source"]["projection"] if doc["source"] else None
    L = ["## Appendix A. Transfer rules (profile GPU → each machine)", "",
         "| term | target | source |", "|---|---|---|"]
    keys = [k for k in tp["rules"] if "." not in k and k not in _RULE_KEYS] + [k for k in _RULE_KEYS if k in tp["rules"]]
    variants = sorted(k for k in tp["rules"] if "." in k)
    for k in keys:
        L.append(f"| {k} | {_rule(tp['rules'].get(k), k)} | {_rule(sp['rules'].get(k), k) if sp else '—'} |")
    if variants:
        L += ["", f"{len(variants)} kernel variants ({', '.join(variants)}) follow their class's rule with their own fitted figures "
                  "(in the JSON)."]
    L += ["", "## Appendix B. Every what-if on the target (tok/s per user, at the base's budget unless re-chosen)", ""]
    Cs = [p["concurrency"] for p in tp["points"]]
    L += ["| change | kind | " + " | ".join(f"C={C}" for C in Cs) + " |", "|---|---|" + "---|" * len(Cs)]
    quiet, skipped = [], []
    for r in doc["whatifs"]:
        if "skipped" in r:
            skipped.append(f"{r['change']} ({r['skipped']})")
            continue
        gains = {x["concurrency"]: x["gain"] if x.get("fits") else None for x in r["per_concurrency"]}
        if all(g is None or abs(g) < doc["rank"]["min_gain"] for g in gains.values()):
            quiet.append(r["change"])
            continue
        L.append(f"| {r['change']} | {'engine setting' if r['kind'] == 'engine' else 'perfmodel kernels / machine'} | "
                 + " | ".join(_gain_cell(gains.get(C)) for C in Cs) + " |")
    if quiet:
        L += ["", "Under 1% at every concurrency: " + "; ".join(quiet) + "."]
    if skipped:
        L += ["", "Not evaluated: " + "; ".join(skipped) + "."]
    ss, st = (doc["source"]["specs"] if doc["source"] else None), doc["target"]["specs"]
    L += ["", "## Appendix C. The two machines (datasheet figures; sources in the JSON)", "",
          f"| | source: {ss['name'] if ss else '—'} | target: {st['name']} |", "|---|---|---|"]

    def row(name, get):
        cells = []
        for s in (ss, st):
            try:
                v = get(s) if s else None
            except (KeyError, TypeError):
                v = None
            cells.append("—" if v is None else fmt(v))
        L.append(f"| {name} | " + " | ".join(cells) + " |")
    row("memory", lambda s: s["memory_kind"])
    row("capacity GB", lambda s: s["capacity_GB"]["value"])
    row("bandwidth GB/s", lambda s: s["bandwidth_GBps"]["value"])
    row("bf16 / fp4 dense TFLOP/s", lambda s: f"{fmt(s['bf16_TFLOPS']['value'])} / {fmt((s['fp4_TFLOPS'] or {}).get('value'))}")
    row("interconnect", lambda s: s["interconnect"]["name"])
    row("link GB/s per direction", lambda s: s["interconnect"]["bw_per_dir_GBps"]["value"])
    row("all-reduce latency µs / busbw GB/s", lambda s: f"{fmt(s['interconnect']['allreduce_latency_us']['value'])} / "
                                                        f"{fmt(s['interconnect']['allreduce_busbw_GBps']['value'])}")
    L.append("")
    return L


SECTIONS = (_title, tldr_section, measured_section, projection_section, shift_section, recommendations_section,
            assumptions_section, appendix_section)


def markdown(doc: dict, figs: dict[str, str]) -> str:
    lines = [line for section in SECTIONS for line in section(doc, figs)]
    while lines and lines[-1] == "":
        lines.pop()
    return "\n".join(lines) + "\n"
