"""Transfer rules: from a profile measured on a source GPU to effective laws on a target.

One rule per kind of term, each with its stated uncertainty (relative, 1σ):

  bandwidth-bound   a kernel's rate is its DRAM roof in series with the rate its bytes in flight
                    sustain (Little's law: bytes in flight / memory latency, set by its SMs):
                    1/bw_fit = 1/R_s + 1/C_s, with R_s the profile GPU's measured read ceiling;
                    on the target R_t = R_s · (peak_t / peak_s) · (achievable(kind_t) /
                    achievable(kind_s)) and C_t = C_s · SMs_t / SMs_s (1 across vendors),
                    bw_t = 1/(1/R_t + 1/C_t): a kernel short of the roof comes closer to it on
                    slower memory (H200 -> H100 with the same kernels: evidence/h100-profile/),
                    capped on another GPU at its DRAM roof peak_t · achievable(kind_t)
                    unc² = fit rmse² + (kind unc_t² + kind unc_s², only if the kinds differ)
  L2-resident fits  a fit above the profile GPU's datasheet DRAM peak cannot be DRAM streaming
                    (its samples sat in L2): that rate is kept as the class's L2 rate, carried
                    unscaled (but never below the target's DRAM rate), for calls whose bytes fit in min(L2 of profile GPU, L2 of target)
                    (none where the target's spec has no L2 size); larger calls stream from DRAM
                    at the profile GPU's measured read ceiling, carried as above
  compute-bound     F_t = F_fit · peak_t(dtype) / peak_s(dtype); unc 15% across architectures
  measured samples  where the profile timed the very op (same kernel and shape), its sample
                    is used on the profile's own GPU (lookup.py; unc 5%); other GPUs use the laws
  overlap           the laws price max(memory, compute); a sample above its law on the profile
                    GPU shows how much of the shorter term the kernel did not overlap (alpha =
                    (sample - law) / min(memory, compute), clipped to [0, 1]: W4A16 dequant,
                    MLA verify at q > 1). On another GPU the op adds alpha x min(memory,
                    compute) of its own terms (step._with_overlap; evidence/h100-profile/)
  per-unit rate     (unsplit kernels, KernelFit.unit_GBps) one SM's stream: latency-bound, carried
                    unchanged like the floor; the units run in waves over the target's SMs
  latency floor     t0 carried unchanged (a per-kernel GPU-side floor, similar across recent
                    NVIDIA parts); unc 10% on the source GPU, 30% on another architecture.
                    The fits are graph-captured, so t0 holds one graph node per kernel: that
                    part (graph_node_us x kernels per call) is taken out of t0 once here and
                    priced as its own "dispatch" term, so the un-changed step on the profile
                    GPU is the same and a change of the node cost moves the step
  host overhead     scaled by the target system's host-CPU factor; unc 25%
  graph node        carried; unc 30% on another architecture
  collectives       the profile's fit when the same link kind and GPU count were measured;
                    else the interconnect spec's calibrated latency and busbw, with the
                    spec's stated uncertainty
  tree building     CPU: host factor; GPU: scaled like a latency-bound kernel (carried)
  imported profiles a profile imported from a database of per-op measurements (`perfmodel profile
                    import-aic`) carries the classes the database has rows for like a measured
                    profile; the classes it lacks are priced by its fallback profile
                    (`Profile.fallback`, the local measured profile) carried by these rules to the
                    target, and their rules say so
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from perfmodel import kernel_classes
from perfmodel.collective_math import bus_factor
from perfmodel.kernel_classes import by_name, of_key
from perfmodel.model.lookup import SampleTable
from perfmodel.model.ops import KernelLaw
from perfmodel.profile import KERNEL_SETS, CollectiveFit, Profile, check_kernel_set
from perfmodel.specs.schema import GpuSpec, InterconnectSpec, MemoryKinds


@dataclass(frozen=True)
class CollectiveLaw:
    latency_us: float
    busbw_GBps: float
    rel_unc_lat: float
    rel_unc_bw: float
    rule: str
    # The law of messages above `large_from_bytes` per GPU, where the profile fitted one apart
    # (`CollectiveFit.min_bytes`): a law fitted on decode-size messages, carried to a prompt's,
    # prices them at the small messages' bandwidth.
    large: CollectiveLaw | None = None
    large_from_bytes: float = math.inf

    def bw_us(self, bytes_per_gpu: float, factor: float) -> float:
        """The bandwidth term of one message of this many bytes per GPU, `factor` the op's bus factor
        (`bus_factor`): the time past the latency."""
        return bytes_per_gpu * factor / (self.busbw_GBps * 1e3)

    def at(self, bytes_per_gpu: float) -> CollectiveLaw:
        """The law that prices a message of this many bytes per GPU."""
        return self.large if self.large is not None and bytes_per_gpu > self.large_from_bytes else self

    def each(self, fn) -> CollectiveLaw:
        """`fn` applied to this law and to its large messages' law."""
        out = fn(self)
        return replace(out, large=fn(self.large)) if self.large is not None else out


