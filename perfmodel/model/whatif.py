"""What-if variants: pure functions Machine -> Machine (and acceptance -> acceptance), re-run
through the same model by `Projector(resolved, whatif=..., acceptance_fn=...)`. Nothing is patched
in place. Sensitivity and the findings report's recommendations (`perfmodel.explore`) use them.

A what-if that changes the request (parallel layout, speculation, tree building, CUDA graphs)
is evaluated at the base point's budget at every concurrency unless it says it re-chooses the
budget (`rechooses_budget`), so a change is never mixed with a silent budget change.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial

from perfmodel.model.machine import Machine
from perfmodel.scenario import layout_of

MachineFn = Callable[[Machine], Machine]


def scale_laws(k: float, attr: str) -> MachineFn:
    """Every kernel law's `attr` (bw_GBps, tflops, t0_us) times k."""
    def f(m: Machine) -> Machine:
        laws = {}
        for c, law in m.laws.items():
            upd = {attr: getattr(law, attr) * k}
            if attr == "bw_GBps" and law.bw_l2_GBps is not None:
                upd["bw_l2_GBps"] = law.bw_l2_GBps * k
            laws[c] = replace(law, **upd)
        return replace(m, laws=laws)
    return f


def scale_collectives(k: float, attr: str) -> MachineFn:
    def f(m: Machine) -> Machine:
        upd = {n: getattr(m, n).each(lambda law: replace(law, **{attr: getattr(law, attr) * k}))
               for n in ("all_reduce", "all_to_all") if getattr(m, n) is not None}
        return replace(m, **upd)
    return f


def _scaled(v, k: float):
    return {c: x * k for c, x in v.items()} if isinstance(v, dict) else v * k


def scale_overheads(k: float, *attrs: str) -> MachineFn:
    def f(m: Machine) -> Machine:
        o = m.overheads
        return replace(m, overheads=replace(o, **{a: _scaled(getattr(o, a), k) for a in attrs}))
    return f


def with_production_floors(m: Machine, floors: dict) -> Machine:
    """Each class's floor t0 (graph nodes excluded, as in the laws) lowered to its cited
    production anchor (`floors`: perfmodel/data/production_floors.yaml) where that is lower;
    classes without an anchor keep theirs."""
    node = m.overheads.graph_node_us
    laws = {}
    for c, law in m.laws.items():
        anchor = (floors.get(c.split(".")[0]) or {}).get("floor_us")
        if anchor is not None:
            law = replace(law, t0_us=min(law.t0_us, max(anchor - law.graph_nodes * node, 0.0)))
        laws[c] = law
    return replace(m, laws=laws)


def scale_acceptance(k: float):
    """tau - 1 times k at every budget (acceptance -> acceptance)."""
    def f(acc):
        return replace(acc, _tau=lambda b, t=acc.tau: 1 + (t(b) - 1) * k)
    return f


@dataclass(frozen=True)
class WhatIf:
    key: str
    change: str
    request: dict = field(default_factory=dict)  # request fields changed
    machine: MachineFn | None = None
    acceptance: Callable | None = None
    rechooses_budget: bool = False
    # "engine": a setting an engine user changes (layout, speculation, KV dtype, CUDA graphs, GPU
    # count); "kernels": a property of perfmodel's own kernels or of the machine, a what-if only
    kind: str = "kernels"
    # the recommendation is the base setting over this variant (the variant is the usual setting
    # the base improves on, e.g. one fixed tree budget against a budget per concurrency)
    inverse: bool = False


def _layout(key: str, n: int) -> str:
    lay = layout_of(key)
    return f"{lay.name} ({lay.label(n)})"


