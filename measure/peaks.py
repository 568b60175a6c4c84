"""Datasheet peaks of the GPU found, to report measured ceilings against.

Read from the hardware specs through `perfmodel.specs.registry` (the GPU whose name, display name
or alias best matches the CUDA device name). A GPU without a spec gets no peak: the ceilings are
then reported without a datasheet comparison. Nothing measured is hard-coded here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from perfmodel.specs import GpuSpec, list_gpus, load_gpu


@dataclass(frozen=True)
class Peak:
    spec: str | None
    bw_GBps: float
    bf16_TFLOPS: float
    fp8_TFLOPS: float | None
    l2_MB: float | None
    source: str


def _norm(s: str) -> str:
    return re.sub(r"[^a-z0-9]+", " ", s.lower()).strip()


def _score(device_name: str, g: GpuSpec) -> int:
    """How well a spec matches the device name: longest matching name/alias/display words."""
    dev = _norm(device_name)
    best = 0
    for c in [g.display_name, g.name, *g.aliases]:
        c = _norm(c.replace("-", " "))
        if not c:
            continue
        # all tokens of the candidate must appear in the device name, or the candidate inside it
        if all(t in dev.split() for t in c.split()) or c in dev:
            best = max(best, len(c))
    # "PCIe" vs "SXM": penalise a PCIe spec for a non-PCIe device and vice versa
    if ("pcie" in _norm(g.name)) != ("pcie" in dev) and best:
        best -= 5
    return best


def find_peak(device_name: str) -> Peak | None:
    best, best_s = None, 0
    for name in list_gpus():
        g = load_gpu(name)
        s = _score(device_name, g)
        if s > best_s:
            best, best_s = g, s
    if best is None:
        return None
    mem, comp = best.memory, best.compute
    return Peak(
        spec=best.name,
        bw_GBps=float(mem.bandwidth_GBps.value),
        bf16_TFLOPS=float(comp.bf16_dense_TFLOPS.value),
        fp8_TFLOPS=float(comp.fp8_dense_TFLOPS.value) if comp.fp8_dense_TFLOPS and comp.fp8_dense_TFLOPS.value else None,
        l2_MB=float(best.l2_MB.value) if best.l2_MB and best.l2_MB.value else None,
        source=f"hwspecs/gpus/{best.name}.yaml: {mem.bandwidth_GBps.source}",
    )
