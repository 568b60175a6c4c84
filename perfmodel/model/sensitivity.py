"""How tokens/s moves for ±20% in each input, ranked (one-at-a-time perturbation)."""

from __future__ import annotations

from perfmodel.model.project import Projector, Request
from perfmodel.model.whatif import ACCEPTANCE_WHATIF, MACHINE_WHATIFS, scale_acceptance

DELTA = 0.2


def variant(pj: Projector, name: str, k: float) -> Projector:
    """The projector with input `name` (a MACHINE_WHATIFS key or ACCEPTANCE_WHATIF) scaled by k."""
    if name == ACCEPTANCE_WHATIF:
        return pj.variant(acc=scale_acceptance(pj.acc, k))
    return pj.variant(machine=MACHINE_WHATIFS[name](pj.machine, k))


def _perturbations():
    """name -> fn(projector, k) that sets `projector.machine`/`.acc` to the scaled variant's.
    Kept for reports.findings, which predates `variant`; new code calls `variant`."""

    def setter(name):
        def f(pj, k):
            v = variant(pj, name, k)
            pj.machine, pj.acc = v.machine, v.acc
        return f

    return {name: setter(name) for name in (*MACHINE_WHATIFS, ACCEPTANCE_WHATIF)}


def sensitivity(req: Request, concurrency: int | None = None) -> list[dict]:
    C = concurrency or req.concurrency[0]
    base_pj = Projector(req)
    base = base_pj.point(C)
    if not base.fits_in_memory:
        return []
    b0 = base.tokens_per_s_per_stream
    rows = []
    for name in (*MACHINE_WHATIFS, ACCEPTANCE_WHATIF):
        if name == ACCEPTANCE_WHATIF and req.spec == "none":
            continue
        out = {tag: variant(base_pj, name, k).point(C).tokens_per_s_per_stream / b0 - 1
               for tag, k in (("minus", 1 - DELTA), ("plus", 1 + DELTA))}
        rows.append({"input": name, "concurrency": C, **out})
    rows.sort(key=lambda r: -max(abs(r["minus"]), abs(r["plus"])))
    return rows