@dataclass(frozen=True)
class Overheads:
    launch_eager_us: float  # a torch op
    launch_eager_triton_us: float  # a Triton kernel through its Python launcher
    graph_node_us: float
    graph_launch_us: float
    host_step_us: float
    rel_unc_host: float
    rel_unc_node: float
    rule: str
    # the profile GPU's node cost, held in its fitted floors
    source_graph_node_us: float = 0.0
    launch_eager_call_us: dict[str, float] = field(default_factory=dict)  # one eager wrapper call, by class
    eager_interleave_factor: float = 1.0  # eager calls made in turn over each in its own loop (profile.Overheads)
    engine_host_us: float = 0.0  # a serving engine's own host work per step (calibrated; 0 otherwise)
    engine_host_sigma_us: float = 0.0
    # the engine's host work per draft forward of a chain drafter (EAGLE-3, MTP) or per DFlash
    # block, that the GPU does not hide (calibrated; 0 otherwise)
    engine_draft_host_us: float = 0.0
    engine_draft_host_sigma_us: float = 0.0
    # a serving engine's wait before a prompt's first token reaches the client, in the request's
    # own decode steps (calibrated; 0 otherwise: serving.simulate)
    engine_ttft_steps: float = 0.0
    # ... and that wait in ms, whatever the load: its per-request work before the first token
    # reaches the client that no step prices (calibrated; 0 otherwise: serving.figures)
    engine_ttft_ms: float = 0.0
    engine_prefill_launch_us: float = 0.0  # host µs per kernel of a step with prompt tokens (calibrated; 0 otherwise)
    engine_prefill_launch_sigma_us: float = 0.0
    engine_prefill_work: float = 1.0  # GPU time of a step with prompt tokens, x what its ops price (calibrated; 1 otherwise)
    engine_prefill_work_sigma: float = 0.0  # its relative 1σ


@dataclass(frozen=True)
class TreeBuildLaw:
    t0_us: float
    per_node_us: float
    rel_unc: float
    rule: str


@dataclass(frozen=True)
class Machine:
    gpu: GpuSpec
    n_gpus: int
    link: InterconnectSpec | None
    laws: dict[str, KernelLaw]
    all_reduce: CollectiveLaw | None
    all_to_all: CollectiveLaw | None
    overheads: Overheads
    treebuild: dict[str, TreeBuildLaw]
    host_cpu_factor: float
    same_gpu_as_profile: bool
    source_gpu: GpuSpec | None = None
    source_laws: dict[str, KernelLaw] = field(default_factory=dict)  # the fits as measured
    table: SampleTable | None = None  # the profile's raw samples (see lookup.py)
    notes: list[str] = field(default_factory=list)
    # measured fraction of peak of each dtype's GEMM relative to bf16's on the profile GPU
    # (e.g. fp8 0.93 if its GEMM reaches 73% of the fp8 peak where bf16 reaches 79%)
    dtype_efficiency: dict[str, float] = field(default_factory=dict)
    roof_GBps: float | None = None  # datasheet bandwidth x streaming fraction: no DRAM stream beats it

    def law_key(self, op) -> str:
        """The key of the law that prices `op` (`law_of`)."""
        return law_of(self.laws, op.kernel_class, op.variant)

    def source_law(self, op) -> KernelLaw:
        return self.source_laws[law_of(self.source_laws, op.kernel_class, op.variant)]

    def source_flops_scale(self, dtype: str) -> float:
        return dtype_flops_scale(self.source_gpu or self.gpu, dtype, self.dtype_efficiency)

    def law(self, op) -> KernelLaw:
        """The op's own law (`class.variant`) when the profile fitted one, else its class's, else
        (a class with a stand-in the profile has no law of: `law_of`) the stand-in's."""
        return self.laws[self.law_key(op)]

    def flops_scale(self, dtype: str) -> float:
        return dtype_flops_scale(self.gpu, dtype, self.dtype_efficiency)


