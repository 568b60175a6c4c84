"""Quantised routed experts (FP8, NVFP4, MXFP4) priced by their own class's law where the profile
has one (`profile import-aic`: fitted on the database's rows of that format, each timed per expert
slice), else by the bf16 grouped GEMM's law on their own bytes plus each slice's cost, the rule a
profile of perfmodel's own kernels keeps (`kernel_classes.KernelClass.stand_in`,
`machine.law_of`). Checked on the rows of tests/fixtures/aic/ (fp8_block Qwen3-235B-A22B experts
on the B300 and H200 with SGLang 0.5.14) against hand formulas."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from perfmodel import aic
from perfmodel.kernel_classes import by_name, moe_class
from perfmodel.model.layers import Layout, _routed_experts, decode_ops, expected_max_distinct_per_gpu, routed_experts_op, slice_overhead_bytes
from perfmodel.model.machine import build_machine
from perfmodel.model.ops import estimate
from perfmodel.model.step import price_op, step_estimate
from perfmodel.request import resolve_profile
from perfmodel.specs import registry
from perfmodel.specs.schema import WEIGHT_BYTES

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "aic"
ROWS = FIXTURE / "systems" / "data" / "b300_sxm" / "moe" / "sglang" / "0.5.14" / "moe_perf.csv"
H, I, E, K = 4096, 1536, 128, 8  # Qwen3-235B-A22B's experts, the fixture's fp8_block rows


@pytest.fixture(scope="module")
def local():
    return resolve_profile(None)


@pytest.fixture(scope="module")
def b300_sglang(local):
    db = aic.Database(FIXTURE / "systems", (FIXTURE / "VERSION").read_text().strip())
    return aic.import_profile(db, "b300_sxm", "sglang@0.5.14", local)


@pytest.fixture(scope="module")
def gpus():
    return registry.load_gpu("b300-sxm"), registry.load_gpu("h200-sxm"), registry.load_memory_kinds()


def _fp8_rows(ep: int = 1) -> list[dict]:
    return [r for r in aic._read_table(ROWS) if r["moe_dtype"] == "fp8_block" and r["moe_ep_size"] == ep]


def _op(T: int, tp: int, probe: bool = True):
    """The routed-expert op of one fixture row as the importer builds it (balanced routing)."""
    touched = aic.balanced_experts(T, E, K)
    pt = next(p for p in aic.moe_points([r for r in _fp8_rows() if (r["num_tokens"], r["moe_tp_size"]) == (T, tp)]))
    assert pt.op.slice_overhead_bytes == pytest.approx(touched * slice_overhead_bytes(H))
    return pt.op if probe else replace(pt.op, probe=None)


def test_the_import_fits_a_law_on_the_formats_own_rows(b300_sglang):
    im = b300_sglang.provenance.imported
    assert "moe_fp8" in b300_sglang.fits and im.dtypes["moe_fp8"] == "fp8_block"
    assert "fp8_block rows" in b300_sglang.fits["moe_fp8"].source
    # the fixture has no NVFP4 or MXFP4 rows: no law, and not "lacking" either (the stand-in prices them)
    assert "moe_nvfp4" not in b300_sglang.fits and "moe_nvfp4" not in im.lacks and "moe_fp8" not in im.lacks
    assert b300_sglang.fallback is None or "moe_nvfp4" not in b300_sglang.fallback.fits


def test_an_fp8_expert_op_is_priced_by_the_rows_on_their_gpu(b300_sglang, gpus):
    """On the system's GPU each fp8_block row the profile kept prices itself (lookup along T: the
    running maximum, so that more tokens never take less time)."""
    b300, h200, mk = gpus
    m = build_machine(b300, 1, None, b300_sglang, b300, mk, fallback_gpu=h200)
    fastest: dict[tuple, float] = {}  # the fastest kernel of each shape, as the importer keeps it
    for r in _fp8_rows():
        key = (r["moe_tp_size"], r["num_tokens"])
        fastest[key] = min(fastest.get(key, r["latency"]), r["latency"])
    assert len(fastest) >= 20
    for (tp, T) in sorted(fastest):
        op = _op(T, tp)
        assert op.kernel_class == "moe_fp8" and m.law_key(op) == "moe_fp8"
        curve = max(t for (tp2, T2), t in fastest.items() if tp2 == tp and T2 <= T)
        assert price_op(m, op) == pytest.approx(curve * 1e3, rel=1e-9)


def test_the_imported_law_holds_the_slices_cost_and_the_stand_in_adds_it(b300_sglang, local, gpus):
    """Hand formulas of one TP4 call at 64 tokens, law alone (no sample): the imported FP8 law
    streams the op's bytes (its rows were timed per slice); the local profile's stand-in, the bf16
    grouped GEMM's law, streams its bytes plus touched x slice_overhead_bytes(H)."""
    b300, h200, mk = gpus
    op = _op(64, 4, probe=False)
    imp = build_machine(b300, 1, None, b300_sglang, b300, mk, fallback_gpu=h200)
    law = imp.law(op)
    assert law.slices_in_fit and law.rule.startswith("imported (") and "fp8_block rows" in law.rule
    fs = imp.flops_scale("fp8")
    mem, comp = op.bytes / (law.bandwidth(op.bytes) * 1e3), op.flops / (law.tflops * fs * 1e6)
    assert estimate(op, law, fs).total_us == pytest.approx(law.t0_us + max(mem, comp), rel=1e-12)

    loc = build_machine(b300, 1, None, local, h200, mk)
    assert loc.law_key(op) == "moe_bf16" and "moe_fp8" not in loc.laws
    law = loc.law(op)
    assert not law.slices_in_fit and law is loc.laws["moe_bf16"]
    fs = loc.flops_scale("fp8")
    mem = (op.bytes + op.slice_overhead_bytes) / (law.bandwidth(op.bytes) * 1e3)
    comp = op.flops / (law.tflops * fs * 1e6)
    assert estimate(op, law, fs).total_us == pytest.approx(law.t0_us + max(mem, comp), rel=1e-12)


