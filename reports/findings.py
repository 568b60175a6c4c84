"""Notes for one target: markdown + PNG figures + the JSON every number comes from.

`write_report(req, out, source=..., sla=...)` answers the user's question: "what will the
machine I don't have do, against the one I have; what stops dominating, what starts; what do I
change". It runs the projection for the target and, with the same flags, for the source machine
(the one the user has today), takes the user's own figures from the calibration (or
`--observed`), the bottleneck shift from the two machines' step breakdowns at the same
concurrencies, the engine settings a user can change ranked at the concurrencies asked for (or
at a per-user service level), a sensitivity ranking and the raw what-ifs, into one dict
(`doc_data`), written as `<NAME>.json`; the markdown (`sections.py`) and the figures
(`figures.py`) are formatted only from that dict. `doc_data["target"]["projection"]` is exactly
what `perfmodel project --format json` prints for `doc_data["target"]["command"]`. The same
input gives the same bytes.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

from perfmodel.api import projector as Projector
from perfmodel.errors import ProjectionError
from perfmodel.explore import DELTA, best_at_sla, evaluate, gain_range, sensitivity
from perfmodel.model import whatif
from perfmodel.outputs import OutputError
from perfmodel.reports import figures, sections
from perfmodel.reports.sections import fmt  # noqa: F401  (re-exported: tests parse numbers with it)
from perfmodel.reports.writer import check_out, dump_json, staged_report
from perfmodel.request import input_files, production_floors
from perfmodel.scenario import Request, fields

FORM_FACTOR_SUFFIXES = ("-sxm", "-server")
COMPONENT_COLORS = figures.COMPONENT_COLORS
MIN_GAIN = 0.01  # a what-if moving tok/s by less than this at every concurrency is no recommendation
RANGE_INPUTS = 3  # a gain's range: the inputs the projection is most sensitive to, this many at each ranked C
FIXED_TERMS = ("latency_floor", "dispatch", "host", "engine_host")  # per-step costs that do not shrink with bandwidth


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


def _text(v) -> str:
    if isinstance(v, list):
        return ",".join(map(str, v))
    if isinstance(v, dict):
        return ",".join(f"{k}={x}" for k, x in v.items())
    return f"{v:g}" if isinstance(v, float) else str(v)


def _command(r: Request) -> str:
    """The `perfmodel project` command of a request: the scenario's main fields, then every field
    that differs from its default (one flag each, as the command line writes it)."""
    always = ("target", "gpus", "model", "parallel", "concurrency", "context", "spec")
    parts = ["perfmodel project"]
    for name, (_, default, cli) in fields().items():
        v = getattr(r, name)
        if name == "target" and r.hw_file:
            continue
        if v is None or (name not in always and v == default):
            continue
        if name in ("target", "model") and not isinstance(v, str):
            continue  # a spec object: given by --hw-file / --model-file
        flag = cli.flags[0]
        if "/" in flag:  # --graphs/--no-graphs
            on, off = flag.split("/")
            parts.append(on if v else off)
            continue
        parts.append(f"{flag} {_text(v)}")
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
        "interconnect": None if link is None else {
            "name": link.name, "kind": link.kind, "bw_per_dir_GBps": sv(link.peak.bw_per_dir_GBps),
            "allreduce_latency_us": sv(link.calibrated.allreduce_latency_us),
            "allreduce_busbw_GBps": sv(link.calibrated.allreduce_busbw_GBps)},
    }


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


def _profile(pj, res: dict) -> dict:
    pv = pj.profile.provenance
    return {"label": pj.profile.label, "path": res["profile"]["path"], "measured": pv.kind == "measured",
            "gpu_name": pv.gpu_name, "gpu_spec": pv.gpu_spec, "timestamp": pv.timestamp, "git_sha": pv.git_sha,
            "self_check": res["self_check"]}


def _at(proj: dict, C: int) -> dict | None:
    return next((p for p in proj["points"] if p["concurrency"] == C), None)


def _fits(p: dict | None) -> bool:
    return bool(p and p["fits_in_memory"])


# ------------------------------------------------------------------------------ the bottleneck shift
def _leaders(proj: dict, Cs: list[int]) -> list[list]:
    """[[C, component], ...]: the largest term at the first C, then each C where another takes over."""
    out = []
    for C in Cs:
        p = _at(proj, C)
        if not _fits(p):
            continue
        top = max(p["breakdown_ms"], key=lambda k: (p["breakdown_ms"][k], k))
        if not out or out[-1][1] != top:
            out.append([C, top])
    return out


SHIFT_MIN = 0.05  # a term's move from source to target, as a share of the larger step, worth a finding
SATURATED = 1.25  # MoE time at every larger reported C within this factor of its own: saturated from there


def _moe_saturation(tp: dict, upto: int | None) -> dict | None:
    """Where the target's MoE time stops growing with the tokens per step (the experts a step
    reads saturate): the first C up to `upto` (the largest C asked for that fits) from which MoE
    time at every larger C stays within SATURATED × its own, else the growth over that range."""
    pts = [p for p in tp["points"] if _fits(p) and "moe" in p["breakdown_ms"] and (upto is None or p["concurrency"] <= upto)]
    if len(pts) < 2:
        return None
    last = pts[-1]
    tokens = lambda p: p["concurrency"] * ((p["budget"] or 0) + 1)  # noqa: E731
    for p in pts[:-1]:
        later = [q["breakdown_ms"]["moe"] for q in pts[pts.index(p) + 1:]]
        if max(later) <= SATURATED * p["breakdown_ms"]["moe"] and tokens(last) >= 2 * tokens(p):
            return {"saturated": True, "from": p["concurrency"], "to": last["concurrency"], "from_ms": p["breakdown_ms"]["moe"],
                    "to_ms": last["breakdown_ms"]["moe"], "tokens_from": tokens(p), "tokens_to": tokens(last)}
    first = pts[0]
    return {"saturated": False, "from": first["concurrency"], "to": last["concurrency"], "from_ms": first["breakdown_ms"]["moe"],
            "to_ms": last["breakdown_ms"]["moe"], "tokens_from": tokens(first), "tokens_to": tokens(last)}


def _shift(tp: dict, sp: dict | None, model: dict, rank_C: int | None = None) -> dict:
    """What stops dominating and what starts, from both machines' breakdowns at the same C."""
    Cs = [p["concurrency"] for p in tp["points"] if _fits(p) and (sp is None or _fits(_at(sp, p["concurrency"])))]
    out: dict = {"concurrencies": Cs, "leaders": {"target": _leaders(tp, [p["concurrency"] for p in tp["points"]])}}
    if sp is not None:
        out["leaders"]["source"] = _leaders(sp, [p["concurrency"] for p in sp["points"]])
    if not Cs:
        return out
    C0 = Cs[0]
    t0 = _at(tp, C0)
    if sp is not None:
        s0 = _at(sp, C0)
        comps = sorted(set(t0["breakdown_ms"]) | set(s0["breakdown_ms"]))
        delta = {c: t0["breakdown_ms"].get(c, 0.0) - s0["breakdown_ms"].get(c, 0.0) for c in comps}
        big = SHIFT_MIN * max(s0["step_ms"], t0["step_ms"])  # a move smaller than this is no finding

        def moves(sign):
            cs = sorted((c for c in comps if sign * delta[c] >= big), key=lambda c: (-abs(delta[c]), c))[:2]
            return [{"component": c, "concurrency": C0, "source_ms": s0["breakdown_ms"].get(c, 0.0),
                     "source_step_ms": s0["step_ms"], "target_ms": t0["breakdown_ms"].get(c, 0.0),
                     "target_step_ms": t0["step_ms"]} for c in cs]
        out["shrink"], out["grow"] = moves(-1), moves(+1)
    fixed = {}
    for who, proj in (("target", tp), ("source", sp)):
        p = _at(proj, C0) if proj is not None else None
        if _fits(p):
            ms = sum(p["breakdown_ms"].get(c, 0.0) for c in FIXED_TERMS)
            fixed[who] = {"ms": ms, "share": ms / p["step_ms"], "step_ms": p["step_ms"]}
    out["fixed"] = {"concurrency": C0, **fixed}
    out["moe"] = _moe_saturation(tp, rank_C)
    att = next((C for C, c in out["leaders"]["target"] if c == "attention"), None)
    if att is not None:
        out["attention_from"] = att
        out["attention_cause"] = (
            "under TP attention every GPU reads each sequence's whole MLA latent (one latent head, replicated on "
            "every rank), so attention grows with C × context while the experts a step reads saturate"
            if model["attention"] == "mla" and tp["parallel"] in ("tp", "tp-attn-ep-moe") else
            "attention bytes grow with C × context while the experts a step reads saturate")
    return out