def law_of(laws: dict, cls: str, variant: str = "") -> str:
    """The key in `laws` that prices a call of class `cls` (and variant): `class.variant`, else
    `class`; for a class the laws lack whose record names a stand-in (kernel_classes), the
    stand-in's, whose law then prices the call on its own bytes plus its slices' cost (the op's
    `slice_overhead_bytes`: only a law fitted per slice holds it, `KernelLaw.slices_in_fit`)."""
    for key in (f"{cls}.{variant}", cls):
        if key in laws:
            return key
    kc = by_name().get(cls)
    if kc is not None and kc.stand_in:
        return law_of(laws, kc.stand_in, variant)
    raise KeyError(cls)


def _flops_scale(gpu: GpuSpec, dtype: str) -> float:
    """Ratio of the dtype's peak to bf16 (the laws are bf16 rates)."""
    c = gpu.compute
    if dtype == "fp8" and c.fp8_dense_TFLOPS:
        return c.fp8_dense_TFLOPS.value / c.bf16_dense_TFLOPS.value
    if dtype == "fp4" and c.fp4_dense_TFLOPS:
        return c.fp4_dense_TFLOPS.value / c.bf16_dense_TFLOPS.value
    return 1.0  # no native path for the dtype: the bf16 rate


def dtype_efficiency(ceilings, gpu: GpuSpec) -> dict[str, float]:
    """Measured fraction of peak of each dtype's GEMM relative to bf16's on the profile GPU
    (`Machine.dtype_efficiency`), from the profile's ceilings."""
    c, pk = ceilings, gpu.compute
    if c.fp8_TFLOPS and c.bf16_TFLOPS and pk.fp8_dense_TFLOPS:  # the profile GPU runs fp8 GEMMs natively
        return {"fp8": (c.fp8_TFLOPS / pk.fp8_dense_TFLOPS.value) / (c.bf16_TFLOPS / pk.bf16_dense_TFLOPS.value)}
    return {}


def dtype_flops_scale(gpu: GpuSpec, dtype: str, efficiency: dict[str, float]) -> float:
    """What an op of compute dtype `dtype` multiplies a law's (bf16) compute rate by on `gpu`:
    the dtype's peak ratio to bf16 times its measured efficiency ratio (`dtype_efficiency`)."""
    return _flops_scale(gpu, dtype) * efficiency.get(dtype, 1.0)


def _dtype_peak(gpu: GpuSpec) -> float:
    return gpu.compute.bf16_dense_TFLOPS.value


def _collective_from_fit(fit: CollectiveFit, n: int) -> CollectiveLaw:
    # CollectiveFit.bw_GBps is bytes-per-GPU / time (algbw); busbw = algbw · algorithm factor.
    factor = bus_factor(fit.op, fit.n_gpus)
    return CollectiveLaw(
        latency_us=fit.latency_us, busbw_GBps=fit.bw_GBps * factor,
        rel_unc_lat=max(0.1, fit.rmse_rel), rel_unc_bw=max(0.1, fit.rmse_rel),
        rule=f"measured {fit.op} fit on {fit.n_gpus} GPUs over {fit.link or 'local link'} ({fit.source})",
    )


