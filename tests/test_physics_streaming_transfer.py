"""The bandwidth transfer rule (Little's law): a law's rate is the profile GPU's read ceiling in
series with the rate its bytes in flight sustain; only the ceiling moves with the memory, the
in-flight rate moves with the SMs."""

import math

import pytest

from perfmodel.model.machine import _slot_ratio, _streaming_rate, build_machine
from perfmodel.request import resolve_profile
from perfmodel.specs import registry


def test_identity_on_the_profile_gpu():
    for fit in (1000.0, 3000.0, 4300.0, 4500.0):  # 4500: above the measured read, below the peak
        bw, _ = _streaming_rate(fit, 4353.0, 4353.0, 1.0)
        assert bw == pytest.approx(fit, rel=1e-12)


def test_a_kernel_at_the_ceiling_scales_with_the_memory():
    bw, conc = _streaming_rate(4353.0, 4353.0, 3000.0, 1.0)
    assert math.isinf(conc) and bw == pytest.approx(3000.0)


def test_a_kernel_short_of_the_ceiling_comes_closer_to_a_slower_roof():
    """80% of a 4353 GB/s ceiling on the profile GPU; on a GPU with 0.7x the memory and the same
    SMs it reaches more than 80% of its roof, never the roof itself, and more than plain
    scaling (0.7 x the fit) gives."""
    fit, read, roof_t = 0.8 * 4353.0, 4353.0, 0.7 * 4353.0
    bw, _ = _streaming_rate(fit, read, roof_t, 1.0)
    assert 0.8 * roof_t < bw < roof_t
    assert bw > 0.7 * fit
    faster, _ = _streaming_rate(fit, read, 2.0 * read, 1.0)  # on faster memory: further from the roof
    assert faster < 0.8 * 2.0 * read


def test_more_sms_keep_more_in_flight():
    fit, read = 0.7 * 4353.0, 4353.0
    rates = [_streaming_rate(fit, read, 8000.0, s)[0] for s in (0.5, 1.0, 1.2, 2.0)]
    assert rates == sorted(rates) and rates[-1] < 8000.0


def test_slot_ratio_is_the_sm_ratio_within_a_vendor_and_one_across():
    h200, b200, mi = (registry.load_gpu(n) for n in ("h200", "b200", "mi300x"))
    assert _slot_ratio(b200, h200) == pytest.approx(b200.sm_count.value / h200.sm_count.value)
    assert _slot_ratio(mi, h200) == 1.0


def test_rule_text_names_the_in_flight_rate():
    prof = resolve_profile(None)
    h200, h100 = registry.load_gpu("h200"), registry.load_gpu("h100")
    m = build_machine(h100, 1, None, prof, h200, registry.load_memory_kinds())
    law = m.laws["moe_w4a16"]
    assert "in flight" in law.rule and "read ceiling" in law.rule
    # the H200 fit is short of its ceiling, so on the H100 it keeps a larger share of the roof
    fit = prof.fits["moe_w4a16"].bw_GBps
    assert law.bw_GBps > fit * h100.memory.bandwidth_GBps.value / h200.memory.bandwidth_GBps.value


def _moe_op(T: int):
    """The embedded profile's own W4A16 MoE bench shape (Kimi, TP8 slice) at T tokens."""
    from perfmodel.model.lookup import Probe
    from perfmodel.model.ops import Op

    E, k, H, I = 384, 8, 7168, 256
    hit = E * (1 - (1 - k / E) ** T)
    nbytes = hit * 3 * H * I * 0.5 * (1 + 2 / 32)
    return Op("routed_experts", "moe", "moe_w4a16", bytes=nbytes, flops=2.0 * T * k * 3 * H * I, count=1,
              probe=Probe("moe", (("shape", "kimi_tp8_I256"),), "T", T, "triton_w4a16"))


def test_overlap_share_carried_to_another_gpu_only():
    """An op whose sample sits above its law on the profile's GPU keeps, on another GPU, that
    share of its shorter roof term in series (never more than the whole shorter term); on the
    profile's own GPU the sample prices it as before."""
    from dataclasses import replace

    from perfmodel.model.ops import estimate
    from perfmodel.model.step import _with_overlap

    prof = resolve_profile(None)
    mk = registry.load_memory_kinds()
    h200, h100 = registry.load_gpu("h200"), registry.load_gpu("h100")
    other = build_machine(h100, 1, None, prof, h200, mk)
    op = _moe_op(256)
    law = estimate(op, other.law(op), other.flops_scale(op.compute_dtype))
    with_share = _with_overlap(op, other, law)
    assert law.total_us <= with_share.total_us <= law.total_us + min(law.memory_us, law.compute_us) + 1e-9
    # a sample no higher than its law adds nothing
    low = replace(other, table=_Table(0.0))
    assert _with_overlap(op, low, law).total_us == law.total_us
    # a sample far above its law adds the whole shorter term, no more
    high = replace(other, table=_Table(1e9))
    assert _with_overlap(op, high, law).total_us == pytest.approx(law.total_us + min(law.memory_us, law.compute_us))
    # no sample of the op: the law alone
    assert _with_overlap(op, replace(other, table=_Table(None)), law).total_us == law.total_us


class _Table:
    def __init__(self, us):
        self.us = us

    def lookup(self, probe):
        return self.us

    def anchor(self, probe):
        return None


def test_overlap_share_continuous_past_the_samples():
    """Past the largest sampled context, an op takes the overlap share of the nearest sample:
    Kimi's verify attention (C = 1, q = 9, TP8) on an H100 from the H200 profile keeps, per unit
    of its law, the share it had at the last sampled context, where before it fell to the law."""
    from perfmodel.model.layers import Layout, decode_ops
    from perfmodel.model.ops import estimate
    from perfmodel.model.step import _with_overlap

    prof = resolve_profile(None)
    h200, h100 = registry.load_gpu("h200"), registry.load_gpu("h100")
    other = build_machine(h100, 8, registry.load_link(h100.default_interconnect), prof, h200,
                          registry.load_memory_kinds())
    m = registry.load_model("kimi-k2.6")

    def ratio(L):
        op = next(o for o in decode_ops(m, Layout("tp", 8), 1, 9, L)[0] if o.name == "attention_core")
        law = estimate(op, other.law(op), other.flops_scale(op.compute_dtype))
        return _with_overlap(op, other, law).total_us / law.total_us, other.table.lookup(op.probe) is not None

    (at_edge, inside), (past, covered) = ratio(32768), ratio(32768 + 4096)
    assert inside and not covered
    assert at_edge > 1.05  # the edge sample sits above its law: a share in series
    assert past == pytest.approx(at_edge, rel=0.05)
