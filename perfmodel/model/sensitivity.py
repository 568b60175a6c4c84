"""How tokens/s moves for ±20% in each input, ranked (one-at-a-time perturbation through the
pure what-if functions of whatif.py)."""

from __future__ import annotations

from perfmodel.model.project import Projector, Request
from perfmodel.model.whatif import ACCEPTANCE_WHATIF, MACHINE_WHATIFS, scale_acceptance

DELTA = 0.2


def _perturbations():
    """name -> k -> (machine what-if, acceptance what-if)."""
    out = {name: (lambda k, f=f: (f(k), None)) for name, f in MACHINE_WHATIFS.items()}
    out[ACCEPTANCE_WHATIF] = lambda k: (None, scale_acceptance(k))
    return out


def sensitivity(req: Request, concurrency: int | None = None) -> list[dict]:
    """At concurrency C (and the base point's budget, kept fixed), the tok/s change per input."""
    C = concurrency or req.concurrency[0]
    base = Projector(req).point(C)
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
            p = Projector(req, whatif=mfn, acceptance_fn=afn).point(C, b if req.spec != "none" else None)
            out[tag] = p["tokens_per_s_per_stream"] / b0 - 1
        rows.append({"input": name, "concurrency": C, **out})
    rows.sort(key=lambda r: (-max(abs(r["minus"]), abs(r["plus"])), r["input"]))
    return rows