def _with_large(small: CollectiveLaw, large: CollectiveLaw, from_bytes: float, factor: float) -> CollectiveLaw:
    """`small` pricing messages up to `from_bytes` per GPU and `large` those above; where the large
    law would price a message just above the bound below the small law's price at it, its latency
    is raised to meet it, so that a larger message never costs less (`factor`: the op's bus factor,
    as `step` prices a message: latency + bytes x factor / busbw)."""
    floor_us = small.latency_us + small.bw_us(from_bytes, factor) - large.bw_us(from_bytes, factor)
    if large.latency_us < floor_us:
        large = replace(large, latency_us=floor_us,
                        rule=large.rule + f"; latency raised to {floor_us:.1f} us to meet the smaller messages' law at {from_bytes / 2**20:g} MB")
    return replace(small, large=large, large_from_bytes=from_bytes)


def _collective_from_spec(link: InterconnectSpec, op: str) -> CollectiveLaw:
    c = link.calibrated
    lat, bw = ((c.allreduce_latency_us, c.allreduce_busbw_GBps) if op == "all_reduce"
               else (c.alltoall_latency_us, c.alltoall_busbw_GBps))
    return CollectiveLaw(
        latency_us=lat.value, busbw_GBps=bw.value,
        rel_unc_lat=link.latency_uncertainty_rel, rel_unc_bw=link.bandwidth_uncertainty_rel,
        rule=f"{link.name} calibrated spec: latency {lat.value:g} us ({lat.source}); busbw {bw.value:g} GB/s ({bw.source})",
    )


# Assumed extra uncertainty when the profile's GPU and the target come from different
# vendors (NVIDIA -> AMD): the kernel libraries differ, and datasheet ratios cannot carry
# that. Its size is an assumption; the spread it covers is visible in hwspecs/SOURCES.md Part 3:
# 405B FP8 on 8x MI300X (vLLM) reaches ~34% of peak bandwidth at bs1, Llama-8B on one
# H100 (SGLang) 76%.
CROSS_VENDOR_UNC = 0.25


def _slot_ratio(gpu: GpuSpec, source_gpu: GpuSpec) -> float:
    """How many more bytes the target keeps in flight than the profile GPU: the ratio of SMs
    (each holds about as many loads in flight; boost clocks of recent data-centre parts are
    close, and not every spec has one); 1 across vendors, whose compute units hold different
    amounts in flight (that spread is in CROSS_VENDOR_UNC)."""
    if gpu.vendor != source_gpu.vendor:
        return 1.0
    return gpu.sm_count.value / source_gpu.sm_count.value


def _streaming_rate(bw_fit: float, read_src: float, roof_t: float, slot_ratio: float) -> tuple[float, float]:
    """A bandwidth-bound law carried to another GPU (Little's law): the fit's rate is the
    source's read ceiling in series with the rate its bytes in flight sustain,
    1/bw_fit = 1/read_src + 1/C; on the target that in-flight rate scales with the SMs and
    the ceiling is `roof_t`. Returns (target rate, C); C is infinite for a fit at or above the
    ceiling, which scales with it; on the profile's own GPU (roof_t = read_src, slot_ratio 1)
    the rate is the fit's."""
    gap = 1.0 / bw_fit - 1.0 / read_src
    if gap <= 0:  # at or above the read ceiling (a fit between it and the datasheet peak): scaled with it
        return bw_fit * roof_t / read_src, math.inf
    conc = 1.0 / gap
    return 1.0 / (1.0 / roof_t + 1.0 / (conc * slot_ratio)), conc


def missing_fits(profile: Profile) -> list[str]:
    """Kernel classes the profile has no fit for (a partial `--only` run, or a profile measured
    before the class existed): build_machine prices them by their spec-derived law. A class with a
    stand-in is never missing: without a fit of its own its stand-in's law prices it (`law_of`)."""
    return [c for c in kernel_classes.names() if c not in profile.fits and not by_name()[c].stand_in]