# ------------------------------------------------------------------------------ recommendations
def _variants(req: Request, pj, kinds: tuple[str, ...] = ("engine", "kernels")) -> list:
    m = pj.model
    ws = whatif.variants(req, m.moe is not None, m.drafter is not None, production_floors(),
                         kv_dtype=(req.dtypes or {}).get("kv_cache", m.dtypes.kv_cache),
                         block=m.drafter.block_size if m.drafter else None)
    return [w for w in ws if w.kind in kinds]


def _inverted(row: dict) -> dict:
    """A what-if whose recommendation is the base over the variant: swap the two sides."""
    per = []
    for x in row["per_concurrency"]:
        if x.get("fits"):
            x = x | {"base": x["new"], "new": x["base"], "gain": x["base"]["tokens_per_s_per_stream"]
                     / x["new"]["tokens_per_s_per_stream"] - 1, "component_base_ms": x["component_new_ms"],
                     "component_new_ms": x["component_base_ms"]}
        per.append(x)
    return row | {"per_concurrency": per}


def _row(req: Request, w, base_points: list[dict]) -> dict:
    r = evaluate(req, w, base_points)
    r = _inverted(r) if w.inverse and "skipped" not in r else r
    return r | {"kind": w.kind, "inverse": w.inverse}


def _gain_at(row: dict, C: int) -> float | None:
    x = next((x for x in row.get("per_concurrency", []) if x["concurrency"] == C), None)
    return x["gain"] if x and x.get("fits") else None


