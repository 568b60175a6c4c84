"""Datasheet peaks of the GPU found, to report measured ceilings against.

Read from the hwspecs YAML shipped as package data (perfmodel.hwspecs/gpus/*.yaml, fields
memory.bandwidth_GBps.value and compute.bf16_dense_TFLOPS.value), matched by the CUDA
device name. Only if no YAML matches, a small fallback table is used (datasheet values,
cited). Nothing measured is hard-coded here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources


@dataclass(frozen=True)
class Peak:
    spec: str | None
    bw_GBps: float
    bf16_TFLOPS: float
    fp8_TFLOPS: float | None
    l2_MB: float | None
    source: str


# name substring -> (GB/s, bf16 dense TFLOPS, fp8 dense TFLOPS, source); fallback only.
_FALLBACK = {
    "H200": (4800.0, 989.0, 1979.0, "NVIDIA H200 datasheet (hwspecs/SOURCES.md [S8])"),
    "H100 PCIe": (2000.0, 756.0, 1513.0, "NVIDIA H100 datasheet (hwspecs/SOURCES.md [S7])"),
    "H100": (3350.0, 989.0, 1979.0, "NVIDIA H100 SXM datasheet (hwspecs/SOURCES.md [S7])"),
    "A100": (2039.0, 312.0, None, "NVIDIA A100 80GB SXM datasheet (hwspecs/SOURCES.md [S12])"),
}


def _norm(s: str) -> str:
    return re.sub(r"[^a-z0-9]+", " ", s.lower()).strip()


def _yaml_specs():
    import yaml

    try:
        gpus = resources.files("perfmodel.hwspecs").joinpath("gpus")
        files = [p for p in gpus.iterdir() if p.name.endswith(".yaml")]
    except (ModuleNotFoundError, FileNotFoundError, NotADirectoryError):
        return []
    out = []
    for p in sorted(files, key=lambda p: p.name):
        try:
            out.append((p.name, yaml.safe_load(p.read_text())))
        except Exception:
            continue
    return out


def _score(device_name: str, d: dict) -> int:
    """How well a spec matches the device name: longest matching name/alias/display words."""
    dev = _norm(device_name)
    best = 0
    cands = [d.get("display_name", ""), d.get("name", "")] + list(d.get("aliases", []) or [])
    for c in cands:
        c = _norm(str(c).replace("-", " "))
        if not c:
            continue
        toks = c.split()
        # all tokens of the candidate that look like model numbers must appear in the device name
        if all(t in dev.split() for t in toks):
            best = max(best, len(c))
        elif c in dev:
            best = max(best, len(c))
    # "PCIe" vs "SXM": penalise a PCIe spec for a non-PCIe device and vice versa
    name = _norm(str(d.get("name", "")))
    if ("pcie" in name) != ("pcie" in dev) and best:
        best -= 5
    return best


def find_peak(device_name: str) -> Peak | None:
    best, best_s = None, 0
    for fname, d in _yaml_specs():
        if not isinstance(d, dict):
            continue
        s = _score(device_name, d)
        if s > best_s:
            best, best_s = (fname, d), s
    if best is not None:
        fname, d = best
        try:
            mem, comp = d["memory"], d["compute"]
            fp8 = (comp.get("fp8_dense_TFLOPS") or {}).get("value")
            l2 = (d.get("l2_MB") or {}).get("value")
            return Peak(
                spec=d.get("name"),
                bw_GBps=float(mem["bandwidth_GBps"]["value"]),
                bf16_TFLOPS=float(comp["bf16_dense_TFLOPS"]["value"]),
                fp8_TFLOPS=float(fp8) if fp8 else None,
                l2_MB=float(l2) if l2 else None,
                source=f"hwspecs/gpus/{fname}: {mem['bandwidth_GBps'].get('source', '')}",
            )
        except (KeyError, TypeError, ValueError):
            pass
    for key, (bw, bf16, fp8, src) in _FALLBACK.items():
        if key.lower() in device_name.lower():
            return Peak(None, bw, bf16, fp8, None, src + " (fallback table in perfmodel.measure.peaks)")
    return None
