"""Mixed parallel layouts (attention TP x DP, experts TP x EP: `--parallel tp4xdp2+tp2xep4`)
against hand formulas: the per-GPU expert, attention and KV bytes, the collectives' volumes and
groups; the named layouts spelled with their widths project the same; a bad combination is one
line and exit 2."""

from __future__ import annotations

import math

import pytest
from typer.testing import CliRunner

import perfmodel
from perfmodel.cli import app
from perfmodel.model.layers import ACT, Layout, decode_ops, expected_max_distinct_per_gpu
from perfmodel.model.memory import kv_bytes_per_token, memory_use, param_counts
from perfmodel.scenario import Request, Split, layout_split, make_request
from perfmodel.specs import registry
from perfmodel.specs.schema import WEIGHT_BYTES

QWEN = registry.load_model("qwen3-235b-a22b")  # GQA, 128 experts top-8, no shared experts
DSV3 = registry.load_model("deepseek-v3")  # MLA, 256 experts, a shared expert, 3 dense layers


def _op(ops, name):
    (op,) = [o for o in ops if o.name == name]
    return op


@pytest.mark.parametrize("text, key, split", [
    ("tp4xdp2+tp2xep4", "tp4xdp2+tp2xep4", Split(4, 2, 2, 4)),
    ("TP2xDP2+EP4", "tp2xdp2+ep4", Split(2, 2, 1, 4)),
    ("dp8+tp2xep4", "dp8+tp2xep4", Split(1, 8, 2, 4)),
    ("tp1xdp8+tp8xep1", "dp8+tp8", Split(1, 8, 8, 1)),
    ("tp64+tp8xep8", "tp64+tp8xep8", Split(64, 1, 8, 8)),
])
def test_a_mixed_layout_is_read_by_its_widths(text, key, split):
    assert Request(parallel=text).parallel == key
    assert layout_split(key, split.n_gpus) == split


def test_a_mixed_layout_is_labelled_by_its_widths():
    from perfmodel.scenario import layout_of

    assert layout_of("tp4xdp2+tp2xep4").label(8) == "TP4xDP2 attention + TP2xEP4 experts"
    assert layout_of("tp-attn-ep-moe").label(8) == "TP8 attention + EP8 MoE"


def test_the_named_layouts_are_splits_too():
    assert layout_split("tp", 8) == Split(8, 1, 8, 1)
    assert layout_split("tp-attn-ep-moe", 8) == Split(8, 1, 1, 8)
    assert layout_split("ep", 8) == Split(1, 8, 1, 8)


@pytest.mark.parametrize("named, spelled", [("tp", "tp8+tp8"), ("tp+ep", "tp8+ep8"), ("dp-attn+ep", "dp8+ep8")])
def test_a_named_layout_spelled_by_its_widths_projects_the_same(named, spelled):
    a = perfmodel.project(target="b200", gpus=8, model="deepseek-v3", parallel=named, concurrency=[1, 64]).to_dict()
    b = perfmodel.project(target="b200", gpus=8, model="deepseek-v3", parallel=spelled, concurrency=[1, 64]).to_dict()
    assert a.pop("parallel") != b.pop("parallel")
    _close(a, b)


