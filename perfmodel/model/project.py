"""Projection: tokens/s per concurrency on a target system, with bottleneck and interval."""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Literal

from perfmodel.model.calibration import Factors, calibrated, scaled_tau
from perfmodel.model.layers import Layout, Parallel
from perfmodel.model.machine import Machine, build_machine
from perfmodel.model.memory import memory_use
from perfmodel.model.step import StepEstimate, step_estimate
from perfmodel.profile import Profile, load_profile
from perfmodel.specs import registry
from perfmodel.specs.schema import GpuSpec, InterconnectSpec, ModelSpec

Z90 = 1.645  # two-sided 90% interval
DEFAULT_PROFILE = "h200-sxm.json"
BUDGET_CANDIDATES = (4, 8, 16, 32, 64, 128, 256, 512)
SpecKind = Literal["none", "chain", "ddtree"]


class ProjectionError(ValueError):
    """Bad request; the CLI prints the message as one line and exits 2."""


@dataclass
class Request:
    target: str
    gpus: int = 8
    model: str = "kimi-k2.6"
    parallel: Parallel = "tp"
    concurrency: list[int] = field(default_factory=lambda: [1, 8, 32, 128])
    context: int = 8192
    spec: SpecKind = "none"
    budget: int | Literal["auto"] = "auto"
    acceptance: str = "dflash_default"
    graphs: bool = True
    tree_build: Literal["cpu", "gpu"] = "gpu"
    profile: str | None = None  # path, "spec", or None for the embedded default
    link: str | None = None
    host_cpu_factor: float = 1.0
    observed: str | None = None
    calibration: str | None = None  # calib.json from `perfmodel calibrate`
    hw_file: str | None = None
    model_file: str | None = None
    dtype_overrides: dict | None = None  # e.g. {"routed_experts": "nvfp4"} (validation rows)


def embedded_profile_path() -> Path | None:
    p = resources.files("perfmodel").joinpath("data", DEFAULT_PROFILE)
    return Path(str(p)) if p.is_file() else None


def resolve_profile(spec: str | None, gpu_for_spec: GpuSpec | None = None) -> Profile:
    from perfmodel.model.derived import spec_derived_profile

    if spec == "spec" or (spec is None and embedded_profile_path() is None):
        return spec_derived_profile(gpu_for_spec or registry.load_gpu("h200"), registry.load_memory_kinds())
    path = Path(spec) if spec else embedded_profile_path()
    try:
        key = (str(path.resolve()), path.stat().st_mtime_ns)
    except OSError:
        key = None
    if key in _PROFILES:
        return _PROFILES[key]
    try:
        prof = load_profile(path)
    except ValueError as e:
        raise ProjectionError(str(e)) from None
    if key is not None:
        _PROFILES[key] = prof  # sensitivity and reports build many projectors on one profile
    return prof


_PROFILES: dict = {}


def profile_source_gpu(profile: Profile) -> GpuSpec:
    name = profile.provenance.gpu_spec
    if not name:
        raise ProjectionError("profile provenance.gpu_spec is empty: cannot tell which GPU it was measured on")
    try:
        return registry.load_gpu(name)
    except registry.SpecError as e:
        raise ProjectionError(str(e)) from None


def _load(req: Request) -> tuple[GpuSpec, ModelSpec, InterconnectSpec | None]:
    try:
        gpu = registry.load_gpu_file(req.hw_file) if req.hw_file else registry.load_gpu(req.target)
        model = registry.load_model_file(req.model_file) if req.model_file else registry.load_model(req.model)
        link = registry.load_link(req.link or gpu.default_interconnect) if req.gpus > 1 else None
        if req.dtype_overrides:
            model = model.model_copy(update={"dtypes": model.dtypes.model_validate(
                model.dtypes.model_dump() | req.dtype_overrides)})
    except registry.SpecError as e:
        raise ProjectionError(str(e)) from None
    return gpu, model, link


