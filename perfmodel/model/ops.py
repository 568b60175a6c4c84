"""One op's cost: roofline plus a per-kernel latency floor.

    t = t0 + max(bytes / bw, flops / F)

(routed experts in a format the profile has no kernel for also stream, per expert slice they
walk, the bytes-equivalent of what such a slice costs beyond its weights: `Op.slice_overhead_bytes`,
`layers.slice_overhead_bytes`; a kernel that walks each sequence's prefix unsplit, on one SM per
work unit, also takes at least the busiest SM's waves of units at the law's per-unit rate:
`KernelLaw.unit_GBps`)

with (t0, bw, F) the *effective* law of the op's kernel class on the machine being modelled
(see `machine.py`: measured fits carried across by the transfer rules). The floor t0 is
reported as its own component ("latency_floor") so that the step breakdown separates work
that scales with bandwidth from work that does not. t0 here excludes the CUDA-graph node
cost of the call's kernels: that is its own term ("dispatch", priced in `step.py`).

bw is the DRAM-streaming rate, unless the law also carries an L2-resident rate (`bw_l2_GBps`,
fitted from samples whose working set sat in the profile GPU's L2) and the call's bytes fit
in `l2_bytes` (the smaller of the profile GPU's and the target's L2): then that rate is used.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from perfmodel.kernel_classes import CLASSES, of_key
from perfmodel.profile import wave_bytes

Component = Literal[
    "moe", "attention", "dense", "elementwise", "lm_head", "latency_floor", "collectives",
    "dispatch", "host", "engine_host", "draft", "tree_build",
]

# Kernel launches per call of each class (perfmodel/kernel_classes.py).
KERNELS_PER_CALL = {c.name: c.kernels_per_call for c in CLASSES}


@dataclass(frozen=True)
class Op:
    """A kernel call, repeated `count` times per step (e.g. once per layer)."""

    name: str
    component: Component
    kernel_class: str
    bytes: float
    flops: float
    count: int = 1
    compute_dtype: str = "bf16"
    variant: str = ""  # op within the class (e.g. "rmsnorm"): priced by `<class>.<variant>` if the profile has it
    probe: object = None  # lookup.Probe: the profile samples that time this very op, if any
    units: int = 0  # work units if the kernel keeps each sequence's prefix unsplit (profile.attention_units)
    tokens: int = 1  # rows per call (MoE: routed tokens): picks the eager wrapper cost measured nearest below
    at_least: Op | None = None  # a call this one never costs less than (the same kernel over a subset of its tokens)
    slice_overhead_bytes: float = 0.0  # streamed at the law's rate beside `bytes`: what the call's expert slices cost
    # beyond their weights (layers.slice_overhead_bytes each), where its kernel is not the profile's own

    @property
    def n_kernels(self) -> int:
        return of_key(self.kernel_class).kernels_per_call * self.count


@dataclass(frozen=True)
class KernelLaw:
    """Effective law on a given machine, with the relative uncertainty of each term."""

    t0_us: float
    bw_GBps: float
    tflops: float
    rel_unc_bw: float = 0.1
    rel_unc_t0: float = 0.2
    rule: str = ""
    launcher: str = "torch"  # eager launch path of the class's kernels (perfmodel.profile.KernelFit)
    bw_l2_GBps: float | None = None  # L2-resident rate, for calls whose bytes fit in l2_bytes
    l2_bytes: float = 0.0
    graph_nodes: float = 0.0  # CUDA-graph nodes per call taken out of the fitted floor (priced as dispatch)
    unit_GBps: float | None = None  # per work-unit rate of an unsplit kernel (profile.KernelFit.unit_GBps) ...
    slots: int = 0  # ... whose units run in waves over this many SMs
    kernel_set: str = "perfmodel"  # the kernel set whose fit this law is (profile.KERNEL_SETS)
    # fitted on calls timed per expert slice (an imported database's rows of a class with a stand-in,
    # kernel_classes.KernelClass.stand_in): an op's slice_overhead_bytes is in its rate and floor already
    slices_in_fit: bool = False

    def bandwidth(self, call_bytes: float) -> float:
        """The rate one call of `call_bytes` streams at: L2-resident where it fits, else DRAM."""
        if self.bw_l2_GBps is not None and call_bytes <= self.l2_bytes:
            return self.bw_l2_GBps
        return self.bw_GBps


@dataclass(frozen=True)
class OpEstimate:
    name: str
    component: Component
    total_us: float
    memory_us: float
    compute_us: float
    overhead_us: float
    bound: Literal["memory", "compute"]
    count: int

    def scaled(self, k: float) -> OpEstimate:
        """The same split, every part times k (a measured sample replacing the law's total)."""
        return OpEstimate(self.name, self.component, self.total_us * k, self.memory_us * k, self.compute_us * k,
                          self.overhead_us * k, self.bound, self.count)


def estimate(op: Op, law: KernelLaw, flops_scale: float = 1.0) -> OpEstimate:
    """Cost of all `count` calls of `op`. `flops_scale` converts the law's bf16 rate to the
    op's compute dtype (e.g. 2 for fp8 on a chip whose fp8 peak is twice bf16)."""
    mem = (op.bytes + (0.0 if law.slices_in_fit else op.slice_overhead_bytes)) / (law.bandwidth(op.bytes) * 1e3)
    if law.unit_GBps and op.units:  # an unsplit kernel: the busiest SM's waves of units, if slower
        mem = max(mem, wave_bytes(op.bytes, op.units, law.slots) / (law.unit_GBps * 1e3))
    comp = op.flops / (law.tflops * flops_scale * 1e6)
    per = law.t0_us + max(mem, comp)
    return OpEstimate(
        name=op.name,
        component=op.component,
        total_us=per * op.count,
        memory_us=mem * op.count,
        compute_us=comp * op.count,
        overhead_us=law.t0_us * op.count,
        bound="memory" if mem >= comp else "compute",
        count=op.count,
    )
