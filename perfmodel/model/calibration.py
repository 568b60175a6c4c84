"""Calibration factors: what `perfmodel calibrate` fits, and how a machine carries them.

An engine's kernels are not perfmodel's. A calibration is one multiplicative factor per
group of terms (fitted in log space, so faster and slower than the model are symmetric),
plus an additive per-step engine host term:

  floor.<group>      latency floor t0 of the group's kernel classes
  bw.<group>         achievable bandwidth of the group's kernel classes (capped at the
                     GPU's streaming roof), and the per-unit rate of an unsplit kernel
  coll_lat.<family>  collective latency on links of one family (pcie, nvlink, xgmi)
  coll_bw.<family>   collective bus bandwidth on links of that family
  launch             CUDA-graph node, graph launch and eager launch cost
  tau                acceptance (scale on τ) — speculative points only
  engine_host_us     the engine's own host work per step (scheduler, sampling, Python), µs,
                     additive and ≥ 0, kept apart from perfmodel's measured host loop
  engine_draft_host_us  the engine's host work per draft forward that the GPU does not hide
                     (its drafting loop between the forwards), µs, additive and ≥ 0 —
                     points of chain drafters only (EAGLE-3, MTP: k forwards per step)
  engine_ttft_steps  the engine's wait before a prompt's first token reaches the client, in the
                     request's own decode steps (scheduler settings a serving figure does not
                     record: TRT-LLM's batch waiting, SGLang's scheduler_recv_interval), additive
                     and ≥ 0 — serving points with a TTFT only
  engine_ttft_ms     that wait in ms, the same at any load: the engine's and its server's work per
                     request before the first token reaches the client that no step prices
                     (tokenising, the scheduler's receive, the HTTP and streaming path), additive
                     and ≥ 0 — serving points with a TTFT only
  engine_prefill_launch_us  the engine's host time per kernel of a step that carries prompt
                     tokens (run outside CUDA graphs, each kernel launched from Python), µs,
                     additive and ≥ 0 — serving points only
  engine_prefill_work  the engine's GPU time of a step that carries prompt tokens, as a multiple
                     of what its ops price (work per-op tables do not time at prompt sizes),
                     multiplicative — serving points only

groups: attention (MLA, GQA decode, q = 1), attention_verify (q > 1: tree / chain verification,
often another kernel in an engine), moe (W4A16, bf16), gemm (dense GEMMs, lm_head), elementwise.

Carrying to a target (`calibrated`): a floor factor multiplies the target's floors; a
bandwidth factor multiplies the target's achievable bandwidth, capped at its streaming roof;
collective factors apply to links of the same family, and onto other families they carry
no factor but widen the uncertainty by the size of the calibrated move. Uncertainties become
the posterior σ (on a GPU the calibration saw), or the posterior σ combined with the
transfer rule's own (elsewhere).

Pure python: no scipy (the fit lives in `perfmodel.calibrate`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from perfmodel.calibration_schema import (  # the factor names, declared with the schema
    ADDITIVE,
    DRAFT_HOST,
    FAMILIES,
    HOST,
    PREFILL_LAUNCH,
    PREFILL_WORK,
    TTFT_MS,
    TTFT_STEPS,
)
from perfmodel.kernel_classes import of_key
from perfmodel.model.machine import CollectiveLaw, Machine

VERIFY = "verify"  # the attention variant of q > 1 steps (layers._attn_variant)
OUTSIDE = (1 / 3, 3.0)  # a factor outside this range: the model misses a mechanism there


def group_of(kernel_class: str) -> str:
    """The factor group of a law key (`class` or `class.variant`)."""
    kc = of_key(kernel_class)
    group = kc.group if kc is not None else "elementwise"
    return f"{group}_{VERIFY}" if group == "attention" and kernel_class.partition(".")[2] == VERIFY else group


def link_family(kind: str | None) -> str | None:
    if not kind:
        return None
    for fam in FAMILIES:
        if kind.startswith(fam):
            return fam
    return None


@dataclass(frozen=True)
class Factors:
    """Fitted values (multiplicative factors; the `ADDITIVE` engine terms in their units: µs, steps,
    ms) and their posterior 1σ (relative for factors, the term's unit for the additive ones).
    Missing keys mean 1 (or 0)."""

    values: dict[str, float] = field(default_factory=dict)
    sigma: dict[str, float] = field(default_factory=dict)
    gpus: tuple[str, ...] = ()  # GPUs the calibration points ran on

    def get(self, key: str) -> float:
        return self.values.get(key, 0.0 if key in ADDITIVE else 1.0)


def _hyp(*xs: float) -> float:
    return math.sqrt(sum(x * x for x in xs))


def calibrated(mach: Machine, f: Factors) -> Machine:
    """The machine with the factors applied (a new Machine; the input is not changed)."""
    seen = mach.gpu.name in f.gpus
    laws = {}
    base = dict(mach.laws)
    if any(k.startswith("floor.attention_verify") or k.startswith("bw.attention_verify") for k in f.values):
        # verification attention gets its own law (a copy of its class's) for its own factors
        for cls in [c for c in base if c.startswith("attention") and "." not in c]:
            base.setdefault(f"{cls}.{VERIFY}", base[cls])
    for cls, law in base.items():
        g = group_of(cls)
        kf, kb = f"floor.{g}", f"bw.{g}"
        fb = f.get(kb)
        bw = law.bw_GBps * fb
        # a faster engine cannot stream past the GPU's roof
        if fb > 1.0:
            bw = min(bw, max(law.bw_GBps, mach.roof_GBps or bw))
        unc_t0 = law.rel_unc_t0 if kf not in f.sigma else (f.sigma[kf] if seen else _hyp(f.sigma[kf], law.rel_unc_t0))
        unc_bw = law.rel_unc_bw if kb not in f.sigma else (f.sigma[kb] if seen else _hyp(f.sigma[kb], law.rel_unc_bw))
        unit = law.unit_GBps * fb if law.unit_GBps else law.unit_GBps
        laws[cls] = replace(law, t0_us=law.t0_us * f.get(kf), bw_GBps=bw, unit_GBps=unit, rel_unc_t0=unc_t0, rel_unc_bw=unc_bw,
                            rule=law.rule + f"; calibrated: t0 x {f.get(kf):.3g}, bw x {fb:.3g}")
    fam = link_family(mach.link.kind if mach.link else None)
    coll = {op: _coll(getattr(mach, op), fam, f) for op in ("all_reduce", "all_to_all")}
    o = mach.overheads
    fl = f.get("launch")
    unc_node = o.rel_unc_node if "launch" not in f.sigma else (f.sigma["launch"] if seen else _hyp(f.sigma["launch"], o.rel_unc_node))
    ov = replace(o, graph_node_us=o.graph_node_us * fl, graph_launch_us=o.graph_launch_us * fl,
                 launch_eager_us=o.launch_eager_us * fl, launch_eager_triton_us=o.launch_eager_triton_us * fl,
                 launch_eager_call_us={c: v * fl for c, v in o.launch_eager_call_us.items()},
                 rel_unc_node=unc_node, engine_host_us=f.get(HOST),
                 engine_host_sigma_us=f.sigma.get(HOST, 0.0), engine_draft_host_us=f.get(DRAFT_HOST),
                 engine_draft_host_sigma_us=f.sigma.get(DRAFT_HOST, 0.0), engine_ttft_steps=f.get(TTFT_STEPS),
                 engine_ttft_ms=f.get(TTFT_MS), engine_prefill_launch_us=f.get(PREFILL_LAUNCH),
                 engine_prefill_launch_sigma_us=f.sigma.get(PREFILL_LAUNCH, 0.0),
                 engine_prefill_work=f.get(PREFILL_WORK), engine_prefill_work_sigma=f.sigma.get(PREFILL_WORK, 0.0),
                 rule=o.rule + f"; calibrated: launch x {fl:.3g}, engine host {f.get(HOST):.0f} us/step"
                 + (f" + {f.get(DRAFT_HOST):.0f} us/draft forward" if DRAFT_HOST in f.values else "")
                 + (f", first token after {f.get(TTFT_STEPS):.1f} more steps" if TTFT_STEPS in f.values else "")
                 + (f", first token {f.get(TTFT_MS):.0f} ms later" if TTFT_MS in f.values else "")
                 + (f", {f.get(PREFILL_LAUNCH):.0f} us per kernel of a prompt's step" if PREFILL_LAUNCH in f.values else "")
                 + (f", a prompt's step x {f.get(PREFILL_WORK):.3g} its ops' time" if PREFILL_WORK in f.values else ""))
    return replace(mach, laws=laws, overheads=ov, **coll)


def _coll(law: CollectiveLaw | None, fam: str | None, f: Factors) -> CollectiveLaw | None:
    """The calibrated collective law, its large messages' law (`CollectiveLaw.large`) alike."""
    return None if law is None else law.each(lambda x: _coll_one(x, fam, f))


def _coll_one(law: CollectiveLaw, fam: str | None, f: Factors) -> CollectiveLaw:
    kl, kb = f"coll_lat.{fam}", f"coll_bw.{fam}"
    if fam and (kl in f.values or kb in f.values):
        return replace(law, latency_us=law.latency_us * f.get(kl), busbw_GBps=law.busbw_GBps * f.get(kb),
                       rel_unc_lat=_hyp(f.sigma.get(kl, 0.0), law.rel_unc_lat) if kl in f.sigma else law.rel_unc_lat,
                       rel_unc_bw=_hyp(f.sigma.get(kb, 0.0), law.rel_unc_bw) if kb in f.sigma else law.rel_unc_bw,
                       rule=law.rule + f"; calibrated on {fam}: latency x {f.get(kl):.3g}, busbw x {f.get(kb):.3g}")
    # another link family: no factor, but the calibrated moves widen the uncertainty
    moves = [abs(math.log(v)) for k, v in f.values.items() if k.startswith("coll_") and v > 0]
    if not moves:
        return law
    w = max(moves)
    return replace(law, rel_unc_lat=_hyp(law.rel_unc_lat, w), rel_unc_bw=_hyp(law.rel_unc_bw, w),
                   rule=law.rule + f"; other link families calibrated: uncertainty widened by {w:.0%}")


def scaled_tau(tau: float, f: Factors, cap: float) -> float:
    """τ with the acceptance factor, never above what the tree can accept (cap = B+1 or the
    drafter's block)."""
    return min(tau * f.get("tau"), cap)


def projection_sigma(f) -> float:
    """The σ a factor (`calibration_schema.FactorResult`) carries into projections: its posterior
    σ when the points pin it on its own, else the wider of posterior and prior. A factor pinned
    only as a combination with others (a floor and a bandwidth of one group, from points at one
    concurrency) has a narrow posterior that holds where the combination holds, at the points'
    own setup, not at the concurrencies a projection moves to."""
    return f.sigma_post if f.determined else max(f.sigma_post, f.sigma_prior)


def factors_of(result) -> Factors:
    """The factors of a calibration result (`calibration_schema.CalibrationResult`), each with its
    `projection_sigma`."""
    return Factors(values={f.name: f.value for f in result.factors},
                   sigma={f.name: projection_sigma(f) for f in result.factors}, gpus=tuple(result.gpus))