def variants(req, has_moe: bool, has_drafter: bool, floors: dict, kv_dtype: str | None = None,
             block: int | None = None) -> list[WhatIf]:
    """The one-change-at-a-time what-ifs of a report, each named by what it changes: the engine
    settings a user can act on (`kind` "engine") and what-ifs on perfmodel's own kernels and the
    machine ("kernels"). `kv_dtype`: the model's KV dtype (an fp8 KV what-if when it is bf16);
    `block`: the drafter's block (a fixed-budget comparison when the budget is chosen per C)."""
    v = []
    if req.spec == "ddtree":
        other = "cpu" if req.tree_build == "gpu" else "gpu"
        v.append(WhatIf("tree_build", f"tree building on the {other.upper()} (now {req.tree_build.upper()})",
                        {"tree_build": other}))
    v.append(WhatIf("graphs", "CUDA graphs " + ("off (eager launches)" if req.graphs else "on (now eager)"),
                    {"graphs": not req.graphs}, kind="engine"))
    if has_moe:
        for par in ("tp", "tp-attn-ep-moe", "ep"):
            if par != req.parallel:
                v.append(WhatIf(f"parallel_{par}", f"layout {_layout(par, req.gpus)} instead of {_layout(req.parallel, req.gpus)}",
                                {"parallel": par}, kind="engine"))
    if has_drafter:
        for spec in ("none", "chain", "ddtree"):
            if spec != req.spec:
                v.append(WhatIf(f"spec_{spec}", f"speculative decoding {spec} (now {req.spec}; budget re-chosen)",
                                {"spec": spec, "budget": "auto"}, rechooses_budget=True, kind="engine"))
        if req.spec == "ddtree" and req.budget == "auto" and block:
            v.append(WhatIf("budget_per_concurrency", f"the tree budget chosen per concurrency (against one fixed budget "
                            f"B={block - 1}, the drafter's block)", {"budget": block - 1}, rechooses_budget=True,
                            kind="engine", inverse=True))
    if kv_dtype == "bf16":
        dt = dict(req.dtypes or {}) | {"kv_cache": "fp8"}
        v.append(WhatIf("kv_fp8", "KV cache in fp8 (now bf16)" + ("; budget re-chosen" if req.spec != "none" else ""),
                        {"dtypes": dt}, rechooses_budget=req.spec != "none", kind="engine"))
    v.append(WhatIf("production_floors", "production-class kernel floors (cited batch-1 latencies, "
                    "perfmodel/data/production_floors.yaml)", machine=partial(with_production_floors, floors=floors)))
    v.append(WhatIf("latency_floor_half", "per-kernel latency floors halved (fused / persistent kernels)",
                    machine=scale_laws(0.5, "t0_us")))
    if req.gpus > 1:
        v.append(WhatIf("collective_latency_half", "collective latency −50% (e.g. one-shot / NVLS all-reduce)",
                        machine=scale_collectives(0.5, "latency_us")))
    v.append(WhatIf("host_half", "host overhead −50% (per step and per launch)",
                    machine=scale_overheads(0.5, *HOST_FIELDS)))
    v.append(WhatIf("graph_node_half", "CUDA-graph node cost −50%", machine=scale_overheads(0.5, "graph_node_us")))
    return v


def gpu_count_variants(req, counts: list[int]) -> list[WhatIf]:
    """The same layout on other GPU counts (an engine setting; compared by tok/s per GPU)."""
    return [WhatIf(f"gpus_{n}", f"{n} GPUs instead of {req.gpus} ({_layout(req.parallel, n)})", {"gpus": n}, kind="engine")
            for n in counts if n != req.gpus]


HOST_FIELDS = ("host_step_us", "graph_launch_us", "launch_eager_us", "launch_eager_triton_us", "launch_eager_call_us")


RANK_RULE = ("geometric mean over every reported concurrency where both fit of (new tok/s ÷ base tok/s), minus 1")


def geo_mean_gain(gains: list[float]) -> float | None:
    if not gains:
        return None
    return math.exp(sum(math.log1p(g) for g in gains) / len(gains)) - 1


def summary(p: dict) -> dict:
    return {k: p[k] for k in ("concurrency", "step_ms", "tokens_per_s_per_stream", "tokens_per_s", "tau", "budget",
                              "bottleneck") if k in p}


def rank(rows: list[dict]) -> list[dict]:
    """Best first by RANK_RULE; ties and unevaluated rows by key (stable, deterministic)."""
    return sorted(rows, key=lambda r: (r.get("rank_gain") is None, -(r.get("rank_gain") or 0.0), r["key"]))


# name -> k -> Machine -> Machine: the machine inputs `perfmodel project --sensitivity` perturbs.
MACHINE_WHATIFS: dict[str, Callable[[float], MachineFn]] = {
    "memory bandwidth (all kernels)": lambda k: scale_laws(k, "bw_GBps"),
    "compute rate (all kernels)": lambda k: scale_laws(k, "tflops"),
    "per-kernel latency floor": lambda k: scale_laws(k, "t0_us"),
    "collective latency": lambda k: scale_collectives(k, "latency_us"),
    "collective bandwidth": lambda k: scale_collectives(k, "busbw_GBps"),
    "host overhead (per step, per launch)": lambda k: scale_overheads(k, *HOST_FIELDS),
    "graph node cost": lambda k: scale_overheads(k, "graph_node_us"),
}
ACCEPTANCE_WHATIF = "acceptance (τ − 1)"