def _range_inputs(sens: dict) -> list[str]:
    names: list[str] = []
    for rows in sens.values():
        names += [r["input"] for r in rows[:RANGE_INPUTS] if r["input"] not in names]
    return names


def _recommend_at_concurrency(req: Request, rows: list[dict], ranked: list[int], rank_C: int | None,
                              sens: dict, ws: dict) -> list[dict]:
    """Engine what-ifs with a gain of at least MIN_GAIN at a concurrency asked for, each with the
    range of its gain there, ranked by the gain at `rank_C` (the largest concurrency asked for
    that fits), then by the best gain at any concurrency asked for."""
    inputs = _range_inputs(sens)
    out = []
    for r in rows:
        if "skipped" in r or r["kind"] != "engine":
            continue
        gains = {C: _gain_at(r, C) for C in ranked}
        if not any(g is not None and g >= MIN_GAIN for g in gains.values()):
            continue
        w = ws[r["key"]]
        for x in r["per_concurrency"]:
            if x["concurrency"] in ranked and x.get("fits") and abs(x["gain"]) >= MIN_GAIN:
                b, n = x["base"], x["new"]
                sides = ((x["concurrency"], n["budget"]), (x["concurrency"], b["budget"])) if w.inverse else \
                    ((x["concurrency"], b["budget"]), (x["concurrency"], n["budget"]))
                rg = gain_range(req, w, *sides, inputs)
                x["gain_range"] = [1 / (1 + rg[1]) - 1, 1 / (1 + rg[0]) - 1] if (rg and w.inverse) else rg
        out.append(r | {"rank_gain": gains.get(rank_C), "best_gain": max(g for g in gains.values() if g is not None),
                        "gains": {str(C): g for C, g in gains.items()}})
    return sorted(out, key=lambda r: (r["rank_gain"] is None, -(r["rank_gain"] or 0.0), -r["best_gain"], r["key"]))


