"""`perfmodel.silicon`: aiconfigurator's measured serving rows read and expressed as perfmodel
requests, on real rows copied into tests/fixtures/aic/systems/silicon_sample.csv (licence note:
tests/fixtures/aic/README.md). Runs without the package."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfmodel import aic, silicon

FIXTURE = Path(__file__).parent / "fixtures" / "aic"


@pytest.fixture(scope="module")
def db():
    return aic.Database(FIXTURE / "systems", (FIXTURE / "VERSION").read_text().strip())


@pytest.fixture(scope="module")
def rows(db):
    return {r.id: r for r in silicon.load_rows(db, mode=None)}


def _row(rows, prefix):
    (hit,) = [r for k, r in rows.items() if k.startswith(prefix)]
    return hit


def test_rows_are_read_typed_with_their_measurements(rows):
    r = _row(rows, "dsr1_h200_sglang_fp8_agg_1024x1024_c4_cfg81")
    assert (r.backend, r.model_path, r.system, r.mode, r.isl, r.osl) == ("sglang", "deepseek-ai/DeepSeek-V3", "h200_sxm",
                                                                           "agg", 1024, 1024)
    assert (r.gemm_quant_mode, r.moe_quant_mode, r.batch_size, r.tp_size, r.moe_tp_size, r.moe_ep_size) == \
        ("fp8", "fp8_block", 4, 8, 8, 1)
    assert r.ttft_ms > 0 and r.tpot_ms > 0


def test_only_agg_rows_by_default(db):
    modes = {r.mode for r in silicon.load_rows(db)}
    assert modes == {"agg"}
    assert "disagg" in {r.mode for r in silicon.load_rows(db, mode=None)}


def test_tp_row_expressed_with_the_checkpoints_dtypes(rows):
    e = silicon.express(_row(rows, "dsr1_h200_sglang_fp8_agg_1024x1024_c4_cfg81"))
    assert (e.target, e.gpus, e.model, e.parallel, e.concurrency, e.engine) == ("h200-sxm", 8, "deepseek-v3", "tp", 4, "sglang")
    # fp8 GEMMs on attention / dense / shared experts, fp8_block experts -> perfmodel's fp8; an fp8 checkpoint: FP8 KV
    assert e.dtypes == {"attention": "fp8", "dense_mlp": "fp8", "shared_experts": "fp8", "routed_experts": "fp8", "kv_cache": "fp8"}
    req = e.request()
    assert (req.isl, req.osl, req.concurrency, req.engine, req.gpus) == (1024, 1024, [4], "sglang", 8)
    assert e.measured_tpot_ms == e.row.tpot_ms


def test_tp_ep_row(rows):
    e = silicon.express(_row(rows, "qwen_qwen3_235b_a22b_fp8_qwen_qwen3_235b_a22b_fp8_h100_sxm_trtllm_agg_512x128_c4_tp4"))
    assert (e.parallel, e.gpus, e.model, e.engine) == ("tp-attn-ep-moe", 4, "qwen3-235b-a22b", "trtllm")
    assert e.dtypes["routed_experts"] == "fp8" and e.dtypes["kv_cache"] == "fp8"


def test_dp_attention_row_counts_every_ranks_requests(rows):
    """batch_size is per attention-DP rank: 32 x 8 ranks = the 256 the id and provenance name."""
    r = _row(rows, "2026_03_25_deepseek_r1_b200_sxm_trtllm_fp4_agg_8192x1024_c256")
    e = silicon.express(r)
    assert (r.batch_size, r.attention_dp_size) == (32, 8)
    assert (e.parallel, e.gpus, e.concurrency) == ("ep", 8, 256)
    assert e.dtypes["routed_experts"] == "nvfp4" and e.dtypes["attention"] == "nvfp4"


def test_dense_row_without_quant_modes_keeps_the_preset(rows):
    e = silicon.express(_row(rows, "meta_llama_llama_3_1_8b_instruct_meta_llama_llama_3_1_8b_instruct_h100_sxm_trtllm"))
    assert (e.model, e.parallel, e.gpus, e.dtypes) == ("llama-3.1-8b", "tp", 1, {})
    d = silicon.express(_row(rows, "2026_04_06_llama_3_1_70b_b200_sxm_vllm_fp8"))
    assert d.dtypes == {"attention": "fp8", "dense_mlp": "fp8"}  # no experts: the MoE mode is ignored


def test_int4_and_mxfp4_checkpoints(rows):
    k = silicon.express(_row(rows, "2026_03_25_kimi_k2_5_b200_sxm_vllm_int4"))
    assert k.model == "kimi-k2.6" and k.dtypes == {"routed_experts": "int4_g32"}  # the INT4 GEMM mode: experts only
    g = silicon.express(_row(rows, "2026_03_25_gpt_oss_120b_h100_sxm_vllm_fp4"))
    assert g.model == "gpt-oss-120b" and g.dtypes["routed_experts"] == "nvfp4" and "kv_cache" not in g.dtypes


@pytest.mark.parametrize("prefix, reason", [
    ("minimaxm2_5_b300_vllm_fp8_agg_8192x1024_c128_cfg733", "model MiniMaxAI/MiniMax-M2.5: no preset"),
    ("kimik2_5_gb200_trtllm_fp4_disagg", "mode disagg"),
    ("kimik2_5_b200_vllm_fp4_agg_1024x1024_c32_cfg635", "perfmodel has tp, tp+ep and dp-attn+ep"),
    ("qwen_qwen3_235b_a22b_fp8_qwen_qwen3_235b_a22b_fp8_h200_sxm_vllm_agg_1000x100_c8_tp1_epnone_2", "experts split over 2 GPUs"),
])
def test_refusals_say_why_in_one_line(rows, prefix, reason):
    with pytest.raises(silicon.NotExpressible) as e:
        silicon.express(_row(rows, prefix))
    assert reason in e.value.reason and "\n" not in e.value.reason


def test_refused_rows_of_other_kinds():
    base = silicon.Row(id="x", backend="vllm", backend_version="", model_path="meta-llama/Llama-3.1-70B", system="h200_sxm",
                       precision="", mode="agg", isl=1, osl=2, gemm_quant_mode="", moe_quant_mode="", batch_size=1,
                       tp_size=2, pp_size=1, attention_dp_size=1, moe_tp_size=0, moe_ep_size=0, ttft_ms=1.0, tpot_ms=1.0)
    from dataclasses import replace

    for change, reason in [({"pp_size": 2}, "pipeline"), ({"attention_dp_size": 2}, "dense model with attention DP"),
                           ({"system": "l4"}, "system l4"), ({"backend": "tgi"}, "engine tgi"),
                           ({"gemm_quant_mode": "w4a8"}, "gemm_quant_mode w4a8")]:
        with pytest.raises(silicon.NotExpressible, match=reason):
            silicon.express(replace(base, **change))
    assert silicon.express(base).gpus == 2


def test_express_all_and_reason_kinds(rows):
    ok, refused = silicon.express_all(rows.values())
    assert len(ok) + len(refused) == len(rows) and len(ok) == 8
    kinds = {silicon.reason_kind(r) for _, r in refused}
    assert "layout: experts split over N GPUs, attention over N" in kinds


def test_stratified_sample_spans_each_group(rows):
    ok, _ = silicon.express_all(rows.values())
    one = silicon.stratified(ok, 1, silicon.group_key)
    assert len(one) == len({silicon.group_key(e) for e in ok})
    assert silicon.stratified(ok, 5, lambda e: 0) == sorted(
        [silicon.stratified(ok, 99, lambda e: 0)[round(i * 7 / 4)] for i in range(5)], key=lambda e: (
            e.row.concurrency, e.row.isl, e.row.osl, e.row.id))


def test_malformed_sample_is_one_line():
    with pytest.raises(silicon.SiliconError, match="missing columns"):
        silicon.parse_rows("id,backend\nx,vllm\n")
