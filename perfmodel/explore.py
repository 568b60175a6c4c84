"""Explorations over projections: a report's what-ifs, evaluated at every concurrency, and the
sensitivity ranking (how tok/s moves for ±20% in each input, one at a time). Each variant is a
new projection of a changed request through `perfmodel.api`, with the pure Machine -> Machine
and acceptance -> acceptance functions of `perfmodel.model.whatif`. A what-if's gain comes with
the range it spans when the most influential inputs move (`gain_range`), and a configuration's
best operating point under a per-user service level (`best_at_sla`)."""

from __future__ import annotations

from dataclasses import replace as dc_replace

from perfmodel.api import projector
from perfmodel.errors import ProjectionError
from perfmodel.model.whatif import ACCEPTANCE_WHATIF, MACHINE_WHATIFS, WhatIf, geo_mean_gain, scale_acceptance, summary
from perfmodel.scenario import Request


def evaluate(req: Request, w: WhatIf, base_points: list[dict]) -> dict:
    """The what-if at every concurrency of `base_points` (same machine as the base)."""
    Cs = [p["concurrency"] for p in base_points]
    try:
        pj = projector(dc_replace(req, concurrency=Cs, **w.request), whatif=w.machine, acceptance_fn=w.acceptance)
    except (ProjectionError, ValueError) as e:
        return {"key": w.key, "change": w.change, "skipped": str(e).splitlines()[0]}
    per_c = []
    for b in base_points:
        C = b["concurrency"]
        # the base point's budget (None where it does not fit; 0, plain decode, where it or the
        # variant does not speculate)
        fixed = None if w.rechooses_budget else b["budget"]
        try:
            p = pj.point(C, fixed)
        except (ProjectionError, ValueError) as e:
            per_c.append({"concurrency": C, "fits": False, "why": str(e).splitlines()[0]})
            continue
        if not b["fits_in_memory"]:
            per_c.append({"concurrency": C, "fits": False, "why": "the base does not fit"})
            continue
        if not p["fits_in_memory"]:
            per_c.append({"concurrency": C, "fits": False, "why": p.get("note", "does not fit")})
            continue
        comps = sorted(set(b["breakdown_ms"]) | set(p["breakdown_ms"]))
        diff = {c: p["breakdown_ms"].get(c, 0.0) - b["breakdown_ms"].get(c, 0.0) for c in comps}
        top = max(comps, key=lambda c: (abs(diff[c]), c))
        per_c.append({"concurrency": C, "fits": True, "base": summary(b), "new": summary(p), "component": top,
                      "component_base_ms": b["breakdown_ms"].get(top, 0.0),
                      "component_new_ms": p["breakdown_ms"].get(top, 0.0),
                      "gain": p["tokens_per_s_per_stream"] / b["tokens_per_s_per_stream"] - 1})
    gains = [x["gain"] for x in per_c if x["fits"]]
    return {"key": w.key, "change": w.change, "rechooses_budget": w.rechooses_budget, "per_concurrency": per_c,
            "rank_gain": geo_mean_gain(gains), "n_evaluated": len(gains)}


DELTA = 0.2


def _perturbations():
    """name -> k -> (machine what-if, acceptance what-if)."""
    out = {name: (lambda k, f=f: (f(k), None)) for name, f in MACHINE_WHATIFS.items()}
    out[ACCEPTANCE_WHATIF] = lambda k: (None, scale_acceptance(k))
    return out


def sensitivity(req: Request, concurrency: int | None = None) -> list[dict]:
    """At concurrency C (and the base point's budget, kept fixed), the tok/s change per input."""
    C = concurrency or req.concurrency[0]
    base = projector(req).point(C)
    if not base["fits_in_memory"]:
        return []
    b = base["budget"]
    b0 = base["tokens_per_s_per_stream"]
    rows = []
    for name, make in _perturbations().items():
        if name.startswith("acceptance") and (req.spec == "none" or b == 0):
            continue
        out = {}
        for tag, k in (("minus", 1 - DELTA), ("plus", 1 + DELTA)):
            mfn, afn = make(k)
            p = projector(req, whatif=mfn, acceptance_fn=afn).point(C, b if req.spec != "none" else None)
            out[tag] = p["tokens_per_s_per_stream"] / b0 - 1
        rows.append({"input": name, "concurrency": C, **out})
    rows.sort(key=lambda r: (-max(abs(r["minus"]), abs(r["plus"])), r["input"]))
    return rows


def _compose(first, then):
    """`then` after `first` (either may be None)."""
    if first is None or then is None:
        return first or then
    return lambda x: then(first(x))


def _tps(p, metric: str) -> float:
    return p["tokens_per_s_per_gpu"] if metric == "per_gpu" else p["tokens_per_s_per_stream"]


def gain_range(req: Request, w: WhatIf, base: tuple[int, int], new: tuple[int, int], inputs: list[str],
               metric: str = "per_user") -> list[float] | None:
    """How far a what-if's gain moves when the model's own inputs do: the gain (new ÷ base − 1,
    in tok/s per user or per GPU) re-evaluated with each of `inputs` (names of the sensitivity
    ranking) at −DELTA and +DELTA, on both sides at once; [lowest, highest] over those, or None
    where none is evaluable. `base` and `new` are (concurrency, tree budget) of the two points
    (the budget None: chosen as the request says)."""
    perts = _perturbations()
    gains = []
    for name in inputs:
        if name not in perts:
            continue
        for k in (1 - DELTA, 1 + DELTA):
            mfn, afn = perts[name](k)
            try:
                b = projector(dc_replace(req, concurrency=[base[0]]), whatif=mfn, acceptance_fn=afn).point(*base)
                n = projector(dc_replace(req, concurrency=[new[0]], **w.request), whatif=_compose(w.machine, mfn),
                              acceptance_fn=_compose(w.acceptance, afn)).point(*new)
            except (ProjectionError, ValueError):
                continue
            if b["fits_in_memory"] and n["fits_in_memory"]:
                gains.append(_tps(n, metric) / _tps(b, metric) - 1)
    return [min(gains), max(gains)] if gains else None


def best_at_sla(req: Request, min_tok_s_per_user: float, grid: list[int], w: WhatIf | None = None) -> dict | None:
    """The SLA point of a configuration (the request, or its what-if `w`): among the concurrencies
    of `grid`, the one with the most tok/s per GPU whose tok/s per user is at least
    `min_tok_s_per_user` (its budget chosen as the request says); None if none meets it."""
    kw = dict(w.request) if w is not None else {}
    try:
        pj = projector(dc_replace(req, concurrency=sorted(set(grid)), **kw), whatif=w.machine if w else None,
                       acceptance_fn=w.acceptance if w else None)
    except (ProjectionError, ValueError):
        return None
    best = None
    for C in sorted(set(grid)):
        try:
            p = pj.point(C)
        except (ProjectionError, ValueError):
            continue
        if p["fits_in_memory"] and p["tokens_per_s_per_stream"] >= min_tok_s_per_user:
            if best is None or p["tokens_per_s_per_gpu"] > best["tokens_per_s_per_gpu"]:
                best = {k: p[k] for k in ("concurrency", "budget", "tokens_per_s_per_stream", "tokens_per_s_per_gpu",
                                          "step_ms", "bottleneck")} | {"interval": p["interval"]}
    return best