def _sla_grid(asked: list[int], max_fit: int) -> list[int]:
    grid = set(asked) | {max_fit}
    c = 1
    while c <= max_fit:
        grid.add(c)
        c *= 2
    return sorted(x for x in grid if x <= max(max_fit, max(asked)))


def _recommend_at_sla(req: Request, pj, sla: float, grid: list[int], sens: dict) -> tuple[dict | None, list[dict]]:
    """The base's SLA point and the engine what-ifs (GPU counts among them) that raise tok/s per
    GPU at ≥ `sla` tok/s per user by at least MIN_GAIN, best first, each with its range."""
    base = best_at_sla(req, sla, grid)
    if base is None:
        return None, []
    inputs = _range_inputs(sens)
    ws = _variants(req, pj, ("engine",)) + whatif.gpu_count_variants(req, [n for n in (req.gpus // 2,) if n >= 1])
    out = []
    for w in ws:
        new = best_at_sla(req, sla, grid, w)
        if new is None:
            continue
        lo, hi = (base, new) if not w.inverse else (new, base)
        gain = hi["tokens_per_s_per_gpu"] / lo["tokens_per_s_per_gpu"] - 1
        if gain < MIN_GAIN:
            continue
        sides = ((lo["concurrency"], lo["budget"]), (hi["concurrency"], hi["budget"]))
        rg = gain_range(req, w, *((sides[1], sides[0]) if w.inverse else sides), inputs, metric="per_gpu")
        if rg and w.inverse:
            rg = [1 / (1 + rg[1]) - 1, 1 / (1 + rg[0]) - 1]
        out.append({"key": w.key, "change": w.change, "kind": w.kind, "inverse": w.inverse, "base": lo, "new": hi,
                    "gain": gain, "gain_range": rg})
    return base, sorted(out, key=lambda r: (-r["gain"], r["key"]))


# ------------------------------------------------------------------------------ build doc_data
def build_doc_data(req: Request, source: str, sla: float | None = None) -> tuple[dict, object]:
    pj0 = Projector(req)
    max_t = pj0.run()["max_concurrency_that_fits"]
    src_req0 = replace(req, target=source, hw_file=None, link=None)
    try:
        max_s = Projector(src_req0).run()["max_concurrency_that_fits"]
        src_err = None
    except ProjectionError as e:
        max_s, src_err = None, str(e)
    asked = sorted(set(req.concurrency))
    added = {}
    for C, why in ((1, "a single stream: the latency case"),
                   (max_t, "the largest concurrency that fits on the target without speculation"),
                   (max_s, "the largest concurrency that fits on the source without speculation")):
        if C and C not in asked and C not in added:
            added[C] = why
    Cs = sorted(set(asked) | set(added))
    rq = replace(req, concurrency=Cs)
    pj = Projector(rq)
    res = pj.run()
    src, srq = None, None
    if src_err is None:
        srq = replace(src_req0, concurrency=Cs)
        spj = Projector(srq)
        src = {"command": _command(srq), "projection": spj.run(), "specs": _gpu_specs(spj.gpu, spj.link)}
    m = pj.model
    model = {"name": m.name, "display_name": m.display_name, "attention": m.attention.kind, "moe": m.moe is not None,
             "kv_dtype": (req.dtypes or {}).get("kv_cache", m.dtypes.kv_cache),
             "drafter": m.drafter.name if m.drafter else None}
    ranked = [C for C in asked if _fits(_at(res, C))]
    rank_C = max(ranked) if ranked else None
    doc = {
        "schema": "perfmodel-findings/3",
        "describes": _describes(res, pj.profile),
        "calibrated": bool(res.get("calibration")),
        "model": model,
        "target": {"command": _command(rq), "projection": res, "specs": _gpu_specs(pj.gpu, pj.link)},
        "source": src, "source_error": src_err, "source_name": source,
        "concurrency_asked": asked, "concurrency_added": {str(C): why for C, why in sorted(added.items())},
        "profile": _profile(pj, res),
        "calibration": pj.calibration.model_dump(mode="json") if pj.calibration is not None else None,
        "observed": res.get("observed"),
        "memory_kinds": {k: {"achievable_fraction": v.achievable_fraction.value,
                             "source": v.achievable_fraction.source, "uncertainty_rel": v.uncertainty_rel}
                         for k, v in sorted(pj.mk.kinds.items())
                         if k in {pj.gpu.memory.kind} | ({src and src["specs"]["memory_kind"]} - {None})},
    }
    doc["shift"] = _shift(res, src["projection"] if src else None, model, rank_C)
    sens_cs = sorted({1} | ({rank_C} if rank_C else set()))
    doc["sensitivity"] = {str(C): sensitivity(replace(rq, concurrency=[C]), C) for C in sens_cs}
    doc["sensitivity_delta"] = DELTA
    ws = {w.key: w for w in _variants(rq, pj)}
    rows = [_row(rq, w, res["points"]) for w in ws.values()]
    doc["whatifs"] = rows  # every what-if at every reported concurrency (appendix B)
    doc["rank"] = {"mode": "sla" if sla else "concurrency", "concurrencies": ranked, "concurrency": rank_C,
                   "sla_tok_s_per_user": sla, "min_gain": MIN_GAIN, "range_inputs": _range_inputs(doc["sensitivity"]),
                   "delta": DELTA}
    if sla:
        grid = _sla_grid(asked, max_t)
        base, recs = _recommend_at_sla(rq, pj, sla, grid, doc["sensitivity"])
        doc["rank"] |= {"grid": grid, "base": base}
        doc["recommendations"] = recs
    else:
        doc["recommendations"] = _recommend_at_concurrency(rq, rows, ranked, rank_C, doc["sensitivity"], ws)
    return doc, pj.profile


# ------------------------------------------------------------------------------ entry point
def write_report(req: Request, out: Path, source: str = "rtx-pro-6000", sla: float | None = None) -> Path:
    """Write `<NAME>_NOTES.md`, `<NAME>_NOTES.json` and `<NAME>_*.png` into `out`; return the
    markdown path. `sla`: rank the recommendations at a service level (the most tok/s per GPU
    with at least this many tok/s per user) instead of at the concurrencies asked for."""
    out = Path(out)
    _check_writable(out)
    if sla is not None and not (sla > 0 and sla < float("inf")):
        raise ReportError(f"--sla-tok-s-per-user {sla}: must be a positive number")
    doc, _ = build_doc_data(req, source, sla)
    name = report_name(doc["target"]["projection"]["target"])
    stem = name[: -len("_NOTES")]
    try:
        with staged_report(out, stem, inputs=input_files(req)) as stage:  # only our own files (reports/writer.py)
            figs = figures.write_all(doc, stage, stem)
            doc["figures"] = figs
            (stage / f"{name}.json").write_text(dump_json(doc))
            (stage / f"{name}.md").write_text(sections.markdown(doc, figs | {"json": f"{name}.json"}))
    except OutputError as e:
        raise ReportError(str(e)) from None
    except OSError as e:
        raise ReportError(f"cannot write the report to {out}: {e.strerror or e}") from None
    return out / f"{name}.md"


__all__ = ["ReportError", "write_report", "build_doc_data", "report_name", "fmt", "COMPONENT_COLORS"]
