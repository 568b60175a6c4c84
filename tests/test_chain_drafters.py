"""EAGLE-3 heads and MTP modules: their schema, their pricing from shapes (k draft forwards then one
verify of k + 1 tokens), their weights and KV, and the engine's speculation-off threshold."""

import math
from dataclasses import replace

import pytest

from perfmodel.api import resolve
from perfmodel.model.layers import Layout
from perfmodel.model.machine import build_machine
from perfmodel.model.memory import draft_kv_bytes_per_token, drafter_weight_bytes, memory_use
from perfmodel.model.step import chain_draft_ops, step_estimate
from perfmodel.scenario import Request
from perfmodel.specs import registry
from perfmodel.specs.schema import ModelSpec, SpeculationEngineSpec

EAGLE = dict(kind="eagle3", name="e3", source="hand-written test head", hidden_size=4096, n_heads=32, n_kv_heads=8,
             head_dim=128, intermediate_size=14336, draft_vocab_size=32000, num_speculative_tokens=3)


def llama(**upd) -> ModelSpec:
    return ModelSpec.model_validate({**registry.load_model("llama-3.1-8b").model_dump(), **upd})


@pytest.fixture(scope="module")
def h100():
    rs = resolve(Request(target="h100-sxm", gpus=1, model="llama-3.1-8b", concurrency=[1], context=1200))
    return build_machine(rs.gpu, 1, rs.link, rs.profile, rs.source_gpu, rs.mk, 1.0, True, "perfmodel")


# ----------------------------------------------------------------------------- schema
def test_presets_keep_dflash_and_offer_chain_drafters():
    kimi = registry.load_model("kimi-k2.6")
    assert kimi.drafter.kind == "dflash" and kimi.drafter.block_size == 16  # as before: no `kind` in its YAML
    e3 = kimi.with_drafter("eagle3").drafter
    assert (e3.kind, e3.n_kv_heads, e3.draft_vocab_size, e3.block_size) == ("eagle3", 64, 163840, 4)
    assert kimi.with_drafter("dflash") is kimi
    mtp = registry.load_model("deepseek-v3").with_drafter("mtp").drafter
    assert (mtp.kind, mtp.n_modules, mtp.block_size) == ("mtp", 1, 2)
    assert registry.load_model("llama-3.1-8b").drafter is None  # --spec still needs a drafter named
    with pytest.raises(ValueError, match="has no drafter 'mtp'; known: eagle3"):
        registry.load_model("llama-3.1-8b").with_drafter("mtp")


def test_bad_drafters_are_one_line_errors(tmp_path):
    base = (registry._models_root() / "deepseek-v3.yaml").read_text()
    f = tmp_path / "deepseek-v3.yaml"
    f.write_text(base.replace("intermediate_size: 2048\nnotes", "intermediate_size: 4096\nnotes"))
    with pytest.raises(registry.SpecError, match="an MTP module is a layer of the target") as ei:
        registry.load_model_file(f)
    assert "\n" not in str(ei.value)
    f.write_text(base.replace("kind: mtp", "kind: medusa"))
    with pytest.raises(registry.SpecError) as ei:
        registry.load_model_file(f)
    assert "\n" not in str(ei.value) and "drafter_options.mtp" in str(ei.value)


# ----------------------------------------------------------------------------- the ops of a draft
def _tokens(ops, name):
    return [(o.bytes, o.flops, o.count) for o in ops if o.name == name]


def test_a_chain_of_k_drafts_is_one_pass_over_k_plus_1_tokens_then_k_minus_1_single_token_passes():
    m = llama(drafter=EAGLE)
    lay = Layout("tp", 1)
    ops, colls = chain_draft_ops(m, lay, 2, 100, k=4)
    fc = [o for o in ops if o.name == "eagle_fc"]
    assert len(fc) == 1 and fc[0].flops == 2.0 * 2 * 5 * 3 * 4096 * 4096  # once, over C x (k + 1) tokens
    heads = [o for o in ops if o.name == "lm_head"]
    assert [h.count for h in heads] == [1, 3]  # the first pass, then k - 1 = 3 passes
    assert [h.flops for h in heads] == [2.0 * 2 * 4096 * 32000] * 2  # logits for one token per sequence each
    qkv = [o for o in ops if o.name == "qkv_proj"]
    assert [o.flops / (2.0 * 4096 * 48 * 128) for o in qkv] == [10, 2]  # 2 x 5 tokens, then 2 x 1
    assert colls == []  # one GPU
    tree, _ = chain_draft_ops(m, lay, 2, 100, k=4, topk=8)
    assert [o.flops / (2.0 * 4096 * 48 * 128) for o in tree if o.name == "qkv_proj"] == [10, 16]
    assert chain_draft_ops(m, lay, 2, 100, k=0) == ([], [])


def test_an_mtp_draft_is_a_moe_layer_of_the_target_with_its_lm_head():
    m = registry.load_model("deepseek-v3").with_drafter("mtp")
    lay = Layout("tp", 8)
    ops, colls = chain_draft_ops(m, lay, 4, 1000, k=2)
    names = {o.name for o in ops}
    assert {"routed_experts", "shared_gate_up", "mtp_eh_proj", "lm_head", "attention_core"} <= names
    assert "dense_gate_up" not in names
    lm = [o for o in ops if o.name == "lm_head"]
    assert lm[0].bytes >= math.ceil(129280 / 8) * 7168 * 2  # the target's vocab-parallel lm_head, bf16
    assert any(c.name == "tp_allreduce" for c in colls) and any(c.name == "draft_logits_gather" for c in colls)