def _validate(req: Request, model: ModelSpec) -> None:
    if req.gpus < 1:
        raise ProjectionError(f"--gpus must be ≥ 1, got {req.gpus}")
    if not req.concurrency or any(c < 1 for c in req.concurrency):
        raise ProjectionError(f"--concurrency needs positive integers, got {req.concurrency}")
    if req.context < 0:
        raise ProjectionError(f"--context must be ≥ 0, got {req.context}")
    if req.parallel != "tp" and model.moe is None:
        raise ProjectionError(f"--parallel {req.parallel} needs an MoE model; {model.name} is dense")
    if req.spec != "none" and model.drafter is None:
        raise ProjectionError(f"--spec {req.spec} needs a drafter in the model spec; {model.name} has none")
    if req.host_cpu_factor <= 0:
        raise ProjectionError("--host-cpu-factor must be > 0")
    if isinstance(req.budget, int) and req.budget < 1:
        raise ProjectionError(f"--budget must be ≥ 1 or 'auto', got {req.budget}")


def self_check(profile: Profile, model_cache: dict | None = None) -> dict:
    """Predict the profile's own end-to-end synthetic steps from its component fits."""
    one = [p for p in profile.e2e if p.n_gpus == 1]
    if not one:
        return {"n_points": 0, "median_abs_err": None, "points": []}
    src = profile_source_gpu(profile)
    mk = registry.load_memory_kinds()
    mach = build_machine(src, 1, None, profile, src, mk)
    rows = []
    for p in one:
        m = registry.load_model(p.model)
        lay = Layout("tp", 1, tp_shape=p.tp_shape, comm=False)
        est = step_estimate(m, mach, lay, p.concurrency, p.q, p.context, graph=p.graph, lm_head=p.lm_head,
                            n_layers=p.n_layers, n_dense=p.n_dense_layers, host=False)
        pred = est.step_us / 1e3
        rows.append({"name": p.name, "concurrency": p.concurrency, "q": p.q, "context": p.context,
                     "measured_ms": p.step_ms, "predicted_ms": pred, "err": pred / p.step_ms - 1})
    med = statistics.median(abs(r["err"]) for r in rows)
    return {"n_points": len(rows), "median_abs_err": med, "max_abs_err": max(abs(r["err"]) for r in rows),
            "points": rows}


_OBS_PAR = re.compile(r"^(?P<par>tp-attn-ep-moe|tp|ep)(?P<n>\d+)$")


def parse_observed(s: str) -> dict:
    """'[gpu,]tpN|epN|tp-attn-ep-moeN,c=C,X tok/s[,ctx=L][,spec=chain|ddtree][,b=B]' -> fields.
    X is tokens/s per stream."""
    usage = (f"--observed '{s}': expected like 'rtx-pro-6000,tp8,c=1,98tok/s[,ctx=8192][,spec=ddtree,b=16]'")
    parts = [x.strip() for x in s.replace(" ", "").split(",") if x.strip()]
    out: dict = {"gpu": None, "context": None, "spec": "none", "budget": None}
    for i, part in enumerate(parts):
        low = part.lower()
        m = _OBS_PAR.match(low)
        try:
            if m:
                out["parallel"], out["gpus"] = m["par"], int(m["n"])
            elif low.startswith("c="):
                out["concurrency"] = int(low[2:])
            elif low.startswith("ctx="):
                out["context"] = int(low[4:])
            elif low.startswith("spec="):
                out["spec"] = low[5:]
            elif low.startswith("b="):
                out["budget"] = int(low[2:])
            elif low.endswith("tok/s"):
                out["tokens_per_s"] = float(low[:-5])
            elif i == 0:
                out["gpu"] = part
            else:
                raise ValueError(part)
        except ValueError:
            raise ProjectionError(f"{usage}; cannot read '{part}'") from None
    missing = [k for k in ("parallel", "concurrency", "tokens_per_s") if k not in out]
    if missing:
        raise ProjectionError(f"{usage}; missing {', '.join(missing)}")
    if out["gpus"] < 1 or out["concurrency"] < 1 or not (0 < out["tokens_per_s"] < float("inf")):
        raise ProjectionError(f"{usage}; GPUs, concurrency and tok/s must be positive")
    if out["spec"] not in ("none", "chain", "ddtree"):
        raise ProjectionError(f"{usage}; spec must be none, chain or ddtree")
    return out


