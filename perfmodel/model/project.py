"""Projection: tokens/s per concurrency on a target system, with bottleneck and interval.

Pure arithmetic on resolved inputs: `perfmodel.api.resolve` loads and checks everything a
`Request` names (specs, profile, calibration); here the `Projector` builds the machine and
prices each point.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from perfmodel.errors import ProjectionError
from perfmodel.model import sanity
from perfmodel.model.acceptance import combine_intervals
from perfmodel.model.calibration import Factors, calibrated, factors_of, scaled_tau
from perfmodel.model.layers import Layout
from perfmodel.model.machine import Machine, build_machine
from perfmodel.model.memory import memory_use
from perfmodel.model.resolved import Resolved
from perfmodel.model.result import Acceptance, BudgetPoint, Interval, MemoryGB, Point, ProfileInfo, Projection, SelfCheck, SpecSplit, Target
from perfmodel.model.step import Z90, StepEstimate, step_estimate
from perfmodel.profile import Profile

BUDGET_CANDIDATES = (4, 8, 16, 32, 64, 128, 256, 512)


def uncalibrated_description(profile: Profile, kernels: str = "perfmodel") -> str:
    p = profile.provenance
    if p.imported is not None:
        im = p.imported
        lacks = f"; {', '.join(im.lacks)} from the fallback profile ({profile.fallback.label})" if im.lacks and profile.fallback else ""
        return (f"{im.engine} {im.engine_version} kernels on {im.system} ({p.gpu_name}), imported from "
                f"{im.database} {im.database_version}{lacks}")
    if p.kind != "measured":
        return f"spec-derived laws for {p.gpu_spec or p.gpu_name} (no kernels measured)"
    what = "perfmodel kernels" if kernels == "perfmodel" else f"the kernel set '{kernels}'"
    return (f"{what} measured on {p.gpu_name} ({p.timestamp[:10] if p.timestamp else 'undated'}, "
            f"git {p.git_sha[:7] if p.git_sha else 'unknown'})")


class Projector:
    """The machine and arithmetic for one resolved request.

    `Projector(req)` resolves `req` (a `Request`, or an already `Resolved` one). What-if variants
    are new projectors: `Projector(req, whatif=...)` with a pure Machine -> Machine function
    (whatif.py), or `pj.variant(machine=...)`; `acceptance_fn` changes the acceptance source.
    Nothing is changed in place after construction."""

    def __init__(self, rs: Resolved, machine: Machine | None = None, acc=None,
                 whatif: Callable[[Machine], Machine] | None = None, acceptance_fn: Callable | None = None):
        if not isinstance(rs, Resolved):
            raise ProjectionError(f"Projector takes resolved inputs (perfmodel.api.resolve), got {type(rs).__name__}")
        self.resolved = rs
        self.req = r = rs.req
        self.gpu, self.model, self.link = rs.gpu, rs.model, rs.link
        self.profile, self.source_gpu, self.mk = rs.profile, rs.source_gpu, rs.mk
        self.acc = acc if acc is not None else rs.acc
        if acceptance_fn is not None and self.acc is not None:
            self.acc = acceptance_fn(self.acc)
        self.layout = Layout(r.parallel, r.gpus)
        self.calibration = rs.calibration  # calibration_schema.CalibrationResult
        self.observed = rs.observed_summary
        self.factors = factors_of(self.calibration) if self.calibration is not None else Factors()
        self.kernels = self.calibration.kernels if self.calibration is not None else r.kernels
        if r.kernels != "perfmodel" and r.kernels != self.kernels:
            raise ProjectionError(f"--kernels {r.kernels}: the calibration was fitted on kernel set '{self.kernels}'")
        try:
            self.machine: Machine = machine or build_machine(self.gpu, r.gpus, self.link, self.profile, self.source_gpu,
                                                             self.mk, r.host_cpu_factor, r.graphs, self.kernels,
                                                             fallback_gpu=rs.fallback_gpu)
        except ValueError as e:
            raise ProjectionError(str(e)) from None
        self.check = rs.self_check
        if self.calibration is not None and machine is None:  # a variant's machine is calibrated already
            self.machine = calibrated(self.machine, self.factors)
        if whatif is not None:
            self.machine = whatif(self.machine)

    def variant(self, machine: Machine | None = None, acc=None) -> Projector:
        """A new projector on the same request with another machine and/or acceptance source."""
        return Projector(self.resolved, machine=machine or self.machine, acc=acc or self.acc)

    def model_error(self) -> float:
        """The model's own error on points like these: the calibration's leave-one-out median
        (its in-sample median with one point), else the self-check's median."""
        c = self.calibration
        own = self.check["median_abs_err"] or 0.0
        if c is not None:
            # one point has no leave-one-out error and fits itself: keep the self-check's
            return c.loo_median_abs_err if c.loo_median_abs_err is not None else max(c.median_abs_err, own)
        return own

    def describes(self) -> str:
        return self.calibration.describes if self.calibration else uncalibrated_description(self.profile, self.kernels)


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
        tau = sanity.capped_tau(self.acc, budget, self.model.drafter.block_size - 1)
        if self.calibration is not None:
            tau = scaled_tau(tau, self.factors, min(budget + 1, self.model.drafter.block_size))
        return est, tau

    def _interval(self, est: StepEstimate, tau: float, tau_sigma: float) -> dict:
        """90% intervals: the step's (term σ and self-check error), and tok/s combining the
        step's and τ's relative errors in quadrature (in log space, so that with a known τ it
        is exactly τ over the step interval); `tau_share`: τ's share of that spread."""
        err = self.model_error()
        sigma = math.hypot(est.sigma_us, err * est.step_us)
        lo, hi = max(est.step_us - Z90 * sigma, 1e-3), est.step_us + Z90 * sigma
        iv = combine_intervals(tau / est.step_us * 1e6, est.step_us, lo, hi, tau, tau_sigma, Z90)
        return {"step_ms": [lo / 1e3, hi / 1e3], "tokens_per_s_per_stream": list(iv.tokens_per_s), "tau": list(iv.tau),
                "tau_share": iv.tau_share}

    def _tau_sigma(self, budget: int, tau: float) -> tuple[float, bool]:
        """τ's 1σ at a speculative budget (> 0) and whether τ is fitted to data rather than
        modelled. A calibration whose points pinned τ down (a determined `tau` factor) gives its
        posterior σ (relative, on the calibrated τ); otherwise the acceptance source's own σ."""
        f = next((f for f in self.calibration.factors if f.name == "tau" and f.determined),
                 None) if self.calibration is not None else None
        if f is not None:
            return tau * f.sigma_post, True
        return self.acc.tau_sigma(budget), bool(self.acc.measured)

    def _point(self, C: int, est: StepEstimate, tau: float, budget: int, mem, **extra) -> Point:
        step_ms = est.step_us / 1e3
        tps = tau / est.step_us * 1e6
        # budget 0 (no speculation): tau is exactly 1, nothing measured
        tau_sigma, tau_measured = self._tau_sigma(budget, tau) if budget else (0.0, None)
        iv = self._interval(est, tau, tau_sigma)
        spec_split = None
        if budget:
            bd = est.breakdown_us
            dt = bd.get("draft", 0.0) + bd.get("tree_build", 0.0)
            spec_split = SpecSplit(draft_ms=bd.get("draft", 0.0) / 1e3, tree_build_ms=bd.get("tree_build", 0.0) / 1e3,
                                   verify_ms=(est.step_us - dt - bd.get("host", 0.0)) / 1e3,
                                   other_ms=bd.get("host", 0.0) / 1e3)
        return Point(
            concurrency=C, step_ms=step_ms, tokens_per_s_per_stream=tps, tokens_per_s=tps * C, tau=tau,
            tau_sigma=tau_sigma if budget else None,
            tau_measured=tau_measured, budget=budget,
            breakdown_ms={k: v / 1e3 for k, v in sorted(est.breakdown_us.items(), key=lambda kv: -kv[1])},
            bottleneck=est.bottleneck, n_kernels=est.n_kernels,
            interval=Interval(step_ms=iv["step_ms"], tokens_per_s_per_stream=iv["tokens_per_s_per_stream"],
                              tokens_per_s=[x * C for x in iv["tokens_per_s_per_stream"]],
                              tau=iv["tau"] if budget else None, tau_share=iv["tau_share"] if budget else None,
                              level=0.9),
            spec_split=spec_split, fits_in_memory=mem.fits(C), memory_GB=_memory(mem, C),
            tokens_per_s_per_gpu=tps * C / self.req.gpus, tpot_ms=step_ms / tau, itl_ms=step_ms, **extra)

    def point(self, C: int, budget: int | None = None) -> Point:
        """The point at concurrency C: the request's budget (or the best of the candidates for
        'auto'), or exactly `budget` when given (0 = no speculation)."""
        r = self.req
        off = r.spec != "none" and r.spec_off_above is not None and C > r.spec_off_above
        if r.spec == "none" or budget == 0 or off:
            mem = memory_use(self.model, self.gpu, self.layout, r.context)
            if not mem.fits(C):
                return self._unfit(C, mem, 0)
            est, tau = self._estimate(C, 0)
            note = {"budget_note": f"speculation off above batch size {r.spec_off_above} (--spec-off-above)"} if off else {}
            return self._point(C, est, tau, 0, mem, **note)
        auto = r.budget == "auto" and budget is None
        budgets = (budget,) if budget is not None else BUDGET_CANDIDATES if r.budget == "auto" else (r.budget,)
        if r.spec == "chain" and auto:
            budgets = (self.model.drafter.block_size - 1,)
        curve = []
        for b in ((0,) + tuple(budgets)) if auto else budgets:
            mem = memory_use(self.model, self.gpu, self.layout, r.context, spec_tokens=b + 1 if b else 0, drafter=b > 0)
            if not mem.fits(C):
                curve.append((BudgetPoint(budget=b, fits_in_memory=False), None, None))
                continue
            est, tau = self._estimate(C, b)
            curve.append((BudgetPoint(budget=b, tau=tau, step_ms=est.step_us / 1e3,
                                      tokens_per_s_per_stream=tau / est.step_us * 1e6, fits_in_memory=True), est, mem))
        ok = [c for c in curve if c[0].fits_in_memory]
        if not ok:
            b0 = budgets[0]  # the note's figures are those of the smallest tree tried, drafter and tree tokens included
            return self._unfit(C, memory_use(self.model, self.gpu, self.layout, r.context, spec_tokens=b0 + 1, drafter=True), b0)
        best, est, mem = max(ok, key=lambda c: c[0].tokens_per_s_per_stream)
        spec_fits = any(c[0].budget > 0 for c in ok)
        note = None
        if auto:
            if best.budget > 0:
                note = f"best budget {best.budget} of {[c[0].budget for c in ok]}"
            elif spec_fits:
                note = "no speculation is fastest at this concurrency"
            else:
                m = memory_use(self.model, self.gpu, self.layout, r.context, spec_tokens=budgets[0] + 1, drafter=True)
                note = (f"speculation does not fit at this concurrency: with the drafter and the smallest "
                        f"tree (budget {budgets[0]}) weights {m.weights_GB:.1f} GB + KV {m.kv_GB(C):.1f} GB "
                        f"> usable {m.usable_GB:.1f} GB per GPU")
        return self._point(C, est, best.tau, best.budget, mem, budget_curve=[c[0] for c in curve], budget_note=note,
                           speculation_fits=spec_fits)

    def _unfit(self, C: int, mem, budget: int) -> Point:
        return Point(concurrency=C, fits_in_memory=False, budget=None, memory_GB=_memory(mem, C),
                     note=f"does not fit: weights {mem.weights_GB:.1f} GB + KV {mem.kv_GB(C):.1f} GB > usable "
                          f"{mem.usable_GB:.1f} GB per GPU")

    def projection(self) -> Projection:
        r = self.req
        mem0 = memory_use(self.model, self.gpu, self.layout, r.context)
        if mem0.weights_GB > mem0.usable_GB:
            raise ProjectionError(
                f"{self.model.name} does not fit on {r.gpus}× {self.gpu.name}: weights {mem0.weights_GB:.1f} GB "
                f"per GPU > usable {mem0.usable_GB:.1f} GB; use more GPUs")
        points = [self.point(C) for C in r.concurrency]
        p = self.profile.provenance
        m = self.machine
        return Projection(
            target=Target(gpu=self.gpu.name, display_name=self.gpu.display_name, n_gpus=r.gpus,
                          memory_kind=self.gpu.memory.kind, link=self.link.name if self.link else None,
                          link_kind=self.link.kind if self.link else None),
            model=self.model.name, parallel=r.parallel, context=r.context, spec=r.spec, graphs=r.graphs,
            tree_build=r.tree_build if r.spec == "ddtree" else None,
            acceptance=Acceptance(source=self.acc.kind, description=self.acc.description, measured=self.acc.measured,
                                  sigma=self.acc.sigma_note) if self.acc else None,
            profile=ProfileInfo(kind=p.kind, gpu_name=p.gpu_name, gpu_spec=p.gpu_spec, timestamp=p.timestamp,
                                path=self.resolved.profile_path,
                                label=self.profile.label),
            self_check=SelfCheck(**{k: v for k, v in self.check.items() if k != "points"}),
            observed=self.observed,
            describes=self.describes(),
            calibration=None if self.calibration is None else {
                "engine": self.calibration.engine, "profile": self.calibration.profile,
                "machines": self.calibration.machines, "n_points": len(self.calibration.points),
                "loo_median_abs_err": self.calibration.loo_median_abs_err,
                "factors": {f.name: {"value": f.value, "sigma_post": f.sigma_post, "determined": f.determined}
                            for f in self.calibration.factors},
                "warnings": self.calibration.warnings},
            max_concurrency_that_fits=mem0.max_concurrency,
            rules={cls: law.rule for cls, law in m.laws.items()} | {
                "all_reduce": m.all_reduce.rule if m.all_reduce else None,
                "all_to_all": m.all_to_all.rule if m.all_to_all else None,
                "overheads": m.overheads.rule,
                "compute_dtypes": "; ".join(
                    f"{dt}: target {dt}/bf16 peak ratio x {eff:.3f}, the profile GPU's measured {dt} GEMM fraction of "
                    f"peak over bf16's" for dt, eff in m.dtype_efficiency.items()) or "peak ratios"},
            points=points, layout_notes=sanity.layout_notes(self.model, r.parallel, r.gpus) or None)

    def run(self) -> dict:
        """The projection as its JSON dict (for callers that predate `projection()`)."""
        return self.projection().to_dict()


def _memory(mem, C: int) -> MemoryGB:
    return MemoryGB(weights=mem.weights_GB, kv=mem.kv_GB(C), usable=mem.usable_GB)
