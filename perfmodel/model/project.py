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
from perfmodel.model.calibration import ADDITIVE, HOST, Factors, calibrated, factors_of, projection_sigma, scaled_tau
from perfmodel.model.layers import Layout
from perfmodel.model.machine import Machine, build_machine
from perfmodel.model.memory import MIN_RESERVE_FRACTION, RESERVE_FRACTION, memory_use
from perfmodel.model.resolved import Resolved
from perfmodel.model.result import (
    Acceptance,
    BudgetPoint,
    Interval,
    MemoryGB,
    Point,
    ProfileInfo,
    Projection,
    SelfCheck,
    Serving,
    SpecSplit,
    StepResult,
    Target,
)
from perfmodel.model.step import Z90, StepEstimate, step_estimate
from perfmodel.profile import Profile
from perfmodel.scenario import layout_memory_hint

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
        self._uncalibrated: Machine | None = None  # kept to price the unpinned factors' moves (`_unpinned`)
        if self.calibration is not None and machine is None:  # a variant's machine is calibrated already
            self._uncalibrated = self.machine if whatif is None else None
            self.machine = calibrated(self.machine, self.factors)
        if whatif is not None:
            self.machine = whatif(self.machine)
        self._moved: dict[str, Machine] = {}

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

    def _unpinned_host_us(self, est: StepEstimate) -> float:
        """The posterior σ (µs) of an engine host term the calibration did not pin and fitted at
        0 µs: the step carries no such term, so its σ is in no term's; it can only add time, so it
        widens the interval's slow side."""
        if self.calibration is None or est.breakdown_us.get("engine_host", 0.0) > 0:
            return 0.0
        f = next((f for f in self.calibration.factors if f.name == HOST), None)
        return projection_sigma(f) if f is not None and not f.determined else 0.0

    def _interval(self, est: StepEstimate, tau: float, tau_sigma: float) -> dict:
        """90% intervals: the step's (term σ and self-check error; under a calibration the term σ
        are the factors' posterior σ, `calibration.calibrated`, and an unpinned engine host term
        adds its σ on the slow side), and tok/s combining the step's and τ's relative errors in
        quadrature (in log space, so that with a known τ it is exactly τ over the step interval);
        `tau_share`: τ's share of that spread."""
        err = self.model_error()
        sigma = math.hypot(est.sigma_us, err * est.step_us)
        lo = max(est.step_us - Z90 * sigma, 1e-3)
        hi = est.step_us + Z90 * math.hypot(sigma, self._unpinned_host_us(est))
        iv = combine_intervals(tau / est.step_us * 1e6, est.step_us, lo, hi, tau, tau_sigma, Z90)
        return {"step_ms": [lo / 1e3, hi / 1e3], "tokens_per_s_per_stream": list(iv.tokens_per_s), "tau": list(iv.tau),
                "tau_share": iv.tau_share}

    def _tau_sigma(self, budget: int, tau: float) -> tuple[float, bool]:
        """τ's 1σ at a speculative budget (> 0) and whether τ is fitted to data rather than
        modelled. A calibration whose points pinned τ down (a determined `tau` factor) gives its
        posterior σ (relative, on the calibrated τ); otherwise the acceptance source's own σ."""
        f = next((f for f in self.calibration.factors if f.name == "tau"), None) if self.calibration is not None else None
        if f is not None and f.determined:
            return tau * f.sigma_post, True
        if f is not None:  # fitted, not pinned: the wider of its σ and the acceptance source's own
            return max(self.acc.tau_sigma(budget), tau * projection_sigma(f)), False
        return self.acc.tau_sigma(budget), bool(self.acc.measured)

    UNPINNED_STEP = 0.05  # log move of a factor to price what the step owes it

    def _unpinned(self, C: int, budget: int, est: StepEstimate) -> dict[str, float] | None:
        """For a calibrated projection: each factor the calibration did not pin (engine host and τ
        apart), with the elasticity of this point's step to it (d ln step / d ln factor: the share
        of the step it scales; negative for a bandwidth), where |elasticity| ≥ 1%."""
        if self._uncalibrated is None:
            return None
        out = {}
        for f in self.calibration.factors:
            if f.determined or f.name in (*ADDITIVE, "tau"):
                continue
            m = self._moved.get(f.name)
            if m is None:
                k = self.factors.get(f.name) * math.exp(self.UNPINNED_STEP)
                moved = Factors(values=self.factors.values | {f.name: k}, sigma=self.factors.sigma, gpus=self.factors.gpus)
                m = self._moved[f.name] = calibrated(self._uncalibrated, moved)
            e2, _ = self.variant(machine=m)._estimate(C, budget)
            el = (math.log(e2.step_us) - math.log(est.step_us)) / self.UNPINNED_STEP
            if abs(el) >= 0.01:
                out[f.name] = el
        return dict(sorted(out.items(), key=lambda kv: (-abs(kv[1]), kv[0])))

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
            tokens_per_s_per_gpu=tps * C / self.req.gpus, tpot_ms=step_ms / tau, itl_ms=step_ms,
            notes=self._round_notes(C), **extra)

    def _round_notes(self, C: int) -> list[str] | None:
        """Why this point can serve fewer tokens per second in all than a smaller concurrency: with
        attention data-parallel over d GPUs, C not a multiple of d puts ceil(C/d) sequences on the
        busiest GPU and fewer on the others, and the step waits for the busiest GPU's attention
        (and its share of the experts' tokens), so C = k*d + 1 costs a step of (k+1)*d sequences."""
        d = self.layout.dp_attn
        if d <= 1 or C <= d or C % d == 0:
            return None
        busiest = -(-C // d)
        return [f"attention is data-parallel over {d} GPUs: {C} sequences put {busiest} on the busiest GPU and "
                f"{C // d} on others; the step waits for the busiest GPU's attention, as at {busiest * d} sequences "
                f"(a multiple of {d} balances them)"]

    def point(self, C: int, budget: int | None = None) -> Point:
        """The point at concurrency C: the request's budget (or the best of the candidates for
        'auto'), or exactly `budget` when given (0 = no speculation)."""
        r = self.req
        off = r.spec != "none" and r.spec_off_above is not None and C > r.spec_off_above
        if r.spec == "none" or budget == 0 or off:
            mem = memory_use(self.model, self.gpu, self.layout, r.context)
            queued = not mem.fits(C) and self._serving_queues(mem)
            if not mem.fits(C) and not queued:
                return self._unfit(C, mem, 0)
            est, tau = self._estimate(C, 0)
            note = {"budget_note": f"speculation off above batch size {r.spec_off_above} (--spec-off-above)"} if off else {}
            if queued:
                note["note"] = (f"KV of {C} sequences at {r.context} tokens: weights {mem.weights_GB:.1f} GB + KV "
                                f"{mem.kv_GB(C):.1f} GB > usable {mem.usable_GB:.1f} GB per GPU; an engine holds at most "
                                f"{mem.max_concurrency} such sequences at once and queues the rest, as the serving figures "
                                "simulate (KV-limited)")
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
            unfit = [c[0].budget for c in curve if not c[0].fits_in_memory]
            if best.budget > 0:
                note = f"best budget {best.budget} of {[c[0].budget for c in ok]}" + (
                    f"; budget(s) {unfit} do not fit in memory at this concurrency" if unfit else "")
            elif spec_fits:
                note = "no speculation is fastest at this concurrency"
            else:
                m = memory_use(self.model, self.gpu, self.layout, r.context, spec_tokens=budgets[0] + 1, drafter=True)
                note = (f"speculation does not fit at this concurrency: with the drafter and the smallest "
                        f"tree (budget {budgets[0]}) weights {m.weights_GB:.1f} GB + KV {m.kv_GB(C):.1f} GB "
                        f"> usable {m.usable_GB:.1f} GB per GPU")
        return self._point(C, est, best.tau, best.budget, mem, budget_curve=[c[0] for c in curve], budget_note=note,
                           speculation_fits=spec_fits)

    def _serving_queues(self, mem) -> bool:
        """Whether a point whose C sequences' KV does not fit beside the weights is still served:
        whole requests (--isl/--osl) under an engine, which admits what its KV pool holds and queues
        the rest rather than refusing (vLLM, SGLang and TRT-LLM schedulers alike; the serving
        simulation's KV pool, `serving.simulate`), where the weights fit with room for one sequence."""
        r = self.req
        return (r.isl is not None or bool(self.resolved.lengths)) and mem.max_concurrency >= 1

    # --------------------------------------------------------------- any batch
    def batch(self, batch) -> StepResult:
        """One forward pass of `batch` (`layers.Batch`: decode, verify and prefill groups) on the
        target; with speculation on, the drafter runs for the verify groups (and DDTree builds
        their trees). Interval: the terms' σ and the model's own error, as a decode point's."""
        from perfmodel.model.layers import Verify
        from perfmodel.model.step import batch_estimate

        r = self.req
        widths = [g.width for g in batch.groups if isinstance(g, Verify)]
        draft = r.spec != "none" and bool(widths)
        est = batch_estimate(self.model, self.machine, self.layout, batch, graph=r.graphs, draft=draft,
                             tree_budget=max(widths) - 1 if draft and r.spec == "ddtree" else 0, tree_impl=r.tree_build)
        sigma = math.hypot(est.sigma_us, self.model_error() * est.step_us)
        tokens = sum(g.n * (g.tokens if g.kind == "prefill" else getattr(g, "width", 1)) for g in batch.groups)
        desc = ", ".join({"decode": lambda g: f"decode {g.n}@{g.context}", "verify": lambda g: f"verify {g.n}x{g.width}@{g.context}",
                          "prefill": lambda g: f"prefill {g.n}x{g.tokens}@{g.prefix}"}[g.kind](g) for g in batch.groups)
        return StepResult(batch=f"{desc}; logits {batch.logits}", step_ms=est.step_us / 1e3,
                          breakdown_ms={k: v / 1e3 for k, v in sorted(est.breakdown_us.items(), key=lambda kv: -kv[1])},
                          interval={"step_ms": [max(est.step_us - Z90 * sigma, 1e-3) / 1e3, (est.step_us + Z90 * sigma) / 1e3]},
                          bottleneck=est.bottleneck, n_kernels=est.n_kernels, tokens=tokens,
                          assumptions=list(est.assumptions), describes=self.describes())

    # --------------------------------------------------------------- whole requests
    def _serving(self, pt: Point) -> Point:
        """The point with its serving figures: whole requests of the request's lengths at its
        concurrency under the engine's continuous batching (`serving.simulate`), speculating at
        the point's budget and τ. Intervals: the simulation's (the steps' correlated σ) and the
        model's own error, in quadrature."""
        from perfmodel.model.serving import SpecDecode, Workload, engine_defaults, simulate

        r, rs = self.req, self.resolved
        eng = engine_defaults(r.engine, self.gpu).with_settings(**r.server_settings())
        spec = None
        if pt.budget:
            spec = SpecDecode(width=pt.budget + 1, tau=min(pt.tau, pt.budget + 1.0), draft=True,
                              tree_budget=pt.budget if r.spec == "ddtree" else 0)
        wl = Workload(isl=r.isl, osl=r.osl, lengths=rs.lengths, min_length_ratio=r.min_length_ratio, seed=r.seed,
                      concurrency=pt.concurrency, request_rate=r.request_rate, prefix_hit=r.prefix_hit, spec=spec)
        sp = simulate(self.model, self.machine, self.layout, wl, eng, graph=r.graphs, tree_impl=r.tree_build)
        err = self.model_error()

        def widen(key: str, v: float) -> list[float]:
            iv = sp.interval[key]
            lo, hi = math.log(v / iv.lo) if iv.lo > 0 else 0.0, math.log(iv.hi / v) if v > 0 else 0.0
            e = math.log1p(err)
            return [v * math.exp(-math.hypot(lo, e)), v * math.exp(math.hypot(hi, e))]

        stat = lambda s: {"mean": s.mean, "median": s.median, "p90": s.p90, "p99": s.p99}  # noqa: E731
        serving = Serving(
            engine=eng.name, max_batched_tokens=eng.max_batched_tokens, n_requests=sp.n_requests,
            ttft_ms=stat(sp.ttft_ms), tpot_ms=stat(sp.tpot_ms), itl_ms=stat(sp.itl_ms), e2e_latency_ms=stat(sp.e2e_latency_ms),
            tokens_per_s=sp.tokens_per_s, tokens_per_s_per_gpu=sp.tokens_per_s_per_gpu,
            tokens_per_s_per_user=sp.tokens_per_s_per_user,
            interval={"ttft_ms": widen("ttft_ms", sp.ttft_ms.median), "tpot_ms": widen("tpot_ms", sp.tpot_ms.mean),
                      "e2e_latency_ms": widen("e2e_latency_ms", sp.e2e_latency_ms.median),
                      "tokens_per_s": widen("tokens_per_s", sp.tokens_per_s),
                      "tokens_per_s_per_gpu": widen("tokens_per_s_per_gpu", sp.tokens_per_s_per_gpu),
                      "tokens_per_s_per_user": widen("tokens_per_s_per_user", sp.tokens_per_s_per_user)},
            kv_limited=sp.kv_limited, mean_decode_batch=sp.mean_decode_batch, assumptions=sp.assumptions)
        return pt.model_copy(update={"serving": serving})

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
                f"per GPU > usable {mem0.usable_GB:.1f} GB; use more GPUs" + layout_memory_hint(r.parallel))
        points = [self.point(C) for C in r.concurrency]
        if self._uncalibrated is not None:
            points = [pt.model_copy(update={"unpinned_factors": self._unpinned(pt.concurrency, pt.budget,
                                                                                self._estimate(pt.concurrency, pt.budget)[0])})
                      if pt.fits_in_memory else pt for pt in points]
        if r.isl is not None or self.resolved.lengths:
            points = [self._serving(p) if p.step_ms is not None else p for p in points]
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
                "warnings": self.calibration.warnings,
                "undetermined": [u.model_dump() for u in self.calibration.undetermined]},
            max_concurrency_that_fits=mem0.max_concurrency,
            rules={cls: law.rule for cls, law in m.laws.items()} | {
                "all_reduce": m.all_reduce.rule if m.all_reduce else None,
                "all_to_all": m.all_to_all.rule if m.all_to_all else None,
                "overheads": m.overheads.rule,
                "compute_dtypes": "; ".join(
                    f"{dt}: target {dt}/bf16 peak ratio x {eff:.3f}, the profile GPU's measured {dt} GEMM fraction of "
                    f"peak over bf16's" for dt, eff in m.dtype_efficiency.items()) or "peak ratios"},
            points=points, layout_notes=sanity.layout_notes(self.model, r.parallel, r.gpus) + _memory_notes(mem0) or None)

    def run(self) -> dict:
        """The projection as its JSON dict (for callers that predate `projection()`)."""
        return self.projection().to_dict()


def _memory_notes(mem) -> list[str]:
    """What the projection assumes of the memory share, where its default does not hold the weights."""
    if mem.weights_GB <= mem.usable_GB * (1 - RESERVE_FRACTION) / (1 - MIN_RESERVE_FRACTION):
        return []
    return [f"weights {mem.weights_GB:.1f} GB per GPU are above the default {1 - RESERVE_FRACTION:.0%} memory share: priced "
            f"as an engine told a memory fraction of {1 - MIN_RESERVE_FRACTION:.2f} runs them (SGLang --mem-fraction-static, "
            f"vLLM --gpu-memory-utilization), {mem.usable_GB - mem.weights_GB:.1f} GB per GPU left for the KV cache"]


def _memory(mem, C: int) -> MemoryGB:
    return MemoryGB(weights=mem.weights_GB, kv=mem.kv_GB(C), usable=mem.usable_GB)
