"""`perfmodel calibrate`: fit the model to figures from a serving engine.

Input: a YAML of observed points (`CalibrationInput`; `perfmodel schema calibration-input`),
or a benchmark file of vLLM's `vllm bench serve --save-result` or SGLang's `bench_serving`.
Output: `calib.json` (`CalibrationResult`; `perfmodel schema calibration`), which `project`,
`report` and `validate` take with `--calibration`.

The fit (shared/design notes: BLIS, aiconfigurator, Vidur, KernelSight all keep a physical
skeleton and learn a few multipliers): one factor per group of terms
(`perfmodel.model.calibration`), fitted in log space with `scipy.optimize.least_squares`.
Each log-factor has a Gaussian prior centred on 0 (factor 1) whose σ is the transfer-rule
uncertainty the model already carries for that term on the points' machines; the engine host
term (µs, ≥ 0) has a prior centred on 0 with σ `HOST_PRIOR_US`. Each observation enters as
log(predicted / observed) / `rel_sigma` (default 3%, the spread of repeated serving
benchmarks). The posterior σ comes from the Jacobian at the optimum; a factor whose posterior
σ is not below `DETERMINED` × its prior σ is reported as not pinned by the data.

Points from different machines share the factors: that is what lets a TP and an EP point on
one link separate collectives from floors, or C=1 and large C separate floors from bandwidth.
Each point's leave-one-out error (fit on the others, predict it) says how far to trust the
result.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from perfmodel.calibration_schema import (  # noqa: F401 (the file schemas, re-exported)
    ADDITIVE,
    ADDITIVE_MAX,
    CAUCHY_SCALE_SIGMAS,
    DRAFT_HOST,
    ENGINE_STEP,
    FACTOR_MAX,
    FAMILIES,
    FIGURES,
    GROUPS,
    HOST,
    HOST_MAX_US,
    PREFILL_LAUNCH,
    PREFILL_WORK,
    REL_SIGMA,
    TTFT_MS,
    TTFT_STEPS,
    BenchRecord,
    CalibrationInput,
    CalibrationResult,
    FactorResult,
    ObservedPoint,
    PointResult,
    Undetermined,
)
from perfmodel.errors import ProjectionError
from perfmodel.inputs import InputError, NotJSON, load_json, load_yaml, parse_json, read_text, validated, validation_line
from perfmodel.model.calibration import (
    OUTSIDE,
    VERIFY,
    Factors,
    calibrated,
    factors_of,
    group_of,
    link_family,
    scaled_tau,
)
from perfmodel.model.layers import Layout
from perfmodel.model.machine import Machine, build_machine
from perfmodel.model.memory import memory_use
from perfmodel.model.project import uncalibrated_description  # noqa: F401 (re-exported)
from perfmodel.model.step import step_estimate
from perfmodel.profile import Profile
from perfmodel.scenario import layout_memory_hint, server_settings

HOST_PRIOR_US = 1000.0
# Per draft forward: vLLM's EAGLE-3 TPOT table (vllm-project/vllm#20780) leaves 0.55-0.77 ms per
# draft forward to the engine once the heads are priced from their shapes
# (evidence/acceptance-by-workload/check.txt, section 2); 1 ms spans it.
DRAFT_HOST_PRIOR_US = 1000.0
# The first token's wait (TTFT_STEPS): InferenceX's TensorRT-LLM servers that batch-wait hold a
# prompt up to 20 or 40 iterations (SemiAnalysisAI/InferenceX, its 70B and DeepSeek-R1 trtllm
# scripts); 10 steps spans none to about half of the shorter one.
TTFT_STEPS_PRIOR = 10.0
# The first token's wait in ms (TTFT_MS): tokenising, the scheduler's receive and the HTTP and
# streaming path of one request; uncalibrated SGLang TTFT on aiconfigurator's H200 rows falls short
# by 150-250 ms whatever the prompt and load (evidence/engine-calibrations/); 300 ms spans it.
TTFT_MS_PRIOR = 300.0
# Per kernel of a step with prompt tokens (PREFILL_LAUNCH): a one-token DeepSeek-V3 prefill in SGLang
# takes 82.6 ms eager against 23.1 ms from a CUDA graph (sgl-project/sglang#12160), some 40 us for
# each of its ~1,500 kernels; 100 us spans it.
PREFILL_LAUNCH_PRIOR_US = 100.0
# A prompt step's GPU work (PREFILL_WORK), log-space 1σ (e^1: a factor of 2.7 either way): the
# measured TTFT grows per prompt token 1.48x as fast as the imported step's at the median of
# aiconfigurator's silicon groups, 0.90x and 2.20x at the quartiles (calibration_schema).
PREFILL_WORK_PRIOR = 1.0
NAMED_ONLY = (PREFILL_LAUNCH, PREFILL_WORK)  # fitted only when a calibration input names them in `factors`
DETERMINED = 0.7  # posterior σ below this fraction of the prior σ: the data pinned the factor
TAU_PRIOR = 0.15  # acceptance models' spread against published τ (model/acceptance.py)


class CalibrationError(ValueError):
    """Bad calibration input; the CLI prints it as one line and exits 2."""


# ---------------------------------------------------------------- points → predictions
@dataclass
class Prepared:
    """One observed point resolved against specs and profile: everything the fit re-prices."""

    index: int
    point: ObservedPoint
    model: object
    machine: Machine
    layout: Layout
    q: int
    tau: float
    tau_cap: float
    draft: bool
    tree_budget: int
    keys: tuple[str, ...]  # factors this point depends on
    prior: dict[str, float]  # prior σ (log) of each of its factors
    memory_note: str | None = None  # measured, though the memory model says it does not fit

    @property
    def scenario(self) -> str:
        """What the prediction depends on: the point's setup and the unit of its figure (not its
        value, label or noise): points written twice share it."""
        p = self.point
        return p.model_dump_json(exclude={"label", "rel_sigma", *FIGURES}) + p.figure[0]

    def estimate(self, f: Factors, mach: Machine | None = None, memo: dict | None = None):
        p = self.point
        return step_estimate(self.model, mach or calibrated(self.machine, f), self.layout, p.concurrency, self.q,
                             p.context, graph=p.graphs, lm_head=p.lm_head, n_layers=p.n_layers, draft=self.draft,
                             tree_budget=self.tree_budget, tree_impl=p.tree_build, host=p.host, memo=memo)

    def simulate(self, f: Factors, mach: Machine | None = None, memo: dict | None = None):
        """Whole requests of the point's isl/osl at its concurrency under its engine's scheduler
        (`serving.simulate`, `vllm bench serve`'s closed loop: 10 x C requests, C in flight) on the
        calibrated machine. The requests' times are simulated once per (setup, factor values but
        the first-token wait), shared by the point's ttft_ms and tpot_ms and by every wait the fit
        tries (the wait moves the figures, not the schedule: `serving.figures`); the steps' kernel
        times once per (setup, factor values but the engine's host terms: `_kernel_shared`)."""
        from perfmodel.model.serving import SpecDecode, StepPricer, Workload, engine_defaults, figures, request_times

        if mach is None:
            mach, memo = _calibrated_shared(self.machine, f)
        shared = _kernel_shared(self.machine, f)
        p = self.point
        setup = p.model_dump_json(exclude={"label", "rel_sigma", *FIGURES})
        key = (setup, *(f.get(k) for k in (HOST, DRAFT_HOST, PREFILL_LAUNCH, PREFILL_WORK)))
        times = shared.times.get(key)
        if times is None:
            eng = engine_defaults(p.engine or "vllm", mach.gpu).with_settings(**server_settings(p))
            spec = None
            if self.draft:
                tau = scaled_tau(self.tau, f, self.tau_cap)
                spec = SpecDecode(width=self.q, tau=min(tau, float(self.q)), draft=True, tree_budget=self.tree_budget)
            wl = Workload(isl=p.isl, osl=p.osl, min_length_ratio=p.min_length_ratio, concurrency=p.concurrency, spec=spec)
            pricer = StepPricer(self.model, mach, self.layout, graph=p.graphs, spec=spec, tree_impl=p.tree_build,
                                terms=shared.terms.setdefault((setup, f.get(DRAFT_HOST)), {}))
            pricer.memo = shared.memo  # the op terms, shared with the fit's other points and factor values
            if len(shared.times) > TIMES_KEPT:
                shared.times.clear()
            times = shared.times[key] = request_times(self.model, mach, self.layout, wl, eng, graph=p.graphs,
                                                      tree_impl=p.tree_build, pricer=pricer)
        return figures(times, mach.overheads.engine_ttft_steps, mach.overheads.engine_ttft_ms)

    def predict(self, f: Factors) -> float:
        """The point's figure, in its own unit."""
        mach, memo = _calibrated_shared(self.machine, f)
        p = self.point
        name, _ = p.figure
        if p.serving:
            sp = self.simulate(f, mach, memo)
            return getattr(getattr(sp, name), p.statistic)
        step = self.estimate(f, mach, memo).step_us
        tau = scaled_tau(self.tau, f, self.tau_cap) if self.draft else 1.0
        if p.isl is not None:  # whole requests: one prefill forward of C x isl tokens, then osl steps
            pre = step_estimate(self.model, mach, self.layout, p.concurrency, p.isl, 0, graph=p.graphs).step_us
            return p.concurrency * p.osl / ((pre + p.osl * step / tau) / 1e6)
        return {"step_ms": step / 1e3, "tpot_ms": step / tau / 1e3,
                "tokens_per_s_per_stream": tau / step * 1e6,
                "tokens_per_s": tau / step * 1e6 * p.concurrency}[name]


_SHARED: dict[tuple, tuple[Machine, Machine]] = {}  # (machine, factor values) -> the calibrated machine, within a fit
_KERNEL: dict[tuple, _Shared] = {}  # (machine, factor values but the engine's additive terms) -> what they share
# The factors that move no op's price (the engine's time per step and per draft forward, added to
# the step; its prompt steps' work scale, applied to the priced step; its first-token wait, added to
# the TTFT): every value of them shares the op terms.
NOT_OPS = ENGINE_STEP
TIMES_KEPT = 2048  # simulated benchmarks kept per machine (each holds every request's times)


@dataclass
class _Shared:
    """What the calibrated machines of one machine share while only the engine's additive terms
    (`NOT_OPS`) differ: the priced ops (`step.batch_estimate`'s memo), the serving steps' prices but
    for the host time per step (`serving.StepPricer`'s terms, by point setup and draft host time)
    and the simulated requests' times (by point setup and host times)."""

    machine: Machine
    memo: dict = field(default_factory=dict)
    terms: dict = field(default_factory=dict)
    times: dict = field(default_factory=dict)


def _kernel_shared(mach: Machine, f: Factors) -> _Shared:
    key = (id(mach), tuple((k, v) for k, v in f.values.items() if k not in NOT_OPS))
    hit = _KERNEL.get(key)
    if hit is None or hit.machine is not mach:
        if len(_KERNEL) > 64:
            _KERNEL.clear()
        hit = _KERNEL[key] = _Shared(mach)
    return hit


def _calibrated_shared(mach: Machine, f: Factors) -> tuple[Machine, dict]:
    """`calibrated(mach, f)`, computed once for all the points of a fit that run on the same
    machine (`prepare` hands them one Machine object) at the same factor values, with the memo
    of its priced ops (`step.batch_estimate`'s memo: the points' calls of one shape priced once,
    for every value of the engine's additive terms)."""
    key = (id(mach), tuple(f.values.items()))
    hit = _SHARED.get(key)
    if hit is None or hit[0] is not mach:
        if len(_SHARED) > 256:
            _SHARED.clear()
        hit = _SHARED[key] = (mach, calibrated(mach, f))
    return hit[1], _kernel_shared(mach, f).memo


class _Predictions:
    """The points' predictions within one `fit`, by scenario (`Prepared.scenario`) and by the values
    of the factors that scenario depends on (`Prepared.keys`): a point written twice is priced
    once, and a finite-difference step in a factor re-prices only the points that depend on it.
    The factors outside a point's keys do not move its prediction (`_keys` lists every group of
    its machine's laws, its link family, launch, τ where fitted and the host term)."""

    def __init__(self, keys: list[str]):
        self.col = {k: j for j, k in enumerate(keys)}
        self.keys = keys
        self.memo: dict[tuple, float] = {}

    def __call__(self, prep: Prepared, x) -> float:
        key = (prep.scenario, tuple(float(x[self.col[k]]) for k in prep.keys))
        v = self.memo.get(key)
        if v is None:
            v = self.memo[key] = prep.predict(_to_factors(prep.keys, key[1]))
        return v


def _where(i: int, p: ObservedPoint) -> str:
    return f"point {i} ({p.describe()})"


def prepare(i: int, p: ObservedPoint, profile: Profile, kernels: str = "perfmodel",
            machines: dict | None = None) -> Prepared:
    """A point resolved as `project` resolves a request (the same loading and checks), against
    `profile`; points on the same machine share one Machine through `machines`."""
    from perfmodel import request

    where = _where(i, p)
    try:
        if p.profile is not None:  # the point's own profile (e.g. its GPU's imported per-op data)
            profile = request.resolve_profile(p.profile)
        rs = request.resolve_specs(p.request(), profile=profile)
    except (ProjectionError, ValueError) as e:
        raise CalibrationError(f"{where}: {str(e).splitlines()[0]}") from None
    gpu, model, link = rs.gpu, rs.model, rs.link
    mkey = (gpu.name, p.hw_file, p.gpus, link.name if link else None, p.graphs, kernels, p.profile)
    try:
        mach = (machines or {}).get(mkey) or build_machine(gpu, p.gpus, link, profile, rs.source_gpu, rs.mk,
                                                            1.0, p.graphs, kernels, fallback_gpu=rs.fallback_gpu)
    except ValueError as e:
        raise CalibrationError(f"{where}: {str(e).splitlines()[0]}") from None
    if machines is not None:
        machines[mkey] = mach
    lay = Layout(p.parallel, p.gpus)
    draft = p.spec != "none"
    budget = (p.budget or model.drafter.block_size - 1) if draft else 0
    q = budget + 1 if draft else (p.q or 1)
    context = p.isl + p.osl if p.serving else p.context  # a request's longest context
    mem = memory_use(model, gpu, lay, context, spec_tokens=q if draft else 0, drafter=draft)
    memory_note = None
    if not mem.fits(p.concurrency):  # it ran: the memory model is what is off, by at least this much
        over = mem.weights_GB + mem.kv_GB(p.concurrency) - mem.usable_GB
        memory_note = (f"{where} was measured, yet the memory model says it does not fit: weights {mem.weights_GB:.1f} GB "
                       f"+ KV {mem.kv_GB(p.concurrency):.1f} GB > usable {mem.usable_GB:.1f} GB per GPU, so the memory "
                       f"model is off by at least {over:.1f} GB per GPU ({over / mem.usable_GB:.0%} of usable) for this "
                       f"setup (a KV dtype, a weight dtype or the usable fraction); the point is fitted"
                       + layout_memory_hint(p.parallel))
    tau, cap = 1.0, 1.0
    if draft:
        tau, cap = float(rs.acc.tau(budget)), float(min(budget + 1, model.drafter.block_size))
    chain = draft and model.drafter.kind != "dflash"  # k draft forwards per step: a host cost per forward
    keys, prior = _keys(model, mach, draft and p.acceptance_length is None, q, chain)  # a given acceptance length pins τ
    if p.serving and p.ttft_ms is not None:  # the first token's wait moves a TTFT only
        prior[TTFT_STEPS] = TTFT_STEPS_PRIOR
        prior[TTFT_MS] = TTFT_MS_PRIOR
    if p.serving:  # a serving point runs its prompts' steps
        prior[PREFILL_LAUNCH] = PREFILL_LAUNCH_PRIOR_US
        prior[PREFILL_WORK] = PREFILL_WORK_PRIOR
    keys = tuple(sorted(prior))
    prep = Prepared(i, p, model, mach, lay, q, tau, cap, draft, budget if p.spec == "ddtree" else 0, keys, prior,
                    memory_note)
    _check_physics(prep, gpu)
    if p.serving:
        try:
            prep.simulate(Factors())
        except ValueError as e:  # a request the KV pool cannot hold, a prompt above a scheduler's budget
            raise CalibrationError(f"{where}: {str(e).splitlines()[0]}") from None
    return prep


# How far an engine's kernels may sit from perfmodel's own on the same GPU (log-space 1σ),
# combined in quadrature with the transfer rules' uncertainty. Floors: production decode
# kernels' batch-1 latencies are 2-4x below perfmodel's (perfmodel/data/production_floors.yaml:
# FlashInfer MLA ~12 us, FlashMLA ~22 us, its source unverified; ours 30-45 us), and an engine's MoE path can be slower still
# (torch._grouped_mm: its moe samples in perfmodel/data/h200-sxm.json). Bandwidth: streaming kernels of mature engines
# reach 60-100% of read bandwidth where ours reach 85-100%. Collectives are NCCL on both
# sides: the link's own uncertainty alone. Graph nodes and launches: the same driver.
ENGINE_UNC = {"floor": 0.7, "bw": 0.3, "coll_lat": 0.0, "coll_bw": 0.0, "launch": 0.0}


def _prior(kind: str, transfer_rel: float) -> float:
    return math.hypot(math.log1p(transfer_rel), ENGINE_UNC[kind])


def _keys(model, mach: Machine, fit_tau: bool, q: int, chain: bool = False) -> tuple[tuple[str, ...], dict[str, float]]:
    """The factors a point depends on, each with its prior σ in log space: the transfer
    rules' own uncertainty on this machine, combined with ENGINE_UNC; the host terms' in µs."""
    prior: dict[str, float] = {}
    laws = dict(mach.laws)
    if q > 1:  # verification attention: its own factors
        laws |= {f"{c}.{VERIFY}": law for c, law in mach.laws.items() if c.startswith("attention") and "." not in c}
    for cls, law in laws.items():
        g = group_of(cls)
        if g == "moe" and model.moe is None:
            continue
        prior[f"floor.{g}"] = max(prior.get(f"floor.{g}", 0.0), _prior("floor", law.rel_unc_t0))
        prior[f"bw.{g}"] = max(prior.get(f"bw.{g}", 0.0), _prior("bw", law.rel_unc_bw))
    fam = link_family(mach.link.kind if mach.link else None)
    if fam and mach.all_reduce is not None:
        prior[f"coll_lat.{fam}"] = _prior("coll_lat", mach.all_reduce.rel_unc_lat)
        prior[f"coll_bw.{fam}"] = _prior("coll_bw", mach.all_reduce.rel_unc_bw)
    prior["launch"] = _prior("launch", mach.overheads.rel_unc_node)
    if fit_tau:
        prior["tau"] = math.log1p(TAU_PRIOR)
    prior[HOST] = HOST_PRIOR_US
    if chain:
        prior[DRAFT_HOST] = DRAFT_HOST_PRIOR_US
    return tuple(sorted(prior)), prior


def _check_physics(prep: Prepared, gpu) -> None:
    """An observation faster than the bytes the model must move allow at the GPU's datasheet
    bandwidth (no floors, no overheads) is impossible: say so rather than fit it."""
    from perfmodel.model.sanity import observed_floor_us

    p = prep.point
    context = p.isl if p.serving else p.context  # a serving point's decodes run at isl tokens at least
    min_step_us = observed_floor_us(prep.model, gpu, prep.layout, p.concurrency if not p.serving else 1, context, prep.q,
                                    p.n_layers, p.lm_head)
    tau_max = prep.tau_cap if prep.draft else 1.0
    name, obs = p.figure
    limit = {"step_ms": min_step_us / 1e3, "tpot_ms": min_step_us / tau_max / 1e3, "ttft_ms": min_step_us / 1e3,
             "tokens_per_s_per_stream": tau_max / min_step_us * 1e6,
             "tokens_per_s": tau_max / min_step_us * 1e6 * p.concurrency}[name]
    faster = obs > limit if name.startswith("tokens") else obs < limit
    if faster:
        raise CalibrationError(
            f"{_where(prep.index, p)}: {name} {obs:g} is faster than physics allows ({limit:.4g} at "
            f"{gpu.memory.bandwidth_GBps.value:g} GB/s for the {min_step_us * gpu.memory.bandwidth_GBps.value / 1e3:.3g} MB "
            f"the step must read per GPU)")


# ---------------------------------------------------------------- the fit
def _to_factors(keys: list[str], x, sigma: dict[str, float] | None = None, gpus=()) -> Factors:
    vals = {k: (float(v) if k in ADDITIVE else math.exp(float(v))) for k, v in zip(keys, x)}
    return Factors(values=vals, sigma=sigma or {}, gpus=tuple(gpus))


def _fit(preps: list[Prepared], keys: list[str], prior: dict[str, float], x0=None, pred: _Predictions | None = None,
         loss: str = "squares"):
    import numpy as np
    from scipy.optimize import least_squares

    pred = pred or _Predictions(keys)
    obs = [math.log(p.point.figure[1]) for p in preps]
    sig = [p.point.rel_sigma for p in preps]
    psig = np.array([prior[k] for k in keys])

    def resid(x):
        r = np.array([(math.log(max(pred(p, x), 1e-12)) - o) / s for p, o, s in zip(preps, obs, sig)])
        if loss == "soft_l1":  # the points' misses only (`calibration_schema.Loss`): the sum of squares is sum(rho(r^2))
            r = np.sign(r) * np.sqrt(2.0 * (np.sqrt(1.0 + r * r) - 1.0))
        elif loss == "cauchy":  # sum(c^2 log(1 + (r/c)^2)): squares within c sigma, a pull that fades beyond
            c = CAUCHY_SCALE_SIGMAS
            r = np.sign(r) * c * np.sqrt(np.log1p((r / c) ** 2))
        return np.concatenate([r, x / psig])

    lo = np.array([0.0 if k in ADDITIVE else -math.log(FACTOR_MAX) for k in keys])
    hi = np.array([ADDITIVE_MAX[k] if k in ADDITIVE else math.log(FACTOR_MAX) for k in keys])
    if x0 is None and loss == "cauchy":  # its pull fades far off, so it starts where soft_l1 ends
        x0 = _fit(preps, keys, prior, pred=pred, loss="soft_l1").x
    x0 = np.zeros(len(keys)) if x0 is None else np.clip(x0, lo, hi)
    sol = least_squares(resid, x0, bounds=(lo, hi), x_scale=np.maximum(psig, 1e-3), diff_step=1e-4,
                        xtol=1e-8, ftol=1e-8, max_nfev=400)
    return sol


def _restart_at_bound(sol, preps: list[Prepared], keys: list[str], prior: dict[str, float], pred: _Predictions,
                      loss: str = "squares"):
    """The fit again from its optimum with every host term it left at its 0 µs bound started at its
    prior σ, kept when that lowers the cost. Started at the bound, the solver can stop where a
    multiplicative factor took up what a host term explains better (vLLM's EAGLE-3 table: a
    bandwidth factor x0.59 at cost 17, where 0.64 ms per draft forward reaches cost 1)."""
    import numpy as np

    at_bound = [j for j, k in enumerate(keys) if k in ADDITIVE and sol.x[j] < 0.05]
    if not at_bound:
        return sol
    x0 = np.array(sol.x, dtype=float)
    x0[at_bound] = [prior[keys[j]] for j in at_bound]
    other = _fit(preps, keys, prior, x0=x0, pred=pred, loss=loss)
    return other if other.cost < sol.cost * (1 - 1e-6) else sol


def _solve(preps: list[Prepared], keys: list[str], prior: dict[str, float], pred: _Predictions, loss: str):
    """The fit of `preps` (`_fit`, then `_restart_at_bound`): the whole fit and each leave-one-out
    fit alike. A held-out fit started at the whole fit's optimum would carry the held-out points
    into it wherever the loss has more than one minimum (cauchy's pull fades far off)."""
    return _restart_at_bound(_fit(preps, keys, prior, pred=pred, loss=loss), preps, keys, prior, pred, loss)


# ---------------------------------------------------------------- what the points can tell apart
STEP_IN_PRIOR = 0.25  # finite-difference step of the sensitivities, in prior σ of each factor
COLLINEAR = 0.95  # |cos| of two factors' effects on the points above which the points fix only their combination


def sensitivities(preps: list[Prepared], keys: list[str], prior: dict[str, float], x, pred: _Predictions | None = None):
    """S[i, k]: how far a move of one prior σ in factor k moves point i (log of its figure), by
    central differences about x (forward from a bound: the host term at 0 µs). A factor outside a
    point's keys does not move it (`_Predictions`): 0 without pricing it."""
    import numpy as np

    pred = pred or _Predictions(keys)
    S = np.zeros((len(preps), len(keys)))
    for k, key in enumerate(keys):
        h = STEP_IN_PRIOR * prior[key]
        up, dn = np.array(x, dtype=float), np.array(x, dtype=float)
        up[k] += h
        dn[k] = max(dn[k] - h, 0.0) if key in ADDITIVE else dn[k] - h
        for i, p in enumerate(preps):
            if key in p.keys:
                S[i, k] = (math.log(pred(p, up)) - math.log(pred(p, dn))) / (up[k] - dn[k]) * prior[key]
    return S


def _varied(preps: list[Prepared]) -> dict[str, set]:
    return {"tokens": {p.point.concurrency * p.q for p in preps}, "context": {p.point.context for p in preps},
            "layout": {(p.point.parallel, p.point.gpus) for p in preps},
            "machine": {(p.machine.gpu.name, p.point.gpus, p.machine.link.name if p.machine.link else None) for p in preps}}


def identifiability(preps: list[Prepared], keys: list[str], prior: dict[str, float], S) -> tuple[list[Undetermined], list[str]]:
    """The factors the points cannot separate (`Undetermined` groups) and the warnings that say
    why in the user's terms: every point at one concurrency, one layout, one machine, more factors
    than points. Three kinds of group:
    - a floor and a bandwidth factor of one kernel group when every point runs one number of
      tokens per step (and, for attention, one context): their ratio in such a step is set by the
      kernels' shapes, so the points give their sum; points at other concurrencies separate them;
    - factors that move every point in the same proportions (|cos| of their columns of S ≥
      COLLINEAR): the points fix their combination, not each;
    - factors that move no point by more than the points' own noise (rel_sigma) per prior σ."""
    import numpy as np

    n, v = len(preps), _varied(preps)
    noise = min(p.point.rel_sigma for p in preps)
    infl = {k: float(np.linalg.norm(S[:, j])) for j, k in enumerate(keys)}
    strong = [k for k in keys if infl[k] >= noise]
    groups: list[Undetermined] = []
    one_c = len(v["tokens"]) == 1
    if one_c:
        c = next(iter(v["tokens"]))
        for g in GROUPS:
            pair = [f"floor.{g}", f"bw.{g}"]
            if not all(k in keys for k in pair) or not any(k in strong for k in pair):
                continue
            if g.startswith("attention") and len(v["context"]) > 1:
                continue  # contexts vary: attention's bytes move, its floors do not
            groups.append(Undetermined(factors=pair, why=f"every point runs {c} token{'s' if c != 1 else ''} per step: "
                                       f"{g} floors and {g} bandwidth move such steps together"))
    # factors whose effects on the points are parallel: one cluster per connected set
    cols = {k: S[:, j] / infl[k] for j, k in enumerate(keys) if k in strong}
    parent = {k: k for k in cols}

    def root(k):
        while parent[k] != k:
            k = parent[k]
        return k
    names = sorted(cols)
    for a_i, a in enumerate(names):
        for b in names[a_i + 1:]:
            if abs(float(cols[a] @ cols[b])) >= COLLINEAR:
                parent[root(b)] = root(a)
    clusters: dict[str, list[str]] = {}
    for k in names:
        clusters.setdefault(root(k), []).append(k)
    for members in sorted(clusters.values()):
        if len(members) > 1:
            groups.append(Undetermined(factors=members, why="they move every point in the same proportions: the points "
                                                            "fix their combination, not each"))
    weak = [k for k in keys if infl[k] < noise]
    if weak:
        groups.append(Undetermined(factors=weak, why=f"no point moves by more than its own {noise:.0%} noise when one of "
                                                     "these moves by its prior σ: they keep their prior"))

    warnings = []
    if one_c:
        c = next(iter(v["tokens"]))
        pts = sorted({p.point.concurrency for p in preps})
        warnings.append(f"every point is at {c} token{'s' if c != 1 else ''} per step (C={', '.join(map(str, pts))}): "
                        "the latency floors and the bandwidth of each kernel group move such steps together, so the points "
                        "cannot tell them apart; a point at a larger concurrency would")
    if len(v["layout"]) == 1 and any(k.startswith("coll_") for k in keys):
        par, g = next(iter(v["layout"]))
        warnings.append(f"every point runs one layout ({g}x {par}): collective latency, kernel floors, launch cost and "
                        "engine host time each add a fixed time to its steps, so the points fix their sum; a point of "
                        "another layout or GPU count would separate them")
    if len(v["machine"]) == 1:
        gpu, g, link = next(iter(v["machine"]))
        warnings.append(f"every point is on one machine ({g}x {gpu}{' over ' + link if link else ''}): the factors "
                        "are carried to other GPUs as the engine's, though the points cannot tell the engine's kernels "
                        "from this machine's")
    if len(keys) > n:
        warnings.append(f"{len(keys)} factors from {n} point{'s' if n != 1 else ''}: the points fix at most {n} "
                        f"combination{'s' if n != 1 else ''} of them; the rest is the priors'")
    return groups, warnings


def fit(inp: CalibrationInput, profile: Profile, profile_label: str) -> CalibrationResult:
    import numpy as np

    machines: dict = {}  # points on the same machine share one Machine (and its calibrated copies)
    _SHARED.clear()  # the previous fit's machines: none of this fit's
    _KERNEL.clear()
    preps = [prepare(i, q, profile, inp.kernels, machines) for i, p in enumerate(inp.points) for q in p.singles()]
    warnings = _duplicates(inp.points) + [p.memory_note for p in preps if p.memory_note]
    prior: dict[str, float] = {}
    for p in preps:
        for k, s in p.prior.items():
            prior[k] = max(prior.get(k, 0.0), s)
    if inp.factors is not None:  # fit only these; the others stay at 1 (0 µs)
        unknown = sorted(set(inp.factors) - set(prior))
        if unknown:
            raise CalibrationError(f"factors: {', '.join(unknown)} {'is' if len(unknown) == 1 else 'are'} not a factor of "
                                   f"these points (theirs: {', '.join(sorted(prior))})")
        prior = {k: v for k, v in prior.items() if k in inp.factors}
    else:  # the default set: every factor of the points but those fitted only when named
        prior = {k: v for k, v in prior.items() if k not in NAMED_ONLY}
    preps = [replace(p, keys=tuple(k for k in p.keys if k in prior)) for p in preps]
    keys = sorted(prior)
    pred = _Predictions(keys)  # every fit below prices each (scenario, factor values) once
    sol = _solve(preps, keys, prior, pred, inp.loss)
    # The posterior from central differences about the optimum (`sensitivities`), not the
    # solver's forward-difference Jacobian: a factor at a kink (a bandwidth factor capped at the
    # GPU's roof, the host term at 0 µs) would read as one the points do not move at all.
    S = sensitivities(preps, keys, prior, sol.x, pred)
    psig = np.array([prior[k] for k in keys])
    J = S / psig[None, :] / np.array([p.point.rel_sigma for p in preps])[:, None]
    try:
        cov = np.linalg.pinv(J.T @ J + np.diag(1.0 / psig ** 2))
        post = np.sqrt(np.clip(np.diag(cov), 0, None))
    except np.linalg.LinAlgError:  # pragma: no cover - pinv does not raise on finite input
        post = psig
    gpus = sorted({p.machine.gpu.name for p in preps})
    f = _to_factors(keys, sol.x, {k: float(s) for k, s in zip(keys, post)}, gpus)
    f1 = Factors()
    loo: list[float | None] = [None] * len(preps)
    unit = [_held_out_unit(p, inp.held_out) for p in preps]
    if len(set(unit)) > 1:
        fits: dict[tuple, object] = {}  # leaving out either of two identical points leaves the same fit
        ident = [(p.scenario, p.point.figure[1], p.point.rel_sigma) for p in preps]
        for i in range(len(preps)):
            out = [j for j in range(len(preps)) if unit[j] == unit[i]]
            rest = [p for j, p in enumerate(preps) if j not in out]
            same = tuple(sorted(x for j, x in enumerate(ident) if j not in out))
            if same not in fits:  # the fit a user holding only the rest gets: from the same start, not this optimum
                fits[same] = _solve(rest, keys, prior, pred, inp.loss).x
            loo[i] = pred(preps[i], fits[same]) / preps[i].point.figure[1] - 1
    undetermined, why = identifiability(preps, keys, prior, S)
    unsure = {k for g in undetermined for k in g.factors}
    factors = []
    for k, v, sp in zip(keys, sol.x, post):
        value = (float(v) if v >= 0.05 else 0.0) if k in ADDITIVE else math.exp(float(v))  # < 0.05 us: the bound
        factors.append(FactorResult(name=k, value=value, sigma_post=float(sp), sigma_prior=prior[k],
                                    determined=bool(sp < DETERMINED * prior[k]) and k not in unsure,
                                    outside_range=k not in ADDITIVE and not (OUTSIDE[0] <= value <= OUTSIDE[1])))
    points = []
    for p, l1 in zip(preps, loo):
        name, obs = p.point.figure
        pred = p.predict(f)
        points.append(PointResult(index=p.index, label=p.point.describe(), figure=name, observed=obs,
                                  uncalibrated=p.predict(f1), predicted=pred, err=pred / obs - 1, loo_err=l1))
    for fr in factors:
        if fr.outside_range:
            warnings.append(f"factor {fr.name} = {fr.value:.3g} is outside [{OUTSIDE[0]:.2f}, {OUTSIDE[1]:g}]: "
                            f"the model misses a mechanism there")
    warnings += why
    pinned = [fr.name for fr in factors if fr.determined]
    moved = [fr for fr in factors if not fr.determined and fr.name not in ADDITIVE and abs(math.log(fr.value)) > 0.1]
    warnings.append(("pinned by the points on their own: " + ", ".join(pinned)) if pinned else
                    "no factor is pinned by the points on its own")
    if moved:
        warnings.append("moved by the fit though not pinned (their values lean on the priors of the others; projections "
                        "that depend on them carry their posterior σ): " + ", ".join(f"{fr.name} x{fr.value:.2f}"
                                                                                   for fr in moved))
    own = sorted({Path(p.point.profile).name for p in preps if p.point.profile is not None})
    if own:  # points priced against their own profiles
        profile_label = ("" if all(p.point.profile for p in preps) else f"{profile_label}; ") + "per point: " + ", ".join(own)
    machines = sorted({f"{p.point.gpus}x {p.machine.gpu.name}" + (f" over {p.machine.link.name}" if p.machine.link else "")
                       for p in preps})
    loos = [abs(x) for x in loo if x is not None]
    return CalibrationResult(
        engine=inp.engine, kernels=inp.kernels, profile=profile_label, machines=machines, gpus=gpus,
        describes=f"calibrated to {inp.engine} from {len(preps)} point{'s' if len(preps) != 1 else ''} on "
                  f"{', '.join(machines)}" + (f", starting from the kernel set '{inp.kernels}'"
                                              if inp.kernels != "perfmodel" else ""),
        factors=factors, points=points, median_abs_err=statistics.median(abs(p.err) for p in points),
        loo_median_abs_err=statistics.median(loos) if loos else None, held_out=inp.held_out, loss=inp.loss,
        warnings=warnings,
        undetermined=undetermined)


def _held_out_unit(p: Prepared, held_out: str):
    """What one leave-one-out fit leaves out with this point: the point itself (both figures of a
    serving point stay together), its GPU's points, or its model's."""
    return {"point": p.index, "gpu": p.machine.gpu.name, "model": p.model.name}[held_out]


def _duplicates(points: list[ObservedPoint]) -> list[str]:
    """A warning for each point whose setup an earlier point already has, with another figure."""
    seen: dict[str, tuple[int, tuple[str, float]]] = {}
    out = []
    for i, p in enumerate(points):
        key = p.model_dump_json(exclude={"label", "rel_sigma", *FIGURES})
        if key not in seen:
            seen[key] = (i, p.figure)
        elif seen[key][1] != p.figure:
            out.append(f"points {seen[key][0]} and {i} describe the same setup with different figures; both are kept")
    return out


# ---------------------------------------------------------------- files
def _invalid(path: str, e) -> CalibrationError:
    return CalibrationError(validation_line(path, e))


def _load(path: str, what: str, kind: str, model):
    """Read `path` through the input layer (perfmodel.inputs: size-capped regular file, UTF-8, no
    duplicate keys, bounded nesting, no NaN) and validate it against `model`; every failure is one
    CalibrationError naming the file."""
    try:
        data = (load_yaml if kind == "YAML" else load_json)(path, what)
        return validated(model, data, f"{what} {path}")
    except InputError as e:
        raise CalibrationError(str(e)) from None


def load_input(path: str) -> CalibrationInput:
    return _load(path, "calibration input", "YAML", CalibrationInput)


def load_result(path: str) -> CalibrationResult:
    return _load(path, "--calibration", "JSON", CalibrationResult)


MODEL_KEYS = ("model_id", "model", "model_path", "served_model_name")  # where bench files name the model


def _records(path: str, kind: str) -> list[tuple[str, dict]]:
    """Every record of a bench file, each with where it is: one JSON object (`--save-result`), a
    JSON array of them, or JSON lines (`vllm bench serve --append-result`, SGLang's
    `bench_serving --output-file`, which append one object per run of a sweep)."""
    what = f"--from-{kind}"
    try:
        text = read_text(path, what)
        name = Path(path).name
        if text.lstrip().startswith(("{", "[")):
            try:
                whole = parse_json(text, f"{what} {path}", finite=False)  # SGLang writes "request_rate": Infinity
            except NotJSON:
                whole = None  # JSON lines
            if isinstance(whole, dict):
                return [(name, whole)]
            if isinstance(whole, list):
                if whole and all(isinstance(r, dict) for r in whole):
                    return [(f"{name} record {i + 1}", r) for i, r in enumerate(whole)]
                raise CalibrationError(f"{what} '{path}': expected a JSON object, an array of them or JSON lines of them")
        out = []
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            rec = parse_json(line, f"{what} '{path}': line {n}", finite=False)
            if not isinstance(rec, dict):
                raise CalibrationError(f"{what} '{path}': line {n} is not a JSON object")
            out.append((f"{name} line {n}", rec))
    except InputError as e:
        raise CalibrationError(str(e)) from None
    if not out:
        raise CalibrationError(f"{what} '{path}': expected a JSON object (or JSON lines of them)")
    return out


def _record_model(rec: dict, where: str, kind: str) -> dict:
    """The model a record names, as a preset: {'model': name}; one line saying what to give if not."""
    from perfmodel.request import model_preset_of

    ident = next((rec[k] for k in MODEL_KEYS if isinstance(rec.get(k), str) and rec[k].strip()), None)
    if ident is None:
        raise CalibrationError(f"--from-{kind} {where}: the record names no model ({', '.join(MODEL_KEYS[:1])}); give --model")
    preset = model_preset_of(ident)
    if preset is None:
        raise CalibrationError(f"--from-{kind} {where}: its model_id '{ident}' is not a model preset (perfmodel models "
                               "list); give --model or --model-file")
    return {"model": preset}


def bench_points(path: str, kind: Literal["vllm", "sglang"], setup: dict) -> list[ObservedPoint]:
    """One point per record of a `vllm bench serve` result (--save-result JSON, --append-result
    JSON lines) or an SGLang `bench_serving` output: median TPOT (time per output token after the
    first, per request) at the record's max concurrency, at its mean decode context. `setup`
    supplies what the file lacks (target, gpus, parallel, ...; the model when the record's
    model_id is not a preset); --concurrency fills a record without max_concurrency; the other
    setup fields win over the file."""
    from pydantic import ValidationError

    out = []
    for where, rec in _records(path, kind):
        try:
            r = validated(BenchRecord, rec, f"--from-{kind} {where}")
        except InputError as e:
            raise CalibrationError(str(e)) from None
        pt: dict = {"tpot_ms": float(r.median_tpot_ms)}
        if r.max_concurrency is not None:
            pt["concurrency"] = r.max_concurrency
        elif setup.get("concurrency") is not None:
            pt["concurrency"] = setup["concurrency"]
        else:
            raise CalibrationError(f"--from-{kind} {where}: the record has no max_concurrency; give --concurrency")
        if r.completed is not None and r.total_input_tokens is not None and r.total_output_tokens is not None:
            pt["context"] = max(1, round((r.total_input_tokens + r.total_output_tokens / 2) / r.completed))  # mean decode context
        elif r.random_input_len is not None and r.random_output_len is not None:
            pt["context"] = r.random_input_len + r.random_output_len // 2
        pt.update({k: v for k, v in setup.items() if v is not None and k not in ("engine", "concurrency")})
        if pt.get("model") is None and pt.get("model_file") is None:
            pt |= _record_model(rec, where, kind)
        pt["label"] = f"{where}: {pt.get('model') or Path(pt['model_file']).name} {pt.get('gpus', 1)}x {pt['target']} " \
                      f"{pt.get('parallel', 'tp')} C={pt['concurrency']}"
        try:
            out.append(ObservedPoint(**pt))
        except ValidationError as e:
            raise _invalid(f"--from-{kind} {where}", e) from None
    return out


def from_bench_files(files: list[tuple[Literal["vllm", "sglang"], str]], setup: dict,
                     base: CalibrationInput | None = None) -> CalibrationInput:
    """Every record of every bench file, after the points of an OBSERVED.yaml (`base`) when one
    is given: one calibration input. The engine is `setup['engine']`, else the YAML's, else the
    files' backends."""
    from pydantic import ValidationError

    if setup.get("target") is None and setup.get("hw_file") is None:
        kinds = ", ".join(sorted({f"--from-{k}" for k, _ in files}))
        raise CalibrationError(f"{kinds} needs --target (a bench file does not say which machine it ran on)")
    points = list(base.points) if base else []
    backends = []
    for kind, path in files:
        got = bench_points(path, kind, setup)
        points += got
        backends.append(f"{kind} ({Path(path).name})")
    engine = setup.get("engine") or (base.engine if base else "; ".join(backends))
    try:
        return CalibrationInput(engine=engine, points=points, kernels=base.kernels if base else "perfmodel")
    except ValidationError as e:
        raise _invalid(", ".join(f"--from-{k} {p}" for k, p in files), e) from None


def from_bench_file(path: str, kind: Literal["vllm", "sglang"], setup: dict) -> CalibrationInput:
    """Every record of one bench file as a calibration input (`from_bench_files` of one file)."""
    return from_bench_files([(kind, path)], setup)


def write_result(res: CalibrationResult, out: Path, *, inputs=()) -> None:
    """calib.json through the output layer (perfmodel.outputs.write_file): atomic, locked, never
    NaN, never onto one of `inputs` (the files the calibration read), with the permissions of a
    file the user shares (an existing file's mode, else 0666 less the umask)."""
    from perfmodel.outputs import OutputError, write_file

    text = json.dumps(res.model_dump(mode="json"), indent=1, allow_nan=False) + "\n"
    try:
        write_file(out, text, inputs=inputs)
    except OutputError as e:
        raise CalibrationError(str(e)) from None


def model_error(res: CalibrationResult) -> float:
    """How far to trust predictions from this calibration (`CalibrationResult.model_error`)."""
    return res.model_error


def predict_interval(prep: Prepared, res: CalibrationResult, z: float) -> tuple[float, float, float]:
    """(predicted, low, high) of a step-time point (step_ms) under a calibration: the
    calibrated machine's term σ (posterior σ of the factors) and the calibration's own error."""
    f = factors_of(res)
    est = prep.estimate(f)
    sigma = math.hypot(est.sigma_us, model_error(res) * est.step_us) / 1e3
    pred = est.step_us / 1e3
    return pred, max(pred - z * sigma, 1e-6), pred + z * sigma


FOREIGN_BENCH = "foreign"


def points_from_foreign(profile: Profile, gpu: str) -> list[ObservedPoint]:
    """The step points of the torch-only decode stack (`perfmodel measure --only foreign`) as
    observed points: GPU replay time of full-depth steps with lm_head, no host loop."""
    res = profile.benches.get(FOREIGN_BENCH)
    if res is None or res.status != "ok":
        return []
    out = []
    for smp in res.samples:
        sh = smp.shape
        n = int(sh["n_gpus"])
        link = None if n == 1 else ("pcie5-host" if str(sh.get("link", "")).startswith("pcie") else None)
        out.append(ObservedPoint(
            target=gpu, gpus=n, link=link, model=sh["model"], concurrency=int(sh["C"]), q=int(sh["q"]),
            context=int(sh["L"]), host=False, lm_head=True, step_ms=smp.median_ms,
            label=f"{sh['model']} {n}x{' ' + sh['link'] if n > 1 else ''} C={sh['C']} q={sh['q']} L={sh['L']}"))
    return out


def calibration_pair(points: list[ObservedPoint]) -> list[int]:
    """The two points `validate` calibrates the foreign stack on, by a fixed rule: the 1-GPU
    points with the smallest and the largest measured step (the floor-bound and the
    bandwidth-bound end)."""
    one = [i for i, p in enumerate(points) if p.gpus == 1] or list(range(len(points)))
    return [min(one, key=lambda i: points[i].step_ms), max(one, key=lambda i: points[i].step_ms)]


__all__ = ["CalibrationInput", "CalibrationResult", "ObservedPoint", "fit", "load_input", "load_result",
           "from_bench_file", "from_bench_files", "bench_points", "CalibrationError", "GROUPS", "FAMILIES"]
