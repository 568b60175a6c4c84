"""The spec-derived profile (perfmodel/model/derived.py): each assumed figure against the source
it cites. The unsourced assumptions are pinned in tests/test_derived_assumptions_pinned.py, a
change detector that the mutation score does not count."""

import pytest

from perfmodel.model.derived import spec_derived_profile
from perfmodel.specs import registry


@pytest.fixture(scope="module")
def h200():
    g = registry.load_gpu("h200")
    mk = registry.load_memory_kinds()
    return g, g.memory.bandwidth_GBps.value * g.memory.streaming_fraction(mk), spec_derived_profile(g, mk)


def test_launch_costs_from_the_cited_measurements(h200):
    """hwspecs/SOURCES.md 2d: a raw launch costs ~4-6 us [S36] (the middle, 5 us, is assumed);
    a graphed chain of 80 tiny kernels ran in 70 us, 0.875 us per node [S33] (rounded to 1 us)."""
    o = h200[2].overheads
    assert o.launch_eager_us == (4.0 + 6.0) / 2
    assert o.graph_node_us == round(70.0 / 80)


def test_class_efficiencies_against_the_cited_kernels(h200):
    """perfmodel/modelspecs/SOURCES.md §5: FlashMLA streams at ~90% of the H800's 3.35 TB/s and
    computes at ~80% of its throttled peak; the MLA class is assumed a little under both
    (85% of the achievable streaming rate, 60% of the dense peak). Marlin W4A16 holds ~1150 GB/s
    flat for batch 1-16 on an older GPU; on the H200 the W4A16 MoE class is assumed at 80% of the
    achievable rate. Each class's efficiencies, as fractions of the H200's streaming roof and
    dense bf16 peak:"""
    g, roof, p = h200
    peak = g.compute.bf16_dense_TFLOPS.value
    frac = {cls: (round(f.bw_GBps / roof, 6), round(f.tflops / peak, 6)) for cls, f in p.fits.items()}
    assert frac == {"moe_w4a16": (0.80, 0.45), "moe_bf16": (0.85, 0.60), "gemm_bf16": (0.85, 0.70),
                    "attention_mla": (0.85, 0.60), "attention_gqa": (0.85, 0.60), "elementwise": (0.70, 0.10)}
    assert frac["attention_mla"][0] * roof / g.memory.bandwidth_GBps.value < 0.90  # under FlashMLA's share of peak
    assert frac["attention_mla"][1] < 0.80
    assert p.fits["moe_w4a16"].bw_GBps > 1150.0  # H200 HBM3e: above Marlin's older-GPU figure


def test_other_gpus_scale_with_their_datasheet():
    """The same efficiencies on any GPU: B300's classes stream at its own peak x streaming
    fraction x the class efficiency, so the ratio of two GPUs' class bandwidths is the ratio of
    their achievable streaming rates."""
    mk = registry.load_memory_kinds()
    a, b = registry.load_gpu("h200"), registry.load_gpu("b300")
    pa, pb = spec_derived_profile(a, mk), spec_derived_profile(b, mk)
    ra = a.memory.bandwidth_GBps.value * a.memory.streaming_fraction(mk)
    rb = b.memory.bandwidth_GBps.value * b.memory.streaming_fraction(mk)
    for cls in pa.fits:
        assert pb.fits[cls].bw_GBps / pa.fits[cls].bw_GBps == pytest.approx(rb / ra)
        assert pb.fits[cls].tflops / pa.fits[cls].tflops == pytest.approx(
            b.compute.bf16_dense_TFLOPS.value / a.compute.bf16_dense_TFLOPS.value)
        assert pb.fits[cls].t0_us == pa.fits[cls].t0_us
