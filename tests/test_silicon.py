"""`perfmodel.silicon`: aiconfigurator's measured serving rows read and expressed as perfmodel
requests, on real rows copied into tests/fixtures/aic/systems/silicon_sample.csv (licence note:
tests/fixtures/aic/README.md). Runs without the package."""

from __future__ import annotations

import dataclasses
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


def test_inferencex_rows_draw_their_lengths_from_08_of_isl_and_osl(rows):
    """InferenceX's runs (its database dump and its dated CSV exports) use the random dataset with
    RANDOM_RANGE_RATIO 0.8; aiconfigurator's own gap-analysis runs say nothing: fixed lengths."""
    for prefix in ("dsr1_h200_sglang_fp8_agg_1024x1024_c4_cfg81", "2026_03_25_gpt_oss_120b_h100_sxm_vllm"):
        r = _row(rows, prefix)
        assert r.min_length_ratio == 0.8
        assert silicon.express(r).request().min_length_ratio == 0.8
    gap = _row(rows, "meta_llama_llama_3_1_8b_instruct_meta_llama_llama_3_1_8b_instruct_h100_sxm_trtllm")
    assert gap.min_length_ratio == 1.0 and silicon.express(gap).request().min_length_ratio == 1.0


def test_the_estimators_version_comes_from_its_results_header():
    """--aic-results names the version that priced the rows in its header line; a file without
    one names none."""
    from perfmodel.silicon_validate import results_version

    head = '# {"command": "run_aic.py 4", "aiconfigurator": "0.12.0", "rows": 1}\n{"id": "x", "error": "e"}\n'
    assert results_version(head) == "0.12.0"
    assert results_version('{"id": "x", "error": "e"}\n') is None
    assert results_version("# not json\n") is None


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
    assert e.dtypes["routed_experts"] == "fp8" and "kv_cache" not in e.dtypes


def test_a_block_fp8_checkpoint_that_declares_no_kv_quantization_keeps_a_bf16_kv_cache(rows):
    """Qwen3-235B-A22B-FP8's config quantizes weights only (no kv_cache_quant_algo or kv_cache_scheme):
    the engines' `auto` KV dtype is then the checkpoint's bf16, as aiconfigurator reads it too."""
    for prefix in ("qwen_qwen3_235b_a22b_fp8_qwen_qwen3_235b_a22b_fp8_h200_sxm_vllm_agg_1000x100_c8_tp1",
                   "qwen_qwen3_235b_a22b_fp8_qwen_qwen3_235b_a22b_fp8_h100_sxm_trtllm_agg_512x128_c4_tp4"):
        e = silicon.express(_row(rows, prefix))
        assert e.dtypes["attention"] == e.dtypes["routed_experts"] == "fp8"
        assert "kv_cache" not in e.dtypes and e.request().dtypes.get("kv_cache", "bf16") == "bf16"


def test_experts_tp_x_ep_row_is_a_mixed_layout(rows):
    """TRT-LLM tp 4 with moe_tp 2 x moe_ep 2: attention TP4, each expert TP2 in 2 EP groups."""
    e = silicon.express(_row(rows, "openai_gpt_oss_120b_openai_gpt_oss_120b_h100_sxm_trtllm_agg_4000x1000_c320_tp4"))
    assert (e.parallel, e.gpus, e.model) == ("tp4+tp2xep2", 4, "gpt-oss-120b")
    assert e.request().parallel == "tp4+tp2xep2"


@pytest.mark.parametrize("prefix, parallel, gpus, concurrency", [
    # SGLang/TRT-LLM `tp2 ep2` recorded tp 4, moe_tp 2, moe_ep 2: 2 GPUs, experts EP2
    ("2026_04_06_gpt_oss_120b_h200_sxm_trtllm_fp4_agg_8192x1024_c16_tp2_ep2_927", "tp-attn-ep-moe", 2, 16),
    # vLLM `--tp 4 --enable-expert-parallel` recorded tp 4, attention_dp 4, moe_ep 16; the 32 requests of the config
    ("kimik2_5_b200_vllm_fp4_agg_1024x1024_c32_cfg635", "tp-attn-ep-moe", 4, 32),
])
def test_rows_recorded_with_the_engines_widths_multiplied(rows, prefix, parallel, gpus, concurrency):
    r = _row(rows, prefix)
    assert r.source.startswith(("source_file=2026-", "db-dump/"))
    e = silicon.express(r)
    assert (e.parallel, e.gpus, e.concurrency) == (parallel, gpus, concurrency)


