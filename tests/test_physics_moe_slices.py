"""Routed experts split tensor-parallel into narrow slices, priced as the engines' block-scaled
grouped GEMMs run them: each expert slice a call walks costs as if it held
`layers.slice_overhead_bytes(hidden)` more weight bytes (evidence/moe-slice-width/). Checked against hand
formulas: narrow slices cost more per byte than wide ones, monotone in the width, bounded by the
unsplit call; the formats perfmodel has a measured kernel for keep their own law."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from perfmodel.model.layers import (
    SLICE_OVERHEAD_BYTES,
    SLICE_OVERHEAD_BYTES_PER_HIDDEN,
    Layout,
    decode_ops,
    expected_distinct,
    expected_max_distinct_per_gpu,
    routed_experts_op,
    slice_overhead_bytes,
)
from perfmodel.model.ops import KernelLaw, estimate
from perfmodel.specs import registry
from perfmodel.specs.schema import WEIGHT_BYTES

DSV3 = registry.load_model("deepseek-v3")  # fp8 routed experts, 256 experts top-8, hidden 7168, intermediate 2048
H, I, E, K = 7168, 2048, 256, 8
LAW = KernelLaw(t0_us=10.0, bw_GBps=4000.0, tflops=1e9)  # memory-bound: the streaming term alone moves


def _call(T: int, tp: int, wd: str = "fp8") -> float:
    """µs of one GPU's routed-expert call over T tokens with each expert split tp ways, floor removed."""
    touched = expected_distinct(E, K, T)
    op = routed_experts_op(T, H, I, K, tp, wd, touched * 3.0 * H * (I // tp) * WEIGHT_BYTES[wd], slices=touched)
    return estimate(op, LAW).total_us - LAW.t0_us


def test_a_slice_streams_as_if_it_held_the_overhead_bytes_more():
    """Hand formula: (weights + activations + slices x overhead) / bandwidth."""
    T, tp = 8, 8
    touched = expected_distinct(E, K, T)
    weights = touched * 3.0 * H * (I // tp) * WEIGHT_BYTES["fp8"]
    act = T * K / tp * 2 * H * 2.0
    expect = (weights + act + touched * slice_overhead_bytes(H)) / (LAW.bw_GBps * 1e3)
    assert _call(T, tp) == pytest.approx(expect, rel=1e-12)


@pytest.mark.parametrize("T", [1, 8, 64, 256])
def test_narrow_slices_cost_more_per_byte_than_wide_ones_monotone_in_the_width(T):
    """Without the rule every split streams at one rate (the call's bytes are 1/tp of the unsplit
    call's); with it the time per byte rises as the slices narrow, strictly."""
    per_byte = [_call(T, tp) * tp / _call(T, 1) for tp in (1, 2, 4, 8, 16)]
    assert all(b > a for a, b in zip(per_byte, per_byte[1:], strict=False)), per_byte


@pytest.mark.parametrize("T", [1, 8, 64, 256])
@pytest.mark.parametrize("tp", [2, 4, 8, 16])
def test_a_split_call_lies_between_its_share_and_the_whole_call(T, tp):
    """Splitting each expert tp ways never gains more than tp (the 1/tp share is a lower bound) nor
    makes one GPU's share slower than the unsplit call (each slice holds less than its expert)."""
    whole, part = _call(T, 1), _call(T, tp)
    assert whole / tp < part < whole


def test_the_penalty_at_deepseeks_tp8_width_lies_in_the_span_of_the_per_op_data():
    """Bounded by what the public rows show: at DeepSeek's TP8 slices (256 columns of fp8) the
    rule's time per byte over the unsplit experts' lies in the span of the DeepSeek groups' ratios
    (evidence/moe-slice-width/compare.txt: 1.02 to 1.72 at T >= 32)."""
    b0 = slice_overhead_bytes(H)
    ratio = (1 + b0 / (3 * H * 256)) / (1 + b0 / (3 * H * I))
    assert 1.02 <= ratio <= 1.72


def test_the_overhead_grows_with_the_hidden_size_less_than_in_proportion():
    """A slice of a wider hidden size costs more beyond its weights, but less per weight byte: the
    fitted c0 + beta x H, with both terms positive."""
    assert SLICE_OVERHEAD_BYTES > 0 and SLICE_OVERHEAD_BYTES_PER_HIDDEN > 0
    assert slice_overhead_bytes(2048) < slice_overhead_bytes(7168) < slice_overhead_bytes(2048) * 7168 / 2048


@pytest.mark.parametrize("wd", ["bf16", "int4_g32"])
def test_formats_with_a_measured_kernel_keep_their_own_law(wd):
    """bf16 and INT4 experts are priced by perfmodel's own measured kernels, whose laws (and samples)
    already hold what their slices cost: no overhead is added."""
    op = routed_experts_op(8, H, I, K, 8, wd, 1e8, slices=50.0)
    assert op.slice_overhead_bytes == 0.0


def test_the_step_counts_the_slices_each_gpu_walks():
    """TP: every expert the step's tokens touch, sliced; EP: the busiest GPU's touched experts, whole."""
    C = 8
    tp_op = next(o for o in decode_ops(DSV3, Layout("tp", 8), C, 1, 1024)[0] if o.name == "routed_experts")
    ep_op = next(o for o in decode_ops(DSV3, Layout("tp-attn-ep-moe", 8), C, 1, 1024)[0] if o.name == "routed_experts")
    assert tp_op.slice_overhead_bytes == pytest.approx(expected_distinct(E, K, C) * slice_overhead_bytes(H))
    assert ep_op.slice_overhead_bytes == pytest.approx(
        expected_max_distinct_per_gpu(E, K, C, 8) * slice_overhead_bytes(H))


def test_the_constants_are_the_ones_the_evidence_fitted():
    """layers' two constants are the fit the committed evidence printed (to its rounding)."""
    text = (Path(__file__).parents[1] / "evidence/moe-slice-width/compare.txt").read_text()
    ((c0, beta),) = re.findall(r"over \d+ groups: b0 = ([0-9.]+) MB \+ (\d+) bytes per hidden unit", text)
    assert SLICE_OVERHEAD_BYTES == pytest.approx(float(c0) * 1e6, abs=0.005e6)
    assert SLICE_OVERHEAD_BYTES_PER_HIDDEN == float(beta)