def test_a_local_profile_keeps_the_old_rule(local, gpus):
    """perfmodel's own profile has no FP8 MoE kernel: an FP8 expert op costs exactly what it cost as
    a bf16-class op with the slice cost (the rule before FP8 experts had a class), on the profile's
    GPU and on another, and the step names the stand-in in its assumptions."""
    b300, h200, mk = gpus
    m = registry.load_model("deepseek-v3")
    for gpu in (h200, b300):
        mach = build_machine(gpu, 8, registry.load_link(gpu.default_interconnect), local, h200, mk)
        op = next(o for o in decode_ops(m, Layout("tp", 8), 8, 1, 2048)[0] if o.name == "routed_experts")
        assert op.kernel_class == "moe_fp8" and op.slice_overhead_bytes > 0
        assert price_op(mach, op) == price_op(mach, replace(op, kernel_class="moe_bf16"))
        st = step_estimate(m, mach, Layout("tp", 8), 8, 1, 2048)
        assert any(n.startswith("moe_fp8: no law of its own in the profile") and "moe_bf16's law" in n
                   for n in st.assumptions), st.assumptions


def test_an_imported_profile_without_the_formats_rows_prices_it_by_its_own_bf16_law(b300_sglang, gpus):
    """A database with no rows of a format (here: the fit dropped) prices it as before: the
    imported bf16 grouped GEMM's law, not the fallback's, plus the slices' cost."""
    b300, h200, mk = gpus
    prof = b300_sglang.model_copy(update={"fits": {k: v for k, v in b300_sglang.fits.items() if k != "moe_fp8"}})
    mach = build_machine(b300, 1, None, prof, b300, mk, fallback_gpu=h200)
    op = _op(64, 4, probe=False)
    assert mach.law_key(op) == "moe_bf16" and mach.law(op).rule.startswith("imported (")
    assert price_op(mach, op) > price_op(mach, replace(op, slice_overhead_bytes=0.0))