def test_vllm_data_parallel_rows_split_the_experts_over_every_rank(rows):
    """tp 1 with moe_tp 2 (vLLM --dp 2 without expert parallelism): attention DP2, experts TP2; the
    row's 8 requests in all."""
    e = silicon.express(_row(rows, "qwen_qwen3_235b_a22b_fp8_qwen_qwen3_235b_a22b_fp8_h200_sxm_vllm_agg_1000x100_c8_tp1"))
    assert (e.parallel, e.gpus, e.concurrency) == ("dp2+tp2", 2, 8)


def test_dp_attention_row_counts_every_ranks_requests(rows):
    """batch_size is per attention-DP rank: 32 x 8 ranks = the 256 the id and provenance name."""
    r = _row(rows, "2026_03_25_deepseek_r1_b200_sxm_trtllm_fp4_agg_8192x1024_c256")
    e = silicon.express(r)
    assert (r.batch_size, r.attention_dp_size) == (32, 8)
    assert (e.parallel, e.gpus, e.concurrency) == ("ep", 8, 256)
    assert e.dtypes["routed_experts"] == "nvfp4" and e.dtypes["attention"] == "nvfp4"


def test_rows_of_the_mtp_sweeps_are_served_with_mtp(rows):
    """The sample records no speculative setting; the DeepSeek-R1 TRT-LLM runs of InferenceX's sweep
    of 2026-01-14 (its MTP configs alone) ran MTP 3, or 1 with attention DP, with their scripts'
    budgets; a run of the same load on 2025-12-15 did not."""
    plain = silicon.express(_row(rows, "dsr1_h200_trtllm_fp8_agg_1024x1024_c4_cfg181"))
    mtp = silicon.express(_row(rows, "2026_04_06_deepseek_r1_h200_sxm_trtllm_fp8_agg_1024x1024_c4_tp8_ep8_954"))
    assert "spec" not in plain.server and plain.max_batched_tokens == 1152
    assert (plain.parallel, plain.gpus, plain.concurrency) == (mtp.parallel, mtp.gpus, mtp.concurrency) == ("tp-attn-ep-moe", 8, 4)
    assert (mtp.server["spec"], mtp.server["drafter"], mtp.server["draft_tokens"]) == ("chain", "mtp", 3)
    assert mtp.max_batched_tokens == 1152 and "trt_mtp" in mtp.script  # (3 + 1) x 4 + 1024 + 64, up to 64
    req = mtp.request()
    assert (req.spec, req.drafter, req.draft_tokens) == ("chain", "mtp", 3)
    dp = silicon.express(_row(rows, "2026_03_25_deepseek_r1_h200_sxm_trtllm_fp8_agg_8192x1024_c256_tp8_0_ep8_0_1251"))
    assert (dp.parallel, dp.concurrency, dp.server["draft_tokens"], dp.server["max_running"]) == ("ep", 256, 1, 32)
    assert dp.max_batched_tokens == 8320  # (1 + 1) x 256 / 8 + 8192 + 64
    assert "draft_tokens 3" in mtp.describe()


def test_dense_row_without_quant_modes_keeps_the_preset(rows):
    e = silicon.express(_row(rows, "meta_llama_llama_3_1_8b_instruct_meta_llama_llama_3_1_8b_instruct_h100_sxm_trtllm"))
    assert (e.model, e.parallel, e.gpus, e.dtypes) == ("llama-3.1-8b", "tp", 1, {})
    d = silicon.express(_row(rows, "2026_04_06_llama_3_1_70b_b200_sxm_vllm_fp8"))
    assert d.dtypes == {"attention": "fp8", "dense_mlp": "fp8"}  # no experts: the MoE mode is ignored


def test_a_moe_row_with_an_fp8_checkpoint(rows):
    e = silicon.express(_row(rows, "minimaxm2_5_b300_vllm_fp8_agg_8192x1024_c128_cfg733"))
    assert (e.model, e.parallel, e.gpus, e.concurrency, e.target) == ("minimax-m2.5", "tp", 4, 128, "b300-sxm")
    assert e.dtypes["routed_experts"] == "fp8" and e.dtypes["kv_cache"] == "fp8"


