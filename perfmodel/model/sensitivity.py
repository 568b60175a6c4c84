"""How tokens/s moves for ±20% in each input, ranked (one-at-a-time perturbation)."""

from __future__ import annotations

from dataclasses import replace

from perfmodel.model.project import Projector, Request

DELTA = 0.2


def _perturbations():
    """name -> function(projector, factor) that scales one input in place."""

    def laws(field):
        def f(pj, k):
            pj.machine = replace(pj.machine, laws={c: replace(l, **{field: getattr(l, field) * k})
                                                   for c, l in pj.machine.laws.items()})
        return f

    def coll(field):
        def f(pj, k):
            upd = {}
            for name in ("all_reduce", "all_to_all"):
                law = getattr(pj.machine, name)
                if law is not None:
                    upd[name] = replace(law, **{field: getattr(law, field) * k})
            pj.machine = replace(pj.machine, **upd)
        return f

    def over(*fields):
        def f(pj, k):
            o = pj.machine.overheads
            pj.machine = replace(pj.machine, overheads=replace(o, **{x: getattr(o, x) * k for x in fields}))
        return f

    def acceptance(pj, k):
        if pj.acc is not None:
            base = pj.acc
            pj.acc = type("Scaled", (), {"tau": lambda self, b: 1 + (base.tau(b) - 1) * k,
                                         "kind": base.kind, "description": base.description})()

    return {
        "memory bandwidth (all kernels)": laws("bw_GBps"),
        "compute rate (all kernels)": laws("tflops"),
        "per-kernel latency floor": laws("t0_us"),
        "collective latency": coll("latency_us"),
        "collective bandwidth": coll("busbw_GBps"),
        "host overhead (per step, per launch)": over("host_step_us", "graph_launch_us", "launch_eager_us",
                                                     "launch_eager_triton_us"),
        "graph node cost": over("graph_node_us"),
        "acceptance (τ − 1)": acceptance,
    }


def sensitivity(req: Request, concurrency: int | None = None) -> list[dict]:
    C = concurrency or req.concurrency[0]
    base_pj = Projector(req)
    base = base_pj.point(C)
    if not base["fits_in_memory"]:
        return []
    b0 = base["tokens_per_s_per_stream"]
    rows = []
    for name, fn in _perturbations().items():
        if name.startswith("acceptance") and req.spec == "none":
            continue
        out = {}
        for tag, k in (("minus", 1 - DELTA), ("plus", 1 + DELTA)):
            pj = Projector(req)
            fn(pj, k)
            out[tag] = pj.point(C)["tokens_per_s_per_stream"] / b0 - 1
        rows.append({"input": name, "concurrency": C, **out})
    rows.sort(key=lambda r: -max(abs(r["minus"]), abs(r["plus"])))
    return rows