def _fits_with_fallbacks(profile: Profile, source_gpu: GpuSpec, memory_kinds: MemoryKinds,
                         skip: set[str] = frozenset()) -> tuple[dict, set[str]]:
    """The profile's fits, with each missing class's spec-derived law on the profile's GPU
    (but the classes in `skip`, which the fallback profile prices)."""
    from perfmodel.model.derived import derived_fit

    missing = [c for c in missing_fits(profile) if c not in skip]
    fits = dict(profile.fits)
    for cls in missing:
        fits[cls] = derived_fit(by_name()[cls], source_gpu, memory_kinds,
                                f"spec-derived on {source_gpu.name}: the profile has no fit for {cls}")
    return fits, set(missing)


def _fallback_laws(gpu: GpuSpec, profile: Profile, source_gpu: GpuSpec, fallback_gpu: GpuSpec | None,
                   memory_kinds: MemoryKinds, host_cpu_factor: float, graph: bool) -> tuple[dict[str, KernelLaw], dict[str, KernelLaw]]:
    """For a profile with a fallback profile (an import from a database, `Profile.fallback`): the
    laws of the classes it lacks (their variants too: `class.variant`), the fallback's laws
    carried by these same rules to `gpu` and to the profile's own GPU, as (target laws, laws on
    the profile's GPU). Empty without a fallback or without its GPU's spec."""
    fb = profile.fallback
    lacking = set(missing_fits(profile)) if fb is not None and fallback_gpu is not None else set()
    if not lacking:
        return {}, {}
    why = (f"transferred from the fallback profile ({fb.label}): the imported database has no rows for this class; ")

    def carried(to: GpuSpec) -> dict[str, KernelLaw]:
        m = build_machine(to, 1, None, fb, fallback_gpu, memory_kinds, host_cpu_factor, graph)
        return {k: replace(v, rule=why + v.rule) for k, v in m.laws.items() if of_key(k) and of_key(k).name in lacking}

    laws = carried(gpu)
    return laws, (laws if source_gpu.name == gpu.name else carried(source_gpu))


def in_kernel_set(laws: dict, kernel_set: str) -> dict:
    """The laws of one kernel set (profile.KERNEL_SETS): the set's own fits (`class@set`)
    in place of the default's, the other sets' dropped."""
    check_kernel_set(kernel_set)
    tag = f"@{kernel_set}"
    if kernel_set != "perfmodel" and not any(k.endswith(tag) for k in laws):
        raise ValueError(f"the profile has no laws of kernel set '{kernel_set}' (measured before it existed: "
                         "re-measure, or use --kernels perfmodel)")
    out = {k: v for k, v in laws.items() if "@" not in k}
    out.update({k.removesuffix(tag): v for k, v in laws.items() if k.endswith(tag)})
    return out


