"""Predict a profile's measured end-to-end decode steps from its component benches. One function
serves the projection's self-check and `perfmodel validate`, so both price a point alike."""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Iterator, Mapping

from perfmodel.model.layers import Layout
from perfmodel.model.machine import Machine, build_machine
from perfmodel.model.step import StepEstimate, step_estimate
from perfmodel.profile import E2EPoint, Profile
from perfmodel.specs.schema import GpuSpec, InterconnectSpec, MemoryKinds, ModelSpec


def predict_e2e(points: Iterable[E2EPoint], base: Profile, src: GpuSpec, mk: MemoryKinds,
                models: Mapping[str, ModelSpec], link: InterconnectSpec | None,
                target: GpuSpec | None = None) -> Iterator[tuple[E2EPoint, StepEstimate]]:
    """Each point's predicted step, without the host loop (the e2e bench replays the GPU work).
    1-GPU points are predicted from `base`'s benches (measured on `src`) on `target` (default
    `src`; another GPU goes through the transfer rules); multi-GPU points from them plus the spec
    of the GPU's default interconnect (`link`), with `base`'s measured collectives dropped so that
    the link spec is what is checked."""
    target = target or src
    machines: dict[tuple, Machine] = {}
    for p in points:
        key = (1,) if p.n_gpus == 1 else (p.n_gpus, p.graph)
        if key not in machines:
            if p.n_gpus == 1:
                machines[key] = build_machine(target, 1, None, base, src, mk)
            else:
                base_nc = base.model_copy(update={"collectives": []})
                machines[key] = build_machine(target, p.n_gpus, link, base_nc, src, mk, graph=p.graph)
        lay = Layout(p.parallel, p.n_gpus, tp_shape=p.tp_shape, comm=p.n_gpus > 1)
        est = step_estimate(models[p.model], machines[key], lay, p.concurrency, p.q, p.context,
                            graph=p.graph, lm_head=p.lm_head, n_layers=p.n_layers, n_dense=p.n_dense_layers, host=False)
        yield p, est


def self_check(profile: Profile, src: GpuSpec, mk: MemoryKinds, models: Mapping[str, ModelSpec]) -> dict:
    """Predict the profile's own 1-GPU end-to-end synthetic steps from its component fits."""
    one = [p for p in profile.e2e if p.n_gpus == 1]
    if not one:
        return {"n_points": 0, "median_abs_err": None, "points": []}
    rows = []
    for p, est in predict_e2e(one, profile, src, mk, models, None):
        pred = est.step_us / 1e3
        rows.append({"name": p.name, "concurrency": p.concurrency, "q": p.q, "context": p.context,
                     "measured_ms": p.step_ms, "predicted_ms": pred, "err": pred / p.step_ms - 1})
    med = statistics.median(abs(r["err"]) for r in rows)
    return {"n_points": len(rows), "median_abs_err": med, "max_abs_err": max(abs(r["err"]) for r in rows),
            "points": rows}