def test_draft_time_grows_with_the_chain_and_the_host_term_adds_k_times(h100):
    m = llama(drafter=EAGLE)
    lay = Layout("tp", 1)
    d = [step_estimate(m, h100, lay, 1, k + 1, 1200, draft=True).breakdown_us["draft"] for k in (1, 2, 4, 7)]
    assert d[0] < d[1] < d[2] < d[3]
    per = (d[3] - d[2]) / 3  # one more single-token forward of the head: its 0.85 GB of weights, at least
    assert per > 0.85e9 / (3.35e12) * 1e6
    base = step_estimate(m, h100, lay, 1, 5, 1200, draft=True)
    eng = replace(h100, overheads=replace(h100.overheads, engine_draft_host_us=500.0, engine_draft_host_sigma_us=100.0))
    host = step_estimate(m, eng, lay, 1, 5, 1200, draft=True)
    assert host.step_us - base.step_us == pytest.approx(4 * 500.0)  # k = 4 draft forwards
    assert host.breakdown_us["engine_host"] == pytest.approx(2000.0)
    assert host.sigma_us > base.sigma_us
    assert step_estimate(m, eng, lay, 1, 5, 1200, draft=True, host=False).step_us == pytest.approx(
        step_estimate(m, h100, lay, 1, 5, 1200, draft=True, host=False).step_us)  # GPU replay time: no host work
    no = step_estimate(m, h100, lay, 1, 5, 1200)  # draft off: the verify alone
    assert no.breakdown_us.get("draft", 0.0) == 0.0


def test_dflash_pricing_is_unchanged_by_the_chain_drafters(h100):
    """Kimi's DFlash drafter is priced by its block forward as before: the draft component does
    not depend on q (the block is fixed), unlike a chain drafter's."""
    rs = resolve(Request(target="b300", gpus=8, concurrency=[1]))
    mach = build_machine(rs.gpu, 8, rs.link, rs.profile, rs.source_gpu, rs.mk, 1.0, True, "perfmodel")
    lay = Layout("tp", 8)
    a = step_estimate(rs.model, mach, lay, 1, 9, 8192, draft=True, tree_budget=8)
    b = step_estimate(rs.model, mach, lay, 1, 17, 8192, draft=True, tree_budget=16)
    assert a.breakdown_us["draft"] == pytest.approx(b.breakdown_us["draft"])


# ----------------------------------------------------------------------------- weights and KV
def test_eagle_head_weights_and_kv_from_its_shape():
    """Llama-3.1-8B's head: q/k/v 2 x 4096 x 48 x 128, o 4096 x 4096, MLP 3 x 4096 x 14336, fc
    3 x 4096 x 4096, lm_head 4096 x 32000 = 424,673,280 parameters, bf16; its KV one GQA layer of
    8 heads x 128 x 2 x 2 B = 4096 B per token."""
    m = llama(drafter=EAGLE)
    assert drafter_weight_bytes(m, Layout("tp", 1)) == 424_673_280 * 2
    assert drafter_weight_bytes(m, Layout("tp", 2)) == 424_673_280
    assert draft_kv_bytes_per_token(m, Layout("tp", 1)) == 4096
    assert draft_kv_bytes_per_token(m, Layout("tp", 8)) == 4096 / 8
    gpu = registry.load_gpu("h100-sxm")
    plain = memory_use(m, gpu, Layout("tp", 1), 8192, spec_tokens=5)
    spec = memory_use(m, gpu, Layout("tp", 1), 8192, spec_tokens=5, drafter=True)
    assert spec.weights_GB - plain.weights_GB == pytest.approx(0.84934656)
    assert spec.kv_per_seq_GB - plain.kv_per_seq_GB == pytest.approx(4096 * 8197 / 1e9)


def test_mtp_weights_and_kv_are_one_target_layer():
    """DeepSeek-V3's MTP module at TP8: one MLA layer (its attention / 61 layers), one MoE layer of
    256 FP8 experts split 8 ways and its shared expert, plus the replicated eh_proj 2 x 7168 x 7168;
    its KV one layer's 576-wide latent, 1152 B per token (bf16)."""
    m = registry.load_model("deepseek-v3").with_drafter("mtp")
    lay = Layout("tp", 8)
    assert draft_kv_bytes_per_token(m, lay) == 1152
    w = drafter_weight_bytes(m, lay)
    experts = 3 * 7168 * 2048 * 256 * (1.0 + 4.0 / 128 ** 2) / 8
    assert experts < w < experts * 1.2
    dflash = registry.load_model("kimi-k2.6")
    assert draft_kv_bytes_per_token(dflash, lay) == 0.0  # not modelled for DFlash (see its docstring)


def test_the_engine_turns_speculation_off_above_its_batch_size():
    e = SpeculationEngineSpec(engine="TensorRT-LLM", disable_above_batch_size=32)
    assert e.speculates_at(32) and not e.speculates_at(33)
    assert SpeculationEngineSpec().speculates_at(10_000)
    with pytest.raises(ValueError):
        SpeculationEngineSpec(disable_above_batch_size=0)