def test_every_quantised_format_maps_to_a_class_with_the_bf16_stand_in():
    for fmt, cls in (("fp8", "moe_fp8"), ("nvfp4", "moe_nvfp4"), ("mxfp4", "moe_mxfp4")):
        assert moe_class(fmt) == cls and by_name()[cls].stand_in == "moe_bf16" and cls in aic.FIT_ROWS
        op = routed_experts_op(8, H, I, K, 4, fmt, 1e8, slices=10.0)
        assert op.kernel_class == cls and op.slice_overhead_bytes == pytest.approx(10.0 * slice_overhead_bytes(H))


def test_an_expert_parallel_call_is_priced_by_the_busiest_gpus_rows(b300_sglang, local, gpus, monkeypatch):
    """Experts whole on each of 4 GPUs: the database's expert-parallel rows under aiconfigurator's
    skewed routing (`aic.EP_DISTRIBUTION`, the busiest GPU timed) are kept as samples of the
    expert-parallel probe (`ep` among its fields) and price such a call on their GPU, while its
    "balanced" rows (every GPU equally loaded) are not read, and neither kind moves the law."""
    rows = _fp8_rows(ep=4)
    skewed: dict[int, float] = {}
    for r in rows:
        if r["distribution"] == aic.EP_DISTRIBUTION:
            skewed[r["num_tokens"]] = min(skewed.get(r["num_tokens"], r["latency"]), r["latency"])
    assert len(skewed) >= 8 and any(r["distribution"] == "balanced" for r in rows)
    kept = {s.shape["T"]: s.median_ms for s in b300_sglang.benches["moe"].samples if s.shape.get("ep") == 4}
    assert kept == pytest.approx(skewed, rel=1e-12)
    # the laws are fitted on the tensor-parallel rows alone
    monkeypatch.setattr(aic, "EP_DISTRIBUTION", "none")
    db = aic.Database(FIXTURE / "systems", (FIXTURE / "VERSION").read_text().strip())
    without = aic.import_profile(db, "b300_sxm", "sglang@0.5.14", local)
    assert without.fits == b300_sglang.fits
    assert not any("ep" in s.shape for s in without.benches["moe"].samples)
    monkeypatch.undo()

    b300, h200, mk = gpus
    m = build_machine(b300, 1, None, b300_sglang, b300, mk, fallback_gpu=h200)
    model = registry.load_model("qwen3-235b-a22b")
    model = model.model_copy(update={"dtypes": model.dtypes.model_copy(update={"routed_experts": "fp8"})})
    lay = Layout("tp-attn-ep-moe", 4)
    assert lay.experts_ep and lay.moe_tp == 1
    for T in sorted(skewed):
        op = _routed_experts(model, lay, T, 1)
        assert dict(op.probe.match)["ep"] == 4 and op.bytes == pytest.approx(
            expected_max_distinct_per_gpu(E, K, T, 4) * 3 * H * I * WEIGHT_BYTES["fp8"] + T * K / 4 * 2 * H * 2)
        curve = max(t for T2, t in skewed.items() if T2 <= T)  # the running maximum along T
        assert price_op(m, op) == pytest.approx(curve * 1e3, rel=1e-9)
    # one GPU holds every expert whichever way a layout names it: the tensor-parallel rows price both
    for T in sorted(skewed):
        one = [_routed_experts(model, Layout(par, 1), T, 1) for par in ("ep", "tp")]
        assert "ep" not in dict(one[0].probe.match) and price_op(m, one[0]) == pytest.approx(price_op(m, one[1]), rel=1e-12)
    # a profile without such samples (the local one) prices it by its law, as before
    loc = build_machine(b300, 1, None, local, h200, mk)
    op = _routed_experts(model, lay, 16, 1)
    assert price_op(loc, op) == pytest.approx(price_op(loc, replace(op, probe=None)), rel=1e-12)