def _close(a, b, path=""):
    """Equal, numbers to rounding (one collective of 2L calls against two of L sum in another order)."""
    if isinstance(a, dict):
        assert set(a) == set(b), path
        for k in a:
            _close(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _close(x, y, f"{path}[{i}]")
    elif isinstance(a, float):
        assert a == pytest.approx(b, rel=1e-12), path
    else:
        assert a == b, path


def test_experts_tp_x_ep_hold_one_nth_of_the_expert_weights_when_every_expert_is_touched():
    """Conservation: with every expert touched, each GPU reads E/moe_ep experts x 1/moe_tp of each,
    the whole expert weights over n, whatever the split."""
    e, H = QWEN.moe, QWEN.hidden_size
    total = e.n_routed_experts * 3 * H * e.expert_intermediate_size * WEIGHT_BYTES[QWEN.dtypes.routed_experts]
    T = 4096  # every expert touched
    for key in ("tp8+tp2xep4", "tp8+tp4xep2", "tp2xdp4+tp2xep4", "tp8+ep8", "tp"):
        ops, _ = decode_ops(QWEN, Layout(key, 8), T, 1, 1024)
        op = _op(ops, "routed_experts")
        act = T * e.top_k / 8 * 2 * H * ACT
        assert op.bytes - act == pytest.approx(total / 8, rel=1e-6), key


def test_experts_tp_x_ep_at_one_token_read_the_busiest_groups_slices():
    """One token: the busiest of moe_ep groups touches E[max distinct] of its experts, and each GPU
    of the group reads 1/moe_tp of each; flops are the token's k experts' over n."""
    e, H, I = QWEN.moe, QWEN.hidden_size, QWEN.moe.expert_intermediate_size
    wb = WEIGHT_BYTES[QWEN.dtypes.routed_experts]
    ops, _ = decode_ops(QWEN, Layout("tp8+tp2xep4", 8), 1, 1, 1024)
    op = _op(ops, "routed_experts")
    touched = expected_max_distinct_per_gpu(e.n_routed_experts, e.top_k, 1, 4)
    assert op.bytes == pytest.approx(touched * 3 * H * I * wb / 2 + e.top_k / 8 * 2 * H * ACT)
    assert op.flops == pytest.approx(2 * e.top_k * 3 * H * I / 8)
    assert e.top_k / 4 < touched <= e.top_k  # the busiest group holds more than the mean share


def test_attention_tp_x_dp_splits_heads_and_sequences():
    """tp2xdp4: each GPU runs attention for C/4 sequences with n_heads/2 query heads and
    n_kv_heads/2 KV heads; its KV cache holds its group's sequences' half of the heads."""
    a = QWEN.attention
    C, L = 32, 4096
    lay = Layout("tp2xdp4+ep8", 8)
    assert (lay.t_attn, lay.dp_attn) == (2, 4)
    ops, _ = decode_ops(QWEN, lay, C, 1, L)
    core = _op(ops, "attention_core_full")
    kvb = 1.0 if QWEN.dtypes.kv_cache == "fp8" else 2.0
    Cg, hq, hkv = C // 4, a.n_heads // 2, a.n_kv_heads // 2
    assert core.bytes == pytest.approx(Cg * (L + 1) * 2 * hkv * a.head_dim * kvb + 2 * Cg * hq * a.head_dim * ACT)
    per_tok = 2 * hkv * a.head_dim * kvb * QWEN.n_layers
    assert kv_bytes_per_token(QWEN, lay) == pytest.approx(per_tok / 4)


def test_mixed_layout_weights_per_gpu_by_hand():
    """Attention, shared expert and dense MLP split over attention's TP group; routed experts and
    the vocabulary over all n."""
    pc, d = param_counts(DSV3), DSV3.dtypes
    n, t = 16, 4
    mem = memory_use(DSV3, registry.load_gpu("b200"), Layout("tp4xdp4+tp2xep8", n), 8192)
    want = (pc["attention"] * WEIGHT_BYTES[d.attention] / t + pc["dense_mlp"] * WEIGHT_BYTES[d.dense_mlp] / t
            + pc["embedding"] * WEIGHT_BYTES[d.embedding] / n + pc["lm_head"] * WEIGHT_BYTES[d.lm_head] / n
            + pc["routed_experts"] * WEIGHT_BYTES[d.routed_experts] / n
            + pc["shared_experts"] * WEIGHT_BYTES[d.shared_experts] / t + pc["router"] * 2.0)
    assert mem.weights_GB == pytest.approx(want / 1e9)


def _colls(key, n, C, model=DSV3):
    _, colls = decode_ops(model, Layout(key, n), C, 1, 1024)
    return {c.name: c for c in colls}


def test_collectives_of_one_attention_group_with_experts_tp_x_ep():
    """attn_dp = 1: every GPU holds the C tokens; attention and the FFN's partial sums are
    all-reduced over all n GPUs, as tp+ep."""
    C, H, L = 8, DSV3.hidden_size, DSV3.n_layers
    c = _colls("tp16+tp2xep8", 16, C)
    assert set(c) == {"attn_allreduce", "ffn_allreduce", "logits_gather"}
    for name in ("attn_allreduce", "ffn_allreduce"):
        assert (c[name].op, c[name].bytes_per_gpu, c[name].count, c[name].group) == ("all_reduce", C * H * ACT, L, None)


def test_collectives_of_data_parallel_groups_with_whole_experts():
    """tp2xdp4+ep8, C = 32: attention's all-reduces stay within each 2-GPU group over its 8
    sequences; the MoE dispatches and combines each GPU's C/n tokens to their k experts' owners."""
    C, H, L, k = 32, DSV3.hidden_size, DSV3.n_layers, DSV3.moe.top_k
    n_moe = DSV3.n_layers - DSV3.n_dense_layers
    c = _colls("tp2xdp4+ep8", 8, C)
    assert (c["attn_allreduce"].bytes_per_gpu, c["attn_allreduce"].count, c["attn_allreduce"].group) == (8 * H * ACT, L, 2)
    assert (c["ffn_allreduce"].bytes_per_gpu, c["ffn_allreduce"].group) == (8 * H * ACT, 2)
    a2a = c["ep_alltoall"]
    assert (a2a.op, a2a.bytes_per_gpu, a2a.count) == ("all_to_all", math.ceil(C / 8) * k * H * ACT, 2 * n_moe)


def test_collectives_of_data_parallel_attention_with_experts_tp():
    """dp4+tp2xep2 (TRT-LLM attention DP with moe_tp 2): no attention all-reduce (attention TP 1);
    every GPU needs every token for its expert slices: an all-gather and a reduce-scatter of the C
    tokens over all n, the volume of one all-reduce per MoE layer."""
    C, H = 16, DSV3.hidden_size
    n_moe = DSV3.n_layers - DSV3.n_dense_layers
    c = _colls("dp4+tp2xep2", 4, C)
    assert set(c) == {"moe_allgather_reducescatter", "logits_gather"}
    m = c["moe_allgather_reducescatter"]
    assert (m.op, m.bytes_per_gpu, m.count, m.group) == ("all_reduce", C * H * ACT, n_moe, 4)


def test_a_groups_all_reduce_is_priced_on_the_group():
    """A 2-GPU group's all-reduce moves 2(2-1)/2 = 1 buffer per GPU, not 2(8-1)/8 of the 8 GPUs."""
    from perfmodel.model.layers import Collective
    from perfmodel.model.machine import build_machine
    from perfmodel.model.step import price_collective
    from perfmodel.request import resolve_profile

    gpu = registry.load_gpu("b200")
    mach = build_machine(gpu, 8, registry.load_link(gpu.default_interconnect), resolve_profile(None), registry.load_gpu("h200"),
                         registry.load_memory_kinds())
    law = mach.all_reduce
    big = 1e9
    t2 = price_collective(mach, Collective("x", "all_reduce", big, 1, group=2))
    t8 = price_collective(mach, Collective("x", "all_reduce", big, 1))
    assert t2 == pytest.approx(law.latency_us + big * 1.0 / (law.busbw_GBps * 1e3))
    assert t8 == pytest.approx(law.latency_us + big * 2 * 7 / 8 / (law.busbw_GBps * 1e3))


runner = CliRunner()


@pytest.mark.parametrize("args, says", [
    (["--gpus", "16", "--parallel", "tp4xdp2+tp2xep4"], "both must be --gpus 16"),
    (["--gpus", "8", "--parallel", "tp4xdp2+tp2xep2"], "experts 2x2 = 4"),
    (["--gpus", "24", "--parallel", "tp24+ep24"], "attention heads evenly"),
    (["--gpus", "12", "--parallel", "tp4xdp3+ep12"], "256 / 12"),
    (["--gpus", "8", "--parallel", "tp8+"], "unknown layout"),
])
def test_a_bad_combination_is_one_line_and_exit_2(args, says):
    r = runner.invoke(app, ["project", "--target", "b200", "--model", "deepseek-v3", "-c", "1", *args])
    assert r.exit_code == 2, r.output
    assert says in r.output and len(r.output.strip().splitlines()) == 1 and "Traceback" not in r.output


def test_a_dense_model_takes_no_mixed_layout():
    with pytest.raises(ValueError, match="needs an MoE model"):
        perfmodel.project(make_request(target="b200", gpus=4, model="llama-3.1-70b", parallel="tp2xdp2+ep4"))


def test_step_and_the_api_take_a_mixed_layout():
    r = runner.invoke(app, ["step", "--target", "b200", "--gpus", "16", "--model", "deepseek-v3", "--parallel",
                            "tp4xdp4+tp2xep8", "--decode", "64@8192", "--format", "json"])
    assert r.exit_code == 0, r.output
    s = perfmodel.step(target="b200", gpus=16, model="deepseek-v3", parallel="tp4xdp4+tp2xep8", decode=["64@8192"])
    assert s.step_ms > 0 and "collectives" in s.breakdown_ms


def test_a_reports_what_ifs_name_a_mixed_layout():
    from perfmodel.model.whatif import _layout

    assert _layout("tp4xdp2+tp2xep4", 8) == "tp4xdp2+tp2xep4 (TP4xDP2 attention + TP2xEP4 experts)"
