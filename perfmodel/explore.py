"""Explorations over projections: a report's what-ifs, evaluated at every concurrency, and the
sensitivity ranking (how tok/s moves for ±20% in each input, one at a time). Each variant is a
new projection of a changed request through `perfmodel.api`, with the pure Machine -> Machine
and acceptance -> acceptance functions of `perfmodel.model.whatif`."""

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
