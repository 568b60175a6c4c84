"""How tokens/s moves for ±20% in each input, ranked (one-at-a-time perturbation through the
pure what-if functions of whatif.py)."""

from __future__ import annotations

from perfmodel.model.project import Projector, Request
from perfmodel.model.whatif import HOST_FIELDS, scale_acceptance, scale_collectives, scale_laws, scale_overheads

DELTA = 0.2


def _perturbations():
    """name -> k -> (machine what-if, acceptance what-if)."""
    return {
        "memory bandwidth (all kernels)": lambda k: (scale_laws(k, "bw_GBps"), None),
        "compute rate (all kernels)": lambda k: (scale_laws(k, "tflops"), None),
        "per-kernel latency floor": lambda k: (scale_laws(k, "t0_us"), None),
        "collective latency": lambda k: (scale_collectives(k, "latency_us"), None),
        "collective bandwidth": lambda k: (scale_collectives(k, "busbw_GBps"), None),
        "host overhead (per step, per launch)": lambda k: (scale_overheads(k, *HOST_FIELDS), None),
        "graph node cost": lambda k: (scale_overheads(k, "graph_node_us"), None),
        "acceptance (τ − 1)": lambda k: (None, scale_acceptance(k)),
    }


def sensitivity(req: Request, concurrency: int | None = None, budget: int | None = None) -> list[dict]:
    """At concurrency C (and the base point's budget, kept fixed), the tok/s change per input."""
    C = concurrency or req.concurrency[0]
    base = Projector(req).point(C)
    if not base["fits_in_memory"]:
        return []
    b = base["budget"] if budget is None else budget
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
