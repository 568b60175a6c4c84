"""The kernel classes the step model prices: one record each, the one place a class is declared.

A class is a kind of kernel call whose time one law describes (`perfmodel.model.ops.KernelLaw`:
a latency floor, a bandwidth and a compute roof). `perfmodel measure` fits one law per class
(profile key `<class>`, or `<class>@<kernel set>` for another provider's kernels); the model's
ops name their class (`perfmodel.model.layers`); the transfer rules carry each law to the target
(`perfmodel.model.machine`). A profile that lacks a class (measured before the class existed, or a
partial run) gets the class's spec-derived law on the profile's GPU, from `derived` below, and
the projection's rules say so. Adding a class: docs/extending.md.

`weight_formats`: the routed experts' weight formats (`specs.schema.WEIGHT_BYTES`) a MoE class
prices; `moe_class` maps a format to its class, the one place that mapping lives (a format no
class names is priced as bf16 experts). `stand_in`: a class no profile measures itself (the
engines' FP8, NVFP4 and MXFP4 grouped GEMMs, which only an imported database times): without a
law of its own in the profile it takes the stand-in class's law, and its ops add the per-slice
cost (`layers.slice_overhead_bytes`) that law lacks; with one (fitted on the database's rows of
that format, each timed per expert slice) that cost is in the law already.

`derived`: the spec-derived law's assumptions, (fraction of the memory kind's achievable
streaming bandwidth, per-call latency floor in µs, fraction of the bf16 dense peak). Sources:
FlashMLA ≈90% of peak on H800 (perfmodel/modelspecs/SOURCES.md §5); Marlin W4A16 ~1150 GB/s flat
at batch 1–16 (vLLM PR #2497); graph node ≈1 µs and launch 4–6 µs (hwspecs/SOURCES.md 2d [S33, S36]).

`stand_in`: the class whose law prices this one in a profile that has no fit of its own (the rule
that stood before the class existed), in place of the spec-derived law: a profile without
`gemm_fp8` (the measured ones: `perfmodel measure` times bf16 GEMMs) prices FP8 GEMMs by
`gemm_bf16`'s law at the FP8 compute rate, as it always did; an import from aiconfigurator's
database fits `gemm_fp8` on the database's FP8 GEMM rows (`perfmodel.aic`).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class KernelClass:
    name: str
    component: str  # the step component its time is reported under (perfmodel.model.ops.Component)
    group: str  # the calibration factor group its floor and bandwidth factors belong to
    label: str  # for figures and tables
    kernels_per_call: int  # kernel launches per call (a fused MoE call = align + gate_up + down + reduce)
    derived: tuple[float, float, float]  # spec-derived law: (bw fraction, t0 µs, bf16-peak fraction)
    doc: str
    weight_formats: tuple[str, ...] = ()  # routed-expert weight formats this class prices (module docstring)
    stand_in: str = ""  # the class whose law it takes where the profile has none of its own


CLASSES: tuple[KernelClass, ...] = (
    KernelClass("moe_w4a16", "moe", "moe", "MoE W4A16", 4, (0.80, 10.0, 0.45),
                "routed experts, INT4 group-32 weights, bf16 activations", weight_formats=("int4_g32", "int4_g128")),
    KernelClass("moe_bf16", "moe", "moe", "MoE bf16", 4, (0.85, 8.0, 0.60), "routed experts, bf16 weights",
                weight_formats=("bf16",)),
    KernelClass("moe_fp8", "moe", "moe", "MoE FP8", 4, (0.85, 8.0, 0.60),
                "routed experts, FP8 weights (128x128 block scales) and activations: the engines' grouped GEMM",
                weight_formats=("fp8",), stand_in="moe_bf16"),
    KernelClass("moe_nvfp4", "moe", "moe", "MoE NVFP4", 4, (0.85, 8.0, 0.60),
                "routed experts, NVFP4 weights and activations: the engines' grouped GEMM",
                weight_formats=("nvfp4",), stand_in="moe_bf16"),
    KernelClass("moe_mxfp4", "moe", "moe", "MoE MXFP4", 4, (0.85, 8.0, 0.60),
                "routed experts, MXFP4 weights, bf16 activations: the engines' grouped GEMM",
                weight_formats=("mxfp4",), stand_in="moe_bf16"),
    KernelClass("gemm_bf16", "dense", "gemm", "bf16 GEMM", 1, (0.85, 4.0, 0.70),
                "dense projections, shared expert, dense MLP, lm_head, router"),
    KernelClass("gemm_fp8", "dense", "gemm", "FP8 GEMM", 1, (0.85, 4.0, 0.70),
                "dense projections of FP8 (block-scaled) weights, W8A8", stand_in="gemm_bf16"),
    KernelClass("attention_mla", "attention", "attention", "MLA attention", 2, (0.85, 6.0, 0.60),
                "absorbed MLA decode / tree-verify attention over the latent cache"),
    KernelClass("attention_gqa", "attention", "attention", "GQA attention", 2, (0.85, 6.0, 0.60),
                "GQA decode / tree-verify attention"),
    KernelClass("elementwise", "elementwise", "elementwise", "elementwise", 1, (0.70, 3.0, 0.10),
                "norms, activations, residual adds, rope, sampling"),
)


_INDEX: tuple = ((), {})


def by_name() -> dict[str, KernelClass]:
    """name -> record (rebuilt when CLASSES is replaced, as a test that adds a class does)."""
    global _INDEX
    if _INDEX[0] is not CLASSES:
        _INDEX = (CLASSES, {c.name: c for c in CLASSES})
    return _INDEX[1]


def names() -> tuple[str, ...]:
    return tuple(by_name())


def of_key(key: str) -> KernelClass | None:
    """The class of a law or profile key (`class`, `class.variant`, `class@set`), or None."""
    return by_name().get(key.partition("@")[0].partition(".")[0])


def moe_class(weight_format: str) -> str:
    """The kernel class that prices routed experts of a weight format (bf16's for a format no
    class names, e.g. int8)."""
    return next((c.name for c in CLASSES if weight_format in c.weight_formats), "moe_bf16")