class Projector:
    """Holds the resolved specs, profile and machine for one request."""

    def __init__(self, req: Request):
        self.req = req
        self.gpu, self.model, self.link = _load(req)
        _validate(req, self.model)
        self.profile = resolve_profile(req.profile, self.gpu if req.profile == "spec" else None)
        self.source_gpu = profile_source_gpu(self.profile)
        self.mk = registry.load_memory_kinds()
        try:
            self.machine: Machine = build_machine(self.gpu, req.gpus, self.link, self.profile, self.source_gpu,
                                                  self.mk, req.host_cpu_factor, req.graphs)
        except ValueError as e:
            raise ProjectionError(str(e)) from None
        self.layout = Layout(req.parallel, req.gpus)
        self.acc = None
        if req.spec != "none":
            from perfmodel.model.acceptance import acceptance_from_cli

            depth = self.model.drafter.block_size - 1
            try:
                self.acc = acceptance_from_cli(req.acceptance, depth, structure="chain" if req.spec == "chain" else "ddtree")
            except ValueError as e:
                raise ProjectionError(str(e).splitlines()[0]) from None
        self.check = self_check(self.profile)
        self.observed = None
        self.calibration = None  # perfmodel.calibrate.CalibrationResult
        if req.calibration or req.observed:
            self.calibration = self._calibrate()
            self.factors = self.calibration.to_factors()
            self.machine = calibrated(self.machine, self.factors)
        else:
            self.factors = Factors()

    # --------------------------------------------------------------- calibration
    def _calibrate(self):
        """`--calibration calib.json`, or `--observed` as a one-point calibration (same fit)."""
        from perfmodel.calibrate import CalibrationError, CalibrationInput, ObservedPoint, fit, load_result

        r = self.req
        try:
            if r.calibration:
                return load_result(r.calibration)
            o = parse_observed(r.observed)
            pt = ObservedPoint(
                target=o["gpu"] or self.source_gpu.name, gpus=o["gpus"], model_file=r.model_file,
                model=None if r.model_file else r.model, parallel=o["parallel"], concurrency=o["concurrency"],
                context=o["context"] or r.context, spec=o["spec"], budget=o["budget"],
                acceptance=r.acceptance if o["spec"] != "none" else None, graphs=r.graphs,
                tokens_per_s_per_stream=o["tokens_per_s"], label=f"--observed {r.observed}")
            cal = fit(CalibrationInput(engine="the engine behind --observed", points=[pt]), self.profile,
                      self.profile.label)
            self.observed = {"point": pt.describe(), "observed_tokens_per_s_per_stream": o["tokens_per_s"],
                             "uncalibrated_tokens_per_s_per_stream": cal.points[0].uncalibrated,
                             "calibrated_tokens_per_s_per_stream": cal.points[0].predicted}
            return cal
        except CalibrationError as e:
            raise ProjectionError(str(e)) from None
        except ValueError as e:  # pydantic: a field of the observed point
            raise ProjectionError(f"--observed '{r.observed}': {str(e).splitlines()[0]}") from None

    # --------------------------------------------------------------- one point
    def _estimate(self, C: int, budget: int) -> tuple[StepEstimate, float]:
        """(step, tau) at concurrency C; budget 0 = no speculation."""
        r = self.req
        if budget == 0:
            est = step_estimate(self.model, self.machine, self.layout, C, 1, r.context, graph=r.graphs)
            return est, 1.0
        tree = r.spec == "ddtree"
        est = step_estimate(self.model, self.machine, self.layout, C, budget + 1, r.context, graph=r.graphs,
                            draft=True, tree_budget=budget if tree else 0, tree_impl=r.tree_build)
        tau = float(self.acc.tau(budget))
        if self.calibration is not None:
            tau = scaled_tau(tau, self.factors, min(budget + 1, self.model.drafter.block_size))
        return est, tau

    def model_error(self) -> float:
        """The model's own error on points like these: the calibration's leave-one-out median
        (its in-sample median with one point), else the self-check's median."""
        c = self.calibration
        if c is not None:
            return c.loo_median_abs_err if c.loo_median_abs_err is not None else c.median_abs_err
        return self.check["median_abs_err"] or 0.0

    def describes(self) -> str:
        from perfmodel.calibrate import uncalibrated_description

        return self.calibration.describes if self.calibration else uncalibrated_description(self.profile)

    def _interval(self, est: StepEstimate, tau: float) -> dict:
        err = self.model_error()
        sigma = math.hypot(est.sigma_us, err * est.step_us)
        lo, hi = max(est.step_us - Z90 * sigma, 1e-3), est.step_us + Z90 * sigma
        return {"step_ms": [lo / 1e3, hi / 1e3], "tokens_per_s_per_stream": [tau / hi * 1e6, tau / lo * 1e6]}

    def _point(self, C: int, est: StepEstimate, tau: float, budget: int, mem) -> dict:
        step_ms = est.step_us / 1e3
        tps = tau / est.step_us * 1e6
        iv = self._interval(est, tau)
        spec_split = None
        if budget:
            bd = est.breakdown_us
            dt = bd.get("draft", 0.0) + bd.get("tree_build", 0.0)
            spec_split = {"draft_ms": bd.get("draft", 0.0) / 1e3, "tree_build_ms": bd.get("tree_build", 0.0) / 1e3,
                          "verify_ms": (est.step_us - dt - bd.get("host", 0.0)) / 1e3, "other_ms": bd.get("host", 0.0) / 1e3}
        return {
            "concurrency": C, "step_ms": step_ms, "tokens_per_s_per_stream": tps, "tokens_per_s": tps * C,
            "tau": tau, "budget": budget,
            "breakdown_ms": {k: v / 1e3 for k, v in sorted(est.breakdown_us.items(), key=lambda kv: -kv[1])},
            "bottleneck": est.bottleneck, "n_kernels": est.n_kernels,
            "interval": {"step_ms": iv["step_ms"], "tokens_per_s_per_stream": iv["tokens_per_s_per_stream"],
                         "tokens_per_s": [x * C for x in iv["tokens_per_s_per_stream"]], "level": 0.9},
            "spec_split": spec_split,
            "fits_in_memory": mem.fits(C),
            "memory_GB": {"weights": mem.weights_GB, "kv": mem.kv_GB(C), "usable": mem.usable_GB},
        }

    def point(self, C: int) -> dict:
        r = self.req
        if r.spec == "none":
            mem = memory_use(self.model, self.gpu, self.layout, r.context)
            if not mem.fits(C):
                return self._unfit(C, mem, 0)
            est, tau = self._estimate(C, 0)
            return self._point(C, est, tau, 0, mem)
        budgets = BUDGET_CANDIDATES if r.budget == "auto" else (r.budget,)
        if r.spec == "chain":
            budgets = (self.model.drafter.block_size - 1,) if r.budget == "auto" else (r.budget,)
        curve = []
        for b in ((0,) + tuple(budgets)) if r.budget == "auto" else budgets:
            mem = memory_use(self.model, self.gpu, self.layout, r.context, spec_tokens=b + 1 if b else 0, drafter=b > 0)
            if not mem.fits(C):
                curve.append({"budget": b, "fits_in_memory": False})
                continue
            est, tau = self._estimate(C, b)
            curve.append({"budget": b, "tau": tau, "step_ms": est.step_us / 1e3,
                          "tokens_per_s_per_stream": tau / est.step_us * 1e6, "fits_in_memory": True,
                          "_est": est, "_mem": mem})
        ok = [c for c in curve if c["fits_in_memory"]]
        if not ok:
            return self._unfit(C, memory_use(self.model, self.gpu, self.layout, r.context), budgets[0])
        best = max(ok, key=lambda c: c["tokens_per_s_per_stream"])
        pt = self._point(C, best["_est"], best["tau"], best["budget"], best["_mem"])
        pt["budget_curve"] = [{k: v for k, v in c.items() if not k.startswith("_")} for c in curve]
        if r.budget == "auto":
            pt["budget_note"] = ("no speculation is fastest at this concurrency" if best["budget"] == 0
                                 else f"best budget {best['budget']} of {[c['budget'] for c in ok]}")
        return pt

    def _unfit(self, C: int, mem, budget: int) -> dict:
        return {"concurrency": C, "fits_in_memory": False, "budget": budget,
                "memory_GB": {"weights": mem.weights_GB, "kv": mem.kv_GB(C), "usable": mem.usable_GB},
                "note": f"does not fit: weights {mem.weights_GB:.1f} GB + KV {mem.kv_GB(C):.1f} GB > usable {mem.usable_GB:.1f} GB per GPU"}

    def run(self) -> dict:
        r = self.req
        mem0 = memory_use(self.model, self.gpu, self.layout, r.context)
        if mem0.weights_GB > mem0.usable_GB:
            raise ProjectionError(
                f"{self.model.name} does not fit on {r.gpus}× {self.gpu.name}: weights {mem0.weights_GB:.1f} GB "
                f"per GPU > usable {mem0.usable_GB:.1f} GB; use more GPUs")
        points = [self.point(C) for C in r.concurrency]
        p = self.profile.provenance
        return {
            "target": {"gpu": self.gpu.name, "display_name": self.gpu.display_name, "n_gpus": r.gpus,
                       "memory_kind": self.gpu.memory.kind, "link": self.link.name if self.link else None,
                       "link_kind": self.link.kind if self.link else None},
            "model": self.model.name, "parallel": r.parallel, "context": r.context,
            "spec": r.spec, "graphs": r.graphs, "tree_build": r.tree_build if r.spec == "ddtree" else None,
            "acceptance": {"source": self.acc.kind, "description": self.acc.description} if self.acc else None,
            "profile": {"kind": p.kind, "gpu_name": p.gpu_name, "gpu_spec": p.gpu_spec, "timestamp": p.timestamp,
                        "path": r.profile or (DEFAULT_PROFILE if embedded_profile_path() else "spec-derived"),
                        "label": self.profile.label},
            "self_check": {k: v for k, v in self.check.items() if k != "points"},
            "observed": self.observed,
            "describes": self.describes(),
            "calibration": None if self.calibration is None else {
                "engine": self.calibration.engine, "profile": self.calibration.profile,
                "machines": self.calibration.machines, "n_points": len(self.calibration.points),
                "loo_median_abs_err": self.calibration.loo_median_abs_err,
                "factors": {f.name: {"value": f.value, "sigma_post": f.sigma_post, "determined": f.determined}
                            for f in self.calibration.factors},
                "warnings": self.calibration.warnings},
            "max_concurrency_that_fits": mem0.max_concurrency,
            "rules": {cls: law.rule for cls, law in self.machine.laws.items()} | {
                "all_reduce": self.machine.all_reduce.rule if self.machine.all_reduce else None,
                "all_to_all": self.machine.all_to_all.rule if self.machine.all_to_all else None,
                "overheads": self.machine.overheads.rule,
                "compute_dtypes": "; ".join(
                    f"{dt}: target {dt}/bf16 peak ratio x {eff:.3f}, the profile GPU's measured {dt} GEMM fraction of "
                    f"peak over bf16's" for dt, eff in self.machine.dtype_efficiency.items()) or "peak ratios"},
            "points": points,
        }


def project(req: Request) -> dict:
    return Projector(req).run()
