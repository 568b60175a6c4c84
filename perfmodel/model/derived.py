"""A profile derived from datasheet specs, for GPUs nobody has measured yet.

Every output made with it says "spec-derived". The efficiencies below are assumptions taken
from the cited facts, not measurements; `perfmodel measure` replaces them.
"""

from __future__ import annotations

from datetime import datetime, timezone

from perfmodel import kernel_classes
from perfmodel.kernel_classes import KernelClass
from perfmodel.profile import KernelFit, Overheads, Profile, Provenance, TreeBuildFit
from perfmodel.specs.schema import GpuSpec, MemoryKinds

# Fraction of the memory kind's achievable streaming bandwidth each kernel class reaches, and
# its per-call latency floor. Sources: FlashMLA ≈90% of peak on H800 (perfmodel/modelspecs/SOURCES.md §5);
# Marlin W4A16 ~1150 GB/s flat at batch 1–16 (vLLM PR #2497); graph node ≈1 µs and launch
# 4–6 µs (hwspecs/SOURCES.md 2d [S33, S36]).


def derived_fit(kc: KernelClass, gpu: GpuSpec, memory_kinds: MemoryKinds, source: str) -> KernelFit:
    """A class's law from `gpu`'s datasheet and the class's assumed efficiencies
    (`KernelClass.derived`)."""
    bw_frac, t0, f_frac = kc.derived
    return KernelFit(t0_us=t0, bw_GBps=gpu.memory.bandwidth_GBps.value * gpu.memory.streaming_fraction(memory_kinds) * bw_frac,
                     tflops=gpu.compute.bf16_dense_TFLOPS.value * f_frac, rmse_rel=0.15, source=source)


def spec_derived_profile(gpu: GpuSpec, memory_kinds: MemoryKinds) -> Profile:
    src = f"spec-derived from {gpu.name} datasheet × assumed class efficiency (perfmodel/model/derived.py)"
    fits = {}
    for kc in kernel_classes.by_name().values():
        if not kc.stand_in:  # a class with a stand-in takes its stand-in's law, as in a measured profile
            fits[kc.name] = derived_fit(kc, gpu, memory_kinds, src)
    return Profile(
        provenance=Provenance(kind="spec-derived", gpu_name=gpu.display_name, gpu_spec=gpu.name,
                              timestamp=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                              note="no measurement: efficiencies assumed from cited facts"),
        fits=fits,
        overheads=Overheads(launch_eager_us=5.0, graph_node_us=1.0, graph_launch_us=10.0, host_step_us=150.0,
                            source="assumed from hwspecs/SOURCES.md 2d [S33,S36]; host step assumed"),
        treebuild={"cpu": TreeBuildFit(impl="cpu", t0_us=100.0, per_node_us=2.0, rmse_rel=0.5, source="assumed"),
                   "gpu": TreeBuildFit(impl="gpu", t0_us=150.0, per_node_us=0.02, rmse_rel=0.5, source="assumed")},
    )
