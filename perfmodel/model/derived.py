"""A profile derived from datasheet specs, for GPUs nobody has measured yet.

Every output made with it says "spec-derived". The efficiencies below are assumptions taken
from the cited facts, not measurements; `perfmodel measure` replaces them.
"""

from __future__ import annotations

from datetime import datetime, timezone

from perfmodel.profile import KERNEL_CLASSES, KernelFit, Overheads, Profile, Provenance, TreeBuildFit
from perfmodel.specs.schema import GpuSpec, MemoryKinds

# Fraction of the memory kind's achievable streaming bandwidth each kernel class reaches, and
# its per-call latency floor. Sources: FlashMLA ≈90% of peak on H800 (perfmodel/modelspecs/SOURCES.md §5);
# Marlin W4A16 ~1150 GB/s flat at batch 1–16 (vLLM PR #2497); graph node ≈1 µs and launch
# 4–6 µs (hwspecs/SOURCES.md 2d [S33, S36]).
_CLASS_ASSUMPTIONS = {
    "moe_w4a16": (0.80, 10.0, 0.45),
    "moe_bf16": (0.85, 8.0, 0.60),
    "gemm_bf16": (0.85, 4.0, 0.70),
    "attention_mla": (0.85, 6.0, 0.60),
    "attention_gqa": (0.85, 6.0, 0.60),
    "elementwise": (0.70, 3.0, 0.10),
}


def spec_derived_profile(gpu: GpuSpec, memory_kinds: MemoryKinds) -> Profile:
    peak_bw = gpu.memory.bandwidth_GBps.value
    frac = gpu.memory.streaming_fraction(memory_kinds)
    tf = gpu.compute.bf16_dense_TFLOPS.value
    src = f"spec-derived from {gpu.name} datasheet × assumed class efficiency (perfmodel/model/derived.py)"
    fits = {}
    for cls in KERNEL_CLASSES:
        bw_frac, t0, f_frac = _CLASS_ASSUMPTIONS[cls]
        fits[cls] = KernelFit(t0_us=t0, bw_GBps=peak_bw * frac * bw_frac, tflops=tf * f_frac,
                              rmse_rel=0.15, source=src)
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
