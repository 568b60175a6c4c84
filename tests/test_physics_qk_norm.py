"""Qwen3's per-head q/k RMSNorm (`attention.qk_norm`): two RMSNorm calls a layer between the qkv
projection and RoPE, over each head's D, on the heads one GPU holds (perfmodel/modelspecs/SOURCES.md
§1c note a). Worked by hand on the hand-made profile of test_physics_step."""

import pytest

from perfmodel.model.layers import Layout, decode_ops
from perfmodel.model.step import step_estimate
from perfmodel.specs import registry
from perfmodel.specs.schema import GQASpec
from tests.test_physics_step import BW, T0, hand_machine, tiny_model

ACT = 2  # bf16 activations


def _qk(**kw):
    return tiny_model(attention=GQASpec(n_heads=4, n_kv_heads=2, head_dim=32, **kw))


def test_qk_norm_adds_one_rmsnorm_over_each_gpus_q_heads_and_one_over_its_k_heads():
    """TP2, 3 sequences: 2 q heads and 1 KV head a GPU, so 6 rows of 32 for q and 3 for k, each read
    and written once (the rmsnorm pass count) plus the 32 weights."""
    ops = {o.name: o for o in decode_ops(_qk(qk_norm=True), Layout("tp", 2), 3, 1, 10)[0]}
    names = list(ops)
    assert names.index("qkv_proj") < names.index("q_norm") < names.index("k_norm") < names.index("rope")
    q, k = ops["q_norm"], ops["k_norm"]
    assert (q.kernel_class, q.variant, k.variant) == ("elementwise", "rmsnorm", "rmsnorm")
    assert q.bytes == pytest.approx(2 * 6 * 32 * ACT + 32 * ACT)
    assert k.bytes == pytest.approx(2 * 3 * 32 * ACT + 32 * ACT)
    assert "q_norm" not in {o.name for o in decode_ops(_qk(), Layout("tp", 2), 3, 1, 10)[0]}


def test_qk_norm_costs_its_two_calls_in_the_step():
    """One layer on the hand profile (t0 10 us, its graph node inside it, 1000 GB/s): the step with the
    norms is the step without them plus two calls, each t0 + bytes / bw."""
    mach = hand_machine()
    with_, without = (step_estimate(m, mach, Layout("tp", 1), 3, 1, 10) for m in (_qk(qk_norm=True), _qk()))
    q_bytes, k_bytes = 2 * 12 * 32 * ACT + 32 * ACT, 2 * 6 * 32 * ACT + 32 * ACT
    want = 2 * T0 + (q_bytes + k_bytes) / (BW * 1e3)
    assert with_.step_us - without.step_us == pytest.approx(want, rel=1e-9)
    assert with_.n_kernels == without.n_kernels + 2


@pytest.mark.parametrize("name, qk", [("qwen3-235b-a22b", True), ("qwen3-30b-a3b", True), ("qwen3-32b", True),
                                       ("llama-3.1-8b", False), ("gpt-oss-120b", False)])
def test_the_presets_that_normalise_q_and_k(name, qk):
    assert registry.load_model(name).attention.qk_norm is qk