def build_machine(gpu: GpuSpec, n_gpus: int, link: InterconnectSpec | None, profile: Profile,
                  source_gpu: GpuSpec, memory_kinds: MemoryKinds, host_cpu_factor: float = 1.0,
                  graph: bool = True, kernel_set: str = "perfmodel", fallback_gpu: GpuSpec | None = None) -> Machine:
    """The target machine's laws, carried from the profile by the transfer rules, for one
    kernel set (the default: perfmodel's own kernels). A profile imported from a database
    (`Profile.fallback`, measured on `fallback_gpu`) prices the classes the database lacks by
    its fallback profile's laws, carried to the target by the same rules; without
    `fallback_gpu` those classes are spec-derived like any class a profile lacks."""
    same = gpu.name == source_gpu.name
    bw_ratio = gpu.memory.bandwidth_GBps.value / source_gpu.memory.bandwidth_GBps.value
    kt, ks = memory_kinds.kinds[gpu.memory.kind], memory_kinds.kinds[source_gpu.memory.kind]
    kind_ratio = gpu.memory.streaming_fraction(memory_kinds) / source_gpu.memory.streaming_fraction(memory_kinds)
    kind_unc = 0.0 if gpu.memory.kind == source_gpu.memory.kind else (kt.uncertainty_rel**2 + ks.uncertainty_rel**2) ** 0.5
    f_ratio = _dtype_peak(gpu) / _dtype_peak(source_gpu)
    laws: dict[str, KernelLaw] = {}
    fb_laws, fb_source_laws = _fallback_laws(gpu, profile, source_gpu, fallback_gpu, memory_kinds, host_cpu_factor, graph)
    fits, fallback = _fits_with_fallbacks(profile, source_gpu, memory_kinds, skip={of_key(k).name for k in fb_laws})
    imported = profile.provenance.imported
    vendor_unc = CROSS_VENDOR_UNC if gpu.vendor != source_gpu.vendor else 0.0
    node_us = profile.overheads.graph_node_us if profile.overheads else 0.0
    src_roof_l2 = source_gpu.memory.bandwidth_GBps.value  # above this a fit cannot be DRAM streaming
    src_read = profile.ceilings.read_GBps or source_gpu.memory.bandwidth_GBps.value * source_gpu.memory.streaming_fraction(memory_kinds)
    dram_roof = gpu.memory.bandwidth_GBps.value * gpu.memory.streaming_fraction(memory_kinds)
    l2_bytes = min(gpu.l2_MB.value, source_gpu.l2_MB.value) * 1e6 if (gpu.l2_MB and source_gpu.l2_MB) else 0.0
    roof_t = src_read * bw_ratio * kind_ratio  # the measured read ceiling, carried
    slot_ratio = _slot_ratio(gpu, source_gpu)
    source_laws = {}
    for cls, f in fits.items():
        unc_bw = (f.rmse_rel**2 + kind_unc**2 + (0.0 if same else 0.05**2) + vendor_unc**2) ** 0.5
        in_l2 = f.bw_GBps > src_roof_l2
        dram_src = src_read if in_l2 else f.bw_GBps
        bw_t, conc_src = _streaming_rate(dram_src, src_read, roof_t, slot_ratio)
        capped = not same and bw_t > dram_roof
        bw_t = min(bw_t, dram_roof) if not same else bw_t
        per_call = of_key(cls).kernels_per_call if of_key(cls) else 1
        per_slice = bool(of_key(cls) and of_key(cls).stand_in)  # only a database's per-slice rows fit such a class
        nodes = min(f.t0_us, node_us * per_call) / node_us if node_us > 0 else 0.0
        t0 = f.t0_us - nodes * node_us
        # An L2-resident call is never slower than streaming the same bytes from DRAM.
        l2 = dict(bw_l2_GBps=max(f.bw_GBps, bw_t), l2_bytes=l2_bytes) if in_l2 else {}
        rule_bw = (f"{cls}: bw {dram_src:.0f} GB/s" + (f" (the fit's {f.bw_GBps:.0f} GB/s is above the {src_roof_l2:.0f} "
                   f"GB/s DRAM peak: L2-resident, kept for calls <= {l2_bytes / 1e6:g} MB; DRAM calls at the measured "
                   "read)" if in_l2 else "") + f" = read ceiling {src_read:.0f} in series with "
                   + (f"{conc_src:.0f} GB/s in flight" if math.isfinite(conc_src) else "nothing short of it")
                   + f"; on the target the ceiling × peak ratio {bw_ratio:.3f} × {gpu.memory.kind}/{source_gpu.memory.kind} "
                   f"achievable ratio {kind_ratio:.3f}, in flight × SM ratio {slot_ratio:.3f}: {bw_t:.0f} GB/s"
                   + (f", capped at the DRAM roof {dram_roof:.0f} GB/s" if capped else ""))
        laws[cls] = KernelLaw(
            t0_us=t0, bw_GBps=bw_t, tflops=f.tflops * f_ratio,
            rel_unc_bw=max(unc_bw, 0.03), rel_unc_t0=((0.1 if same else 0.3)**2 + vendor_unc**2) ** 0.5,
            launcher=f.launcher, graph_nodes=nodes, unit_GBps=f.unit_GBps, slots=int(gpu.sm_count.value), **l2,
            kernel_set=cls.partition("@")[2] or "perfmodel", slices_in_fit=per_slice,
            rule=(("spec-derived (the profile has no fit for this class): " if cls in fallback else
                   f"imported ({f.source}): " if imported is not None else "")
                  + rule_bw + f"; F {f.tflops:.0f} TF × {f_ratio:.3f}; t0 {f.t0_us:.1f} us carried, of which "
                  f"{nodes * node_us:.2f} us graph nodes priced as dispatch"
                  + (f"; ±{vendor_unc:.0%} across vendors" if vendor_unc else "")),
        )
        src_l2 = dict(bw_l2_GBps=f.bw_GBps, l2_bytes=source_gpu.l2_MB.value * 1e6 if source_gpu.l2_MB else 0.0) if in_l2 else {}
        source_laws[cls] = KernelLaw(t0, dram_src, f.tflops, graph_nodes=nodes, unit_GBps=f.unit_GBps,
                                     slots=int(source_gpu.sm_count.value), slices_in_fit=per_slice, **src_l2)
    laws.update(fb_laws)
    source_laws.update(fb_source_laws)
    coll: dict[str, CollectiveLaw | None] = {"all_reduce": None, "all_to_all": None}
    if n_gpus > 1:
        for op in coll:
            fits = [c for c in profile.collectives if c.op == op and c.graph == graph
                    and link is not None and c.link == link.kind and c.n_gpus == n_gpus]
            small = [c for c in fits if c.min_bytes == 0]
            large = sorted((c for c in fits if c.min_bytes > 0), key=lambda c: c.min_bytes)
            if small:
                coll[op] = _collective_from_fit(small[0], n_gpus)
                if large:
                    coll[op] = _with_large(coll[op], _collective_from_fit(large[0], n_gpus), large[0].min_bytes,
                                           bus_factor(op, n_gpus))
            elif link is not None:
                coll[op] = _collective_from_spec(link, op)
            else:
                raise ValueError(f"{n_gpus} GPUs need an interconnect")
    o = profile.overheads
    if o is None:
        raise ValueError("profile lacks overheads")
    ov = Overheads(
        launch_eager_us=o.launch_eager_us * host_cpu_factor,
        launch_eager_triton_us=(o.launch_eager_triton_us or o.launch_eager_us) * host_cpu_factor,
        launch_eager_call_us={c: v * host_cpu_factor for c, v in o.launch_eager_call_us.items()},
        eager_interleave_factor=o.eager_interleave_factor,
        graph_node_us=o.graph_node_us,
        graph_launch_us=o.graph_launch_us * host_cpu_factor, host_step_us=o.host_step_us * host_cpu_factor,
        rel_unc_host=0.1 if (same and host_cpu_factor == 1.0) else 0.25, rel_unc_node=0.1 if same else 0.3,
        rule=f"host terms × host-CPU factor {host_cpu_factor:g}; graph node {o.graph_node_us:.2f} us carried ({o.source})",
        source_graph_node_us=o.graph_node_us,
    )
    tb = {}
    for impl, f in profile.treebuild.items():
        scale = host_cpu_factor if impl == "cpu" else 1.0
        tb[impl] = TreeBuildLaw(f.t0_us * scale, f.per_node_us * scale, max(0.15, f.rmse_rel),
                                f"{impl} tree build fit ({f.source})" + (f" × host factor {scale:g}" if impl == "cpu" else ""))
    laws, source_laws = in_kernel_set(laws, kernel_set), in_kernel_set(source_laws, kernel_set)
    table = SampleTable(profile, KERNEL_SETS[kernel_set]) if profile.provenance.kind == "measured" else None
    dtype_eff = dtype_efficiency(profile.ceilings, source_gpu)
    return Machine(gpu=gpu, n_gpus=n_gpus, link=link if n_gpus > 1 else None, laws=laws,
                   all_reduce=coll["all_reduce"], all_to_all=coll["all_to_all"], overheads=ov,
                   treebuild=tb, host_cpu_factor=host_cpu_factor, same_gpu_as_profile=same,
                   source_gpu=source_gpu, source_laws=source_laws, table=table, dtype_efficiency=dtype_eff,
                   roof_GBps=gpu.memory.bandwidth_GBps.value * gpu.memory.streaming_fraction(memory_kinds))