def test_int4_and_mxfp4_checkpoints(rows):
    k = silicon.express(_row(rows, "2026_03_25_kimi_k2_5_b200_sxm_vllm_int4"))
    assert k.model == "kimi-k2.6" and k.dtypes == {"routed_experts": "int4_g32"}  # the INT4 GEMM mode: experts only
    g = silicon.express(_row(rows, "2026_03_25_gpt_oss_120b_h100_sxm_vllm_fp4"))
    assert g.model == "gpt-oss-120b" and g.dtypes["routed_experts"] == "nvfp4" and "kv_cache" not in g.dtypes


@pytest.mark.parametrize("prefix, reason", [
    ("qwen3_5_b300_sglang_fp4_agg_8192x1024_c32_cfg736", "model Qwen/Qwen3.5-397B-A17B: no preset"),
    ("kimik2_5_gb200_trtllm_fp4_disagg", "mode disagg"),
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

    moe = replace(base, model_path="Qwen/Qwen3-235B-A22B-FP8", backend="trtllm", moe_tp_size=3)
    with pytest.raises(silicon.NotExpressible, match="experts split over 3 GPUs, attention over 2"):
        silicon.express(moe)
    for change, reason in [({"pp_size": 2}, "pipeline"), ({"attention_dp_size": 2}, "dense model with attention DP"),
                           ({"system": "l4"}, "system l4"), ({"backend": "tgi"}, "engine tgi"),
                           ({"gemm_quant_mode": "w4a8"}, "gemm_quant_mode w4a8")]:
        with pytest.raises(silicon.NotExpressible, match=reason):
            silicon.express(replace(base, **change))
    assert silicon.express(base).gpus == 2


def test_express_all_and_reason_kinds(rows):
    ok, refused = silicon.express_all(rows.values())
    assert len(ok) + len(refused) == len(rows) and len(ok) == 16
    kinds = {silicon.reason_kind(r) for _, r in refused}
    assert kinds == {"model: no preset", "mode: perfmodel simulates aggregated serving only"}


def test_stratified_sample_spans_each_group(rows):
    ok, _ = silicon.express_all(rows.values())
    one = silicon.stratified(ok, 1, silicon.group_key)
    assert len(one) == len({silicon.group_key(e) for e in ok})
    every = silicon.stratified(ok, 99, lambda e: 0)  # one group: all of them, sorted by concurrency
    assert [e.row.concurrency for e in every] == sorted(e.row.concurrency for e in ok)
    last = len(every) - 1
    assert silicon.stratified(ok, 5, lambda e: 0) == [every[round(i * last / 4)] for i in range(5)]  # both ends kept


def test_malformed_sample_is_one_line():
    with pytest.raises(silicon.SiliconError, match="missing columns"):
        silicon.parse_rows("id,backend\nx,vllm\n")


# ------------------------------------------------------------------------------ the statistics, by hand
def test_error_stats_by_hand():
    """|errors| 0.1 .. 0.5: median 0.3; p90 between the 4th and 5th (position 0.9 x 4 = 3.6):
    0.4 + 0.6 x 0.1 = 0.46; signed median of (+0.1, -0.2, +0.3, -0.4, +0.5) is +0.1."""
    from perfmodel.silicon_validate import error_stats

    st = error_stats([0.1, -0.2, 0.3, -0.4, 0.5, None])
    assert st["n"] == 5
    assert (st["median_abs"], st["p90_abs"], st["signed_median"]) == pytest.approx((0.3, 0.46, 0.1))
    assert error_stats([])["median_abs"] is None


def _pt(i, engine, system, model, meas, **pred):
    return {"id": str(i), "engine": engine, "system": system, "model": model,
            "measured": {"ttft_ms": meas, "tpot_ms": meas},
            "predicted": {k: {"ttft_ms": v, "tpot_ms": v * 2} for k, v in pred.items()}, "errors": {}}


def test_summary_by_group_and_beside_the_estimator_on_the_same_rows():
    """Four rows; 'local' priced all, the estimator rows 0 and 1 only. TTFT errors of local:
    +10%, -10%, +50%, -50%; TPOT (twice the TTFT figure): +120%, +80%, +200%, 0%."""
    from perfmodel.silicon_validate import beside, summarise

    pts = [_pt(0, "vllm", "h200_sxm", "m", 10.0, local=11.0, aiconfigurator=12.0),
           _pt(1, "vllm", "b200_sxm", "m", 10.0, local=9.0, aiconfigurator=10.0),
           _pt(2, "sglang", "h200_sxm", "m", 10.0, local=15.0),
           _pt(3, "sglang", "b200_sxm", "m", 10.0, local=5.0)]
    s = {(r["source"], r["by"], r["group"]): r for r in summarise(pts, ["local"])}
    assert s[("local", "overall", "all")]["ttft"]["median_abs"] == pytest.approx(0.3)  # |e| 0.1 0.1 0.5 0.5
    assert s[("local", "overall", "all")]["ttft"]["signed_median"] == pytest.approx(0.0)
    assert s[("local", "engine", "sglang")]["tpot"]["median_abs"] == pytest.approx(1.0)  # 2.0 and 0.0
    assert s[("local", "system", "h200_sxm")]["ttft"]["n"] == 2
    b = {(r["source"], r["by"], r["group"]): r for r in beside(pts, ["local"])}
    assert b[("local", "overall", "all")]["ttft"]["n"] == 2  # the estimator's rows only
    assert b[("local", "overall", "all")]["ttft"]["median_abs"] == pytest.approx(0.1)
    assert b[("aiconfigurator", "overall", "all")]["ttft"]["median_abs"] == pytest.approx(0.1)  # +20%, 0%
    assert b[("aiconfigurator", "overall", "all")]["tpot"]["signed_median"] == pytest.approx(1.2)  # +140%, +100%


def test_estimator_arguments_are_the_rows_as_aiconfigurators_tools_pass_them(rows):
    from perfmodel.silicon_validate import aic_args

    r = _row(rows, "2026_03_25_deepseek_r1_b200_sxm_trtllm_fp4_agg_8192x1024_c256")
    a = aic_args(r)
    assert (a["batch_size"], a["tp_size"], a["attention_dp_size"], a["moe_tp_size"], a["moe_ep_size"]) == (32, 1, 8, 1, 8)
    assert (a["model_path"], a["system_name"], a["backend_name"], a["mode"]) == ("deepseek-ai/DeepSeek-R1", "b200_sxm",
                                                                                "trtllm", "agg")
    assert a["gemm_quant_mode"] == "nvfp4" and a["isl"] == 8192
    # a renamed Llama repository: the config aiconfigurator ships of the same architecture
    llama = _row(rows, "2026_04_06_llama_3_1_70b_b200_sxm_vllm_fp8_agg_1024x1024_c8_tp4_ep1_259")
    assert llama.model_path == "meta-llama/Llama-3.1-70B"
    assert aic_args(llama)["model_path"] == "meta-llama/Meta-Llama-3.1-70B"


def test_estimator_results_read_back_and_bad_lines_refused():
    from perfmodel.silicon_validate import read_aic

    got = read_aic('# {"command": "x"}\n{"id": "a", "ttft_ms": 1.0, "tpot_ms": 2.0, "s": 3}\n{"id": "b", "error": "E: no"}\n')
    assert got == {"a": {"ttft_ms": 1.0, "tpot_ms": 2.0, "s": 3}, "b": {"error": "E: no"}}
    with pytest.raises(silicon.SiliconError, match="line 1"):
        read_aic("not json\n")


def test_a_calibration_per_engine():
    from perfmodel.silicon_validate import _calibration_for

    assert _calibration_for("cal.json", "vllm") == "cal.json"
    assert _calibration_for("vllm=v.json,sglang=s.json", "sglang") == "s.json"
    assert _calibration_for("vllm=v.json", "trtllm") is None and _calibration_for(None, "vllm") is None


def test_inferencex_rows_get_their_scripts_settings(rows):
    """An InferenceX row is priced with what its script set at the row's `measured=` date
    (`perfmodel.inferencex`): the TRT-LLM DeepSeek-R1 run of 2026-02-06 at 8k/1k, C=256 (the sweep of
    the fp4 B200 MTP config, attention DP 8: MTP 1, max_batch_size 256 / 4 a rank, max_num_tokens
    (1 + 1) x 64 + 8192 + 64 = 8384, the ranks' prompts balanced); the SGLang H200 run of
    2026-03-25 at 1k/1k with its chunked prefill size 32768 and 512 running requests at most."""
    e = silicon.express(_row(rows, "2026_03_25_deepseek_r1_b200_sxm_trtllm_fp4_agg_8192x1024_c256"))
    assert e.max_batched_tokens == 8384 and e.request().max_batched_tokens == 8384
    assert e.server == {"max_running": 64, "adp_balance_iters": 60, "spec": "chain", "drafter": "mtp", "draft_tokens": 1}
    assert "dsr1_fp4_b200_trt_mtp" in e.script
    e = silicon.express(_row(rows, "dsr1_h200_sglang_fp8_agg_1024x1024_c4_cfg81"))
    assert (e.max_batched_tokens, e.server) == (32768, {"max_running": 512})
    assert e.request().max_running == 512
    # a calibration point of the row carries them too
    from perfmodel.calibration_schema import ObservedPoint

    pt = ObservedPoint(**e.scenario(), concurrency=e.concurrency, ttft_ms=e.measured_ttft_ms)
    assert (pt.max_running, pt.max_batched_tokens, pt.engine) == (512, 32768, "sglang")


def test_trtllm_rows_without_a_script_get_the_budget_that_serves_them(rows):
    """A TRT-LLM prompt of 8192 tokens cannot sit beside a rank's decodes in its default 8192-token
    budget: a row no script covers is priced with isl + C / ranks (here 8192 + 256 / 8)."""
    row = _row(rows, "2026_03_25_deepseek_r1_b200_sxm_trtllm_fp4_agg_8192x1024_c256")
    e = silicon.express(dataclasses.replace(row, source="aiconfigurator gap analysis"))
    assert e.max_batched_tokens == 8192 + 32 and e.server == {}


# ------------------------------------------------------------------------------ the command line
@pytest.fixture
def cli_db(monkeypatch, db):
    monkeypatch.setattr(aic.Database, "installed", classmethod(lambda cls: db))


def test_cli_without_the_package_is_one_line_naming_the_extra(monkeypatch):
    from importlib import resources

    from typer.testing import CliRunner

    from perfmodel.cli import app

    def missing(name):
        raise ModuleNotFoundError(name)

    monkeypatch.setattr(resources, "files", missing)
    r = CliRunner().invoke(app, ["validate", "--silicon"])
    assert r.exit_code == 2 and "pip install 'perfmodel[aic]'" in r.stderr, r.output
    assert len(r.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("args, says", [
    (["validate", "--model", "deepseek-v3"], "--model goes with --silicon or --published-serving"),
    (["validate", "--silicon", "--transfer"], "choose one of --transfer and --silicon"),
    (["validate", "--silicon", "--way", "guess"], "--way guess"),
    (["validate", "--silicon", "--way", "calibrated"], "needs --calibration"),
    (["validate", "--silicon", "--sample", "0"], "--sample 0"),
    (["validate", "--silicon", "--aic-out", "x.jsonl"], "--aic-out goes with --aic-estimator"),
])
def test_cli_bad_silicon_options_are_one_line(cli_db, args, says):
    from typer.testing import CliRunner

    from perfmodel.cli import app

    r = CliRunner().invoke(app, args)
    assert r.exit_code == 2 and says in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.output


def test_cli_silicon_table_on_the_fixture_with_the_estimators_results(cli_db, tmp_path):
    import json

    from typer.testing import CliRunner

    from perfmodel.cli import app

    est = tmp_path / "aic.jsonl"
    rid = "dsr1_h200_sglang_fp8_agg_1024x1024_c4_cfg81"
    est.write_text(json.dumps({"id": rid, "ttft_ms": 100.0, "tpot_ms": 10.0}) + "\n")
    args = ["validate", "--silicon", "--system", "h200_sxm", "--way", "local,imported", "--aic-results", str(est)]
    r = CliRunner().invoke(app, args + ["--format", "json"])
    assert r.exit_code == 0, r.output
    res = json.loads(r.stdout)
    assert res["counts"]["expressed"] == 6 and res["counts"]["agg_rows"] == 6
    p = next(p for p in res["points"] if p["id"] == rid)
    assert p["id"] == rid and {"local", "imported", "aiconfigurator"} <= set(p["predicted"])
    assert p["predicted"]["aiconfigurator"]["tpot_ms"] == 10.0
    assert any(b["source"] == "aiconfigurator" and b["way"] == "imported" for b in res["beside_aiconfigurator"])
    assert res["not_expressed"] == {}
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0 and "beside aiconfigurator" in r.stdout and "TPOT med |err|" in r.stdout, r.output
    r = CliRunner().invoke(app, args + ["--format", "csv"])
    assert r.exit_code == 0 and r.stdout.count(rid) == 3
    # several runs' files: their rows together; files of two estimator versions refused in one line
    other = next(p["id"] for p in res["points"] if p["id"] != rid)
    more = tmp_path / "aic2.jsonl"
    more.write_text(json.dumps({"id": other, "ttft_ms": 50.0, "tpot_ms": 5.0}) + "\n"
                    + json.dumps({"id": rid, "error": "HuggingFaceDownloadError: offline"}) + "\n")
    r = CliRunner().invoke(app, args + ["--aic-results", str(more), "--format", "json"])
    assert r.exit_code == 0, r.output
    got = {p["id"]: p["predicted"].get("aiconfigurator") for p in json.loads(r.stdout)["points"]}
    assert got[rid]["tpot_ms"] == 10.0 and got[other]["tpot_ms"] == 5.0
    head = '# {"aiconfigurator": "%s"}\n'
    est.write_text(head % "0.12.0" + json.dumps({"id": rid, "ttft_ms": 100.0, "tpot_ms": 10.0}) + "\n")
    more.write_text(head % "0.13.0" + json.dumps({"id": other, "ttft_ms": 50.0, "tpot_ms": 5.0}) + "\n")
    r = CliRunner().invoke(app, args + ["--aic-results", str(more)])
    assert r.exit_code == 2 and "different estimator versions" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_accuracy_rows_of_a_silicon_run():
    """The README's serving rows from a `validate --silicon` result: the priced share against 95%
    at <= 0.5 s a row, and the local way's TPOT against 15% / +-8% and 1.5x the estimator's on the same rows."""
    from perfmodel.reports.anchors import silicon_rows

    def st(med, signed, n=10):
        return {"n": n, "median_abs": med, "p90_abs": 2 * med, "signed_median": signed}

    res = {"database": "aiconfigurator-core 0.12.0", "aiconfigurator": "0.12.0", "ways": ["local"],
           "counts": {"expressed_share_of_those": 0.97, "rows_of_models_and_systems_with_specs": 100, "priced": {"local": 94}},
           "seconds_per_row": {"local": 0.3},
           "summary": [{"source": "local", "by": "overall", "group": "all", "ttft": st(0.3, 0.1), "tpot": st(0.12, -0.05)}],
           "beside_aiconfigurator": [
               {"way": "local", "source": "local", "by": "overall", "group": "all", "ttft": st(0.3, 0.1, 4), "tpot": st(0.2, 0, 4)},
               {"way": "local", "source": "aiconfigurator", "by": "overall", "group": "all", "ttft": st(0.5, 0, 4),
                "tpot": st(0.1, 0, 4)}]}
    (k0, _, v0, _, met0), (k1, _, v1, _, met1), (k2, _, v2, _, met2) = silicon_rows(res)
    assert (k0, v0, met0) == ("silicon-coverage", "expressed 97.0%, priced 94.0% (local) of 100 rows, 0.30 s a row (local)",
                              False)  # 94% priced < 95%
    assert k1 == "silicon-local" and "TPOT median 12.0%, signed -5.0%" in v1 and "over 10 rows, 0.30 s a row" in v1
    assert met1 is True  # 12% <= 15% and -5% within 8%
    assert k2 == "silicon-local-beside-aiconfigurator" and v2.startswith("TPOT 20.0% (aiconfigurator 10.0%)")
    assert met2 is False  # 20% > 1.5 x 10%
    res["beside_aiconfigurator"][1]["tpot"] = st(0.15, 0, 4)
    assert silicon_rows(res)[2][4] is True
    assert len(silicon_rows(res, {"aiconfigurator": "x", "beside_aiconfigurator": []})) == 2  # another run's comparison
    res["counts"]["priced"]["local"] = 95
    assert silicon_rows(res)[0][4] is True
    res["seconds_per_row"]["local"] = 0.6
    assert silicon_rows(res)[0][4] is False  # slower than 0.5 s a row
    # the calibrated way: through the shipped engine calibrations, not called uncalibrated, no goal of its own here
    res |= {"ways": ["calibrated"], "seconds_per_row": {"calibrated": 0.5}, "beside_aiconfigurator": [],
            "summary": [{"source": "calibrated", "by": "overall", "group": "all", "ttft": st(0.3, 0.1), "tpot": st(0.3, 0.2)}]}
    (kc, what, vc, goal, metc), = [r for r in silicon_rows(res) if r[0] == "silicon-calibrated"]
    assert "engine calibrations" in what and "uncalibrated" not in what and "TPOT median 30.0%" in vc
    assert (goal, metc) == ("—", None)
