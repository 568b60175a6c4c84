"""Bad and edge inputs, for every option and every kind of file.

Each case must end in one line on stderr that names the bad value or field, exit code 2,
and no traceback. Files are built from the shipped specs and the embedded profile with one
thing broken; `{name}` in a case's arguments is the path of the file built by FILES[name].
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from perfmodel.cli import app
from perfmodel.request import TWO_GPU_PROFILE, embedded_profile_path, shipped_profile_path

runner = CliRunner()
ROOT = Path(__file__).resolve().parent.parent
H100 = yaml.safe_load((ROOT / "hwspecs/gpus/h100-sxm.yaml").read_text())
LLAMA = yaml.safe_load((ROOT / "perfmodel/modelspecs/llama-3.1-8b.yaml").read_text())
PROFILE = json.loads(embedded_profile_path().read_text())
# the shipped 2-GPU profile: the embedded one was taken on 1 GPU, without collectives
PROFILE_X2 = json.loads(shipped_profile_path(TWO_GPU_PROFILE).read_text())


def _set(d: dict, path: str, value):
    """Copy of d with d[a][b]... = value for path 'a.b...' (value DELETE removes the key)."""
    d = copy.deepcopy(d)
    *keys, last = [int(k) if k.isdigit() else k for k in path.split(".")]
    node = d
    for k in keys:
        node = node[k]
    if value is DELETE:
        del node[last]
    else:
        node[last] = value
    return d


DELETE = object()
FIRST_SAMPLE = next(f"benches.{n}.samples.0" for n, b in PROFILE["benches"].items() if b["samples"])


def _json(obj) -> bytes:
    return json.dumps(obj).encode()  # Python writes NaN/Infinity tokens, as a broken tool would


def _yaml(obj) -> bytes:
    return yaml.safe_dump(obj).encode()


BIG = b"# padding\n" * 1_100_000  # 11 MB

FILES = {
    # profiles
    "prof_list": _json([1, 2]), "prof_number": b"42", "prof_string": b'"hello"', "prof_null": b"null",
    "prof_empty": b"", "prof_binary": bytes(range(256)) * 4, "prof_latin1": '{"a": "caf\xe9"}'.encode("latin-1"),
    "prof_badjson": b"{not json", "prof_big": b"{" + b" " * 11_000_000 + b"}",
    "prof_version": _json(_set(PROFILE, "schema_version", 99)),
    "prof_median0": _json(_set(PROFILE, FIRST_SAMPLE + ".median_ms", 0)),
    "prof_median_neg": _json(_set(PROFILE, FIRST_SAMPLE + ".median_ms", -1.5)),
    "prof_median_nan": _json(_set(PROFILE, FIRST_SAMPLE + ".median_ms", float("nan"))),
    "prof_median_str": _json(_set(PROFILE, FIRST_SAMPLE + ".median_ms", "0.5")),
    "prof_times_inf": _json(_set(PROFILE, FIRST_SAMPLE + ".times_ms", [1.0, float("inf")])),
    "prof_t0_inf": _json(_set(PROFILE, "fits.gemm_bf16.t0_us", float("inf"))),
    "prof_t0_neg": _json(_set(PROFILE, "fits.gemm_bf16.t0_us", -3.0)),
    "prof_bw0": _json(_set(PROFILE, "fits.moe_w4a16.bw_GBps", 0)),
    "prof_bw_nan": _json(_set(PROFILE, "fits.moe_w4a16.bw_GBps", float("nan"))),
    "prof_tflops_ninf": _json(_set(PROFILE, "fits.attention_mla.tflops", float("-inf"))),
    "prof_rmse_neg": _json(_set(PROFILE, "fits.attention_mla.rmse_rel", -0.2)),
    "prof_rmse_bool": _json(_set(PROFILE, "fits.attention_mla.rmse_rel", True)),
    "prof_fit_extra": _json(_set(PROFILE, "fits.gemm_bf16.bogus", 1)),
    "prof_missing_fit": _json(_set(PROFILE, "fits.attention_mla", DELETE)),
    "prof_no_overheads": _json(_set(PROFILE, "overheads", None)),
    "prof_launch0": _json(_set(PROFILE, "overheads.launch_eager_us", 0)),
    "prof_host_nan": _json(_set(PROFILE, "overheads.host_step_us", float("nan"))),
    "prof_tb_empty": _json(_set(PROFILE, "treebuild", {})),
    "prof_tb_inf": _json(_set(PROFILE, "treebuild.gpu.per_node_us", float("inf"))),
    "prof_e2e_model": _json(_set(PROFILE, "e2e.0.model", "no-such-model")),
    "prof_e2e_layers_bool": _json(_set(PROFILE, "e2e.0.n_layers", True)),
    "prof_e2e_step0": _json(_set(PROFILE, "e2e.0.step_ms", 0)),
    "prof_e2e_ctx_neg": _json(_set(PROFILE, "e2e.0.context", -1)),
    "prof_e2e_ngpus0": _json(_set(PROFILE, "e2e.0.n_gpus", 0)),
    "prof_coll_lat_nan": _json(_set(PROFILE_X2, "collectives.0.latency_us", float("nan"))),
    "prof_coll_n1": _json(_set(PROFILE_X2, "collectives.0.n_gpus", 1)),
    "prof_gpu_spec": _json(_set(PROFILE, "provenance.gpu_spec", "no-such-gpu")),
    "prof_no_gpu_spec": _json(_set(PROFILE, "provenance.gpu_spec", None)),
    "prof_kind": _json(_set(PROFILE, "provenance.kind", "guessed")),
    "prof_ceiling_neg": _json(_set(PROFILE, "ceilings.read_GBps", -1)),
    "prof_status": _json(_set(PROFILE, "benches.ceilings.status", "great")),
    "prof_no_e2e": _json(_set(_set(PROFILE, "e2e", []), "benches", {k: v for k, v in PROFILE["benches"].items()
                                                                     if k not in ("foreign", "foreign_prefill")})),
    # GPU specs
    "hw_cap_inf": _yaml(_set(H100, "memory.capacity_GB.value", float("inf"))),
    "hw_bw_inf": _yaml(_set(H100, "memory.bandwidth_GBps.value", float("inf"))),
    "hw_bw_nan": _yaml(_set(H100, "memory.bandwidth_GBps.value", float("nan"))),
    "hw_bw_huge": _yaml(_set(H100, "memory.bandwidth_GBps.value", 1e12)),
    "hw_cap_zero": _yaml(_set(H100, "memory.capacity_GB.value", 0)),
    "hw_cap_neg": _yaml(_set(H100, "memory.capacity_GB.value", -80)),
    "hw_cap_str": _yaml(_set(H100, "memory.capacity_GB.value", "80")),
    "hw_cap_bool": _yaml(_set(H100, "memory.capacity_GB.value", True)),
    "hw_usable_gt": _yaml(_set(H100, "memory.usable_GB", {"value": 120, "source": "typo"})),
    "hw_tflops_inf": _yaml(_set(H100, "compute.bf16_dense_TFLOPS.value", float("inf"))),
    "hw_tflops_huge": _yaml(_set(H100, "compute.bf16_dense_TFLOPS.value", 1e15)),
    "hw_sm_bool": _yaml(_set(H100, "sm_count.value", True)),
    "hw_kind": _yaml(_set(H100, "memory.kind", "HBM9")),
    "hw_extra": _yaml(_set(H100, "memory.bogus", 1)),
    "hw_missing": _yaml(_set(H100, "memory.bandwidth_GBps", DELETE)),
    "hw_nosource": _yaml(_set(H100, "memory.bandwidth_GBps.source", "")),
    "hw_link": _yaml(_set(H100, "default_interconnect", "no-such-link")),
    "hw_list": _yaml([1, 2]), "hw_malformed": b"memory: [unclosed\n", "hw_binary": bytes(range(256)),
    "hw_big": BIG, "hw_empty": b"",
    # model specs
    "m_layers_bool": _yaml(_set(LLAMA, "n_layers", True)),
    "m_layers_zero": _yaml(_set(LLAMA, "n_layers", 0)),
    "m_layers_str": _yaml(_set(LLAMA, "n_layers", "32")),
    "m_layers_float": _yaml(_set(LLAMA, "n_layers", 32.5)),
    "m_hidden_inf": _yaml(_set(LLAMA, "hidden_size", float("inf"))),
    "m_heads_kv": _yaml(_set(LLAMA, "attention.n_kv_heads", 5)),
    "m_heads_neg": _yaml(_set(LLAMA, "attention.n_heads", -32)),
    "m_dense_gt": _yaml(_set(LLAMA, "n_dense_layers", 33)),
    "m_extra": _yaml(_set(LLAMA, "bogus", 1)),
    "m_attn_kind": _yaml(_set(LLAMA, "attention.kind", "linear")),
    "m_dtype": _yaml(_set(LLAMA, "dtypes", {"attention": "fp3"})),
    "m_list": b"- 1\n- 2\n", "m_binary": b"\x00\x01\x02", "m_big": BIG,
    # acceptance calibration files
    "acc_binary": b"\x00\xff" * 10, "acc_list": b"[1, 2]", "acc_nan": _json({"q": [[float("nan")]], "p": [[0.5]]}),
    "acc_big": b"{" + b" " * 11_000_000 + b"}",
}


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("bad")
    out = {}
    for name, data in FILES.items():
        p = d / (name + (".json" if name.startswith(("prof", "acc")) else ".yaml"))
        p.write_bytes(data)
        out[name] = str(p)
    (d / "adir").mkdir()
    out["dir"] = str(d / "adir")
    out["missing"] = str(d / "no-such-file.json")
    out["existing"] = str(d / "existing.json")
    Path(out["existing"]).write_text("{}")
    return out


P = ("project",)
PM = ("project", "--model", "llama-3.1-8b", "--target", "h100", "--gpus", "1")
R = ("report", "--target", "b300", "--gpus", "8")
PE = PM + ("--spec", "chain", "--drafter", "eagle3")

# (id, args, substrings the message must contain)
CASES = [
    # --gpus / --parallel
    ("gpus0", P + ("--gpus", "0"), ["--gpus", "0"]),
    ("gpus_neg", P + ("--gpus", "-4"), ["--gpus", "-4"]),
    ("gpus_word", P + ("--gpus", "eight"), ["eight"]),
    ("gpus3_heads", P + ("--gpus", "3"), ["--gpus 3", "64 attention heads"]),
    ("gpus1000_heads", P + ("--gpus", "1000"), ["--gpus 1000", "heads"]),
    ("gpus_huge", P + ("--gpus", "10000000"), ["--gpus", "10000000"]),
    ("gpus12_heads", P + ("--gpus", "12"), ["--gpus 12", "64"]),
    ("llama_gpus3", PM[:-1] + ("3",), ["--gpus 3", "32 attention heads"]),
    ("llama_kv_16", ("project", "--model", "qwen3-30b-a3b", "--target", "h100", "--gpus", "64"), ["--gpus 64"]),
    ("ep7", P + ("--parallel", "ep", "--gpus", "7"), ["384", "7"]),
    ("ep5", P + ("--parallel", "ep", "--gpus", "5"), ["384", "5"]),
    ("ep1000", P + ("--parallel", "ep", "--gpus", "1000"), ["384", "1000"]),
    ("tpattn_ep3", P + ("--parallel", "tp-attn-ep-moe", "--gpus", "3"), ["--gpus 3"]),
    ("ep_dense", PM + ("--parallel", "ep"), ["--parallel ep", "dense"]),
    ("parallel_bad", P + ("--parallel", "dp"), ["dp"]),
    # --concurrency
    ("conc0", P + ("--concurrency", "0"), ["--concurrency", "0"]),
    ("conc_neg", P + ("--concurrency", "1,-8"), ["--concurrency", "-8"]),
    ("conc_word", P + ("--concurrency", "a,b"), ["--concurrency", "a,b"]),
    ("conc_float", P + ("--concurrency", "1.5"), ["--concurrency", "1.5"]),
    ("conc_empty", P + ("--concurrency", ""), ["--concurrency"]),
    ("conc_commas", P + ("--concurrency", ",,,"), ["--concurrency"]),
    ("conc_huge", P + ("--concurrency", "100000000"), ["--concurrency", "100000000"]),
    # --context
    ("ctx0", P + ("--context", "0"), ["--context", "0"]),
    ("ctx_neg", P + ("--context", "-1"), ["--context", "-1"]),
    ("ctx_huge", P + ("--context", "99999999999"), ["--context", "99999999999"]),
    ("ctx_word", P + ("--context", "long"), ["long"]),
    ("ctx0_llama", PM + ("--context", "0"), ["--context", "0"]),
    # --budget
    ("budget0", P + ("--spec", "ddtree", "--budget", "0"), ["--budget", "0"]),
    ("budget_neg", P + ("--spec", "ddtree", "--budget", "-5"), ["--budget", "-5"]),
    ("budget_word", P + ("--spec", "ddtree", "--budget", "lots"), ["--budget", "lots"]),
    ("budget_huge", P + ("--spec", "ddtree", "--budget", "1000000"), ["--budget", "1000000"]),
    # --spec / --tree-build / --graphs
    ("spec_bad", P + ("--spec", "medusa"), ["medusa"]),
    ("kernels_bad", P + ("--kernels", "cutlass"), ["--kernels", "unknown kernel set 'cutlass'"]),
    ("kernels_spec_profile", P + ("--kernels", "torch", "--profile", "spec"), ["kernel set 'torch'"]),
    ("spec_no_drafter", PM + ("--spec", "ddtree"), ["--spec ddtree", "drafter"]),
    ("tree_bad", P + ("--tree-build", "fpga"), ["fpga"]),
    # --draft-topk (an EAGLE tree: its branching, its nodes in --budget)
    ("topk0", PE + ("--draft-topk", "0"), ["--draft-topk", "0"]),
    ("topk_word", PE + ("--draft-topk", "wide"), ["--draft-topk", "wide"]),
    ("topk_huge", PE + ("--draft-topk", "65"), ["--draft-topk", "65"]),
    ("topk_no_budget", PE + ("--draft-topk", "4"), ["--draft-topk 4", "--budget"]),
    ("topk_budget_over", PE + ("--draft-topk", "2", "--draft-tokens", "2", "--budget", "7"), ["--budget 7", "6 draft nodes"]),
    ("topk_no_spec", PM + ("--draft-topk", "4"), ["--draft-topk", "--spec"]),
    ("topk_dflash", P + ("--spec", "chain", "--draft-topk", "4"), ["--draft-topk", "DFlash"]),
    # --acceptance
    ("acc_tau_gt_b", P + ("--spec", "ddtree", "--acceptance", "table:16=100"), ["table:16=100", "100"]),
    ("acc_tau_gt_block", P + ("--spec", "ddtree", "--acceptance", "table:64=30"), ["table:64=30", "block size"]),
    ("acc_tau_gt_b_small", P + ("--spec", "ddtree", "--acceptance", "table:2=3.5"), ["table:2=3.5", "B+1"]),
    ("acc_tau_lt1", P + ("--spec", "ddtree", "--acceptance", "table:16=0.5"), ["0.5"]),
    ("acc_tau_decreasing", P + ("--spec", "ddtree", "--acceptance", "table:16=6,64=4"), ["non-decreasing"]),
    ("acc_tau_nan", P + ("--spec", "ddtree", "--acceptance", "table:16=nan"), ["tau"]),
    ("acc_table_word", P + ("--spec", "ddtree", "--acceptance", "table:x=y"), ["x=y"]),
    ("acc_table_noeq", P + ("--spec", "ddtree", "--acceptance", "table:16"), ["16"]),
    ("acc_table_empty", P + ("--spec", "ddtree", "--acceptance", "table:"), ["empty table"]),
    ("acc_table_dup", P + ("--spec", "ddtree", "--acceptance", "table:16=5,16=6"), ["duplicate"]),
    ("acc_alpha_big", P + ("--spec", "chain", "--acceptance", "1.5"), ["1.5"]),
    ("acc_alpha_neg", P + ("--spec", "chain", "--acceptance", "-0.1"), ["-0.1"]),
    ("acc_alpha_nan", P + ("--spec", "chain", "--acceptance", "nan"), ["nan"]),
    ("acc_alpha_inf", P + ("--spec", "chain", "--acceptance", "inf"), ["inf"]),
    ("acc_preset", P + ("--spec", "ddtree", "--acceptance", "nosuchpreset"), ["nosuchpreset"]),
    ("acc_param_preset", P + ("--spec", "ddtree", "--acceptance", "parametric:nosuch"), ["nosuch"]),
    ("acc_empty", P + ("--spec", "ddtree", "--acceptance", " "), ["acceptance"]),
    ("acc_file_missing", P + ("--spec", "ddtree", "--acceptance", "file:{missing}"), ["no-such-file.json"]),
    ("acc_file_dir", P + ("--spec", "ddtree", "--acceptance", "file:{dir}"), ["adir"]),
    ("acc_file_binary", P + ("--spec", "ddtree", "--acceptance", "file:{acc_binary}"), ["acc_binary.json"]),
    ("acc_file_list", P + ("--spec", "ddtree", "--acceptance", "file:{acc_list}"), ["acc_list.json"]),
    ("acc_file_nan", P + ("--spec", "ddtree", "--acceptance", "file:{acc_nan}"), ["acc_nan.json"]),
    ("acc_file_big", P + ("--spec", "ddtree", "--acceptance", "file:{acc_big}"), ["acc_big.json", "MB"]),
    ("acc_file_nopath", P + ("--spec", "ddtree", "--acceptance", "file:"), ["missing path"]),
    # --host-cpu-factor
    ("host0", P + ("--host-cpu-factor", "0"), ["--host-cpu-factor"]),
    ("host_neg", P + ("--host-cpu-factor", "-1"), ["--host-cpu-factor"]),
    ("host_nan", P + ("--host-cpu-factor", "nan"), ["--host-cpu-factor", "nan"]),
    ("host_inf", P + ("--host-cpu-factor", "inf"), ["--host-cpu-factor", "inf"]),
    ("host_ninf", P + ("--host-cpu-factor", "-inf"), ["--host-cpu-factor", "-inf"]),
    ("host_huge", P + ("--host-cpu-factor", "1e9"), ["--host-cpu-factor"]),
    ("host_word", P + ("--host-cpu-factor", "fast"), ["fast"]),
    ("host_nan_sens", P + ("--host-cpu-factor", "nan", "--sensitivity"), ["--host-cpu-factor", "nan"]),
    ("host_inf_sens", P + ("--host-cpu-factor", "inf", "--sensitivity"), ["--host-cpu-factor", "inf"]),
    ("host_nan_json", P + ("--host-cpu-factor", "nan", "-f", "json"), ["--host-cpu-factor", "nan"]),
    ("host_inf_report", R + ("--host-cpu-factor", "inf", "--out", "{dir}/r"), ["--host-cpu-factor", "inf"]),
    ("host_nan_report", R + ("--host-cpu-factor", "nan", "--out", "{dir}/r"), ["--host-cpu-factor", "nan"]),
    # --observed
    ("obs_version", P + ("--observed", "rtx-pro-6000,tp8,c=1,1.2.3tok/s"), ["1.2.3tok/s"]),
    ("obs_zero", P + ("--observed", "rtx-pro-6000,tp8,c=1,0tok/s"), ["0tok/s"]),
    ("obs_tp0", P + ("--observed", "rtx-pro-6000,tp0,c=1,98tok/s"), ["tp0"]),
    ("obs_c0", P + ("--observed", "rtx-pro-6000,tp8,c=0,98tok/s"), ["c=0"]),
    ("obs_fast", P + ("--observed", "rtx-pro-6000,tp8,c=1,1000000tok/s"), ["1000000tok/s", "faster than physics"]),
    ("obs_fast_h200", P + ("--observed", "h200,tp8,c=1,5000tok/s"), ["5000tok/s", "physics"]),
    ("obs_tp3", P + ("--observed", "rtx-pro-6000,tp3,c=1,30tok/s"), ["tp3", "64"]),
    ("obs_ep7", P + ("--observed", "h200,ep7,c=1,30tok/s"), ["ep7", "384"]),
    ("obs_gpu", P + ("--observed", "nosuchgpu,tp8,c=1,98tok/s"), ["nosuchgpu"]),
    ("obs_garbage", P + ("--observed", "fast"), ["fast"]),
    ("obs_neg", P + ("--observed", "rtx-pro-6000,tp8,c=1,-5tok/s"), ["-5tok/s"]),
    ("obs_ctx0", P + ("--observed", "rtx-pro-6000,tp8,c=1,98tok/s,ctx=0"), ["ctx=0"]),
    ("obs_dot", P + ("--observed", "rtx-pro-6000,tp8,c=1,.tok/s"), [".tok/s"]),
    # names
    ("target_bad", P + ("--target", "nosuchgpu"), ["nosuchgpu"]),
    ("target_empty", P + ("--target", ""), ["unknown GPU"]),
    ("model_bad", P + ("--model", "nosuchmodel"), ["nosuchmodel"]),
    ("link_bad", P + ("--link", "nosuchlink"), ["--link", "nosuchlink"]),
    ("link_bad_1gpu", PM + ("--link", "nosuchlink"), ["--link", "nosuchlink"]),
    ("format_bad", P + ("--format", "xml"), ["xml"]),
    # --profile
    ("prof_dir", P + ("--profile", "{dir}"), ["adir", "directory"]),
    ("prof_missing", P + ("--profile", "{missing}"), ["no-such-file.json", "no such file"]),
] + [
    (f"{name}", P + ("--profile", "{" + name + "}"), [f"{name}.json"] + extra)
    for name, extra in [
        ("prof_list", ["array"]), ("prof_number", ["number"]), ("prof_string", ["string"]), ("prof_null", ["null"]),
        ("prof_empty", ["not valid JSON"]), ("prof_binary", ["binary"]), ("prof_latin1", ["UTF-8"]),
        ("prof_badjson", ["not valid JSON"]), ("prof_big", ["MB"]), ("prof_version", ["schema_version", "99"]),
        ("prof_median0", ["median_ms"]), ("prof_median_neg", ["median_ms", "-1.5"]),
        ("prof_median_nan", ["median_ms", "nan"]), ("prof_median_str", ["median_ms", "0.5"]),
        ("prof_times_inf", ["times_ms"]), ("prof_t0_inf", ["gemm_bf16.t0_us", "inf"]),
        ("prof_t0_neg", ["gemm_bf16.t0_us"]), ("prof_bw0", ["moe_w4a16.bw_GBps"]),
        ("prof_bw_nan", ["moe_w4a16.bw_GBps"]), ("prof_tflops_ninf", ["attention_mla.tflops"]),
        ("prof_rmse_neg", ["rmse_rel", "-0.2"]), ("prof_rmse_bool", ["rmse_rel", "True"]),
        ("prof_fit_extra", ["bogus"]), ("prof_host_nan", ["host_step_us"]), ("prof_launch0", ["launch_eager_us"]),
        ("prof_tb_inf", ["per_node_us"]), ("prof_e2e_model", ["e2e.0.model", "no-such-model"]),
        ("prof_e2e_layers_bool", ["e2e.0.n_layers"]), ("prof_e2e_step0", ["e2e.0.step_ms"]),
        ("prof_e2e_ctx_neg", ["e2e.0.context"]), ("prof_e2e_ngpus0", ["e2e.0.n_gpus"]),
        ("prof_coll_lat_nan", ["collectives.0.latency_us"]), ("prof_coll_n1", ["collectives.0.n_gpus"]),
        ("prof_gpu_spec", ["gpu_spec", "no-such-gpu"]), ("prof_kind", ["provenance.kind", "guessed"]),
        ("prof_ceiling_neg", ["ceilings.read_GBps"]), ("prof_status", ["status", "great"]),
    ]
] + [
    ("prof_no_overheads", P + ("--profile", "{prof_no_overheads}"), ["overheads"]),
    ("prof_no_gpu_spec", P + ("--profile", "{prof_no_gpu_spec}"), ["gpu_spec"]),
    ("prof_tb_empty_ddtree", P + ("--spec", "ddtree", "--profile", "{prof_tb_empty}"), ["tree-build", "gpu"]),
    ("prof_tb_empty_cpu", P + ("--spec", "ddtree", "--tree-build", "cpu", "--profile", "{prof_tb_empty}"), ["cpu"]),
    ("prof_e2e_model_table", P + ("--profile", "{prof_e2e_model}", "-f", "table"), ["no-such-model"]),
] + [
    (f"{name}", P + ("--hw-file", "{" + name + "}"), [f"{name}.yaml"] + extra)
    for name, extra in [
        ("hw_cap_inf", ["capacity_GB", "inf"]), ("hw_bw_inf", ["bandwidth_GBps", "inf"]),
        ("hw_bw_nan", ["bandwidth_GBps", "nan"]), ("hw_bw_huge", ["bandwidth_GBps"]),
        ("hw_cap_zero", ["capacity_GB", "0"]), ("hw_cap_neg", ["capacity_GB", "-80"]),
        ("hw_cap_str", ["capacity_GB", "'80'"]), ("hw_cap_bool", ["capacity_GB", "True"]),
        ("hw_usable_gt", ["usable_GB", "120"]), ("hw_tflops_inf", ["bf16_dense_TFLOPS"]),
        ("hw_tflops_huge", ["bf16_dense_TFLOPS"]), ("hw_sm_bool", ["sm_count"]), ("hw_kind", ["HBM9"]),
        ("hw_extra", ["bogus", "unknown field"]), ("hw_missing", ["bandwidth_GBps"]), ("hw_nosource", ["source"]),
        ("hw_link", ["no-such-link"]), ("hw_list", ["mapping"]), ("hw_malformed", ["malformed YAML"]),
        ("hw_binary", ["binary"]), ("hw_big", ["MB"]), ("hw_empty", ["mapping"]),
    ]
] + [
    ("hw_dir", P + ("--hw-file", "{dir}"), ["adir", "directory"]),
    ("hw_missing_file", P + ("--hw-file", "{missing}"), ["no-such-file.json"]),
] + [
    (f"{name}", P + ("--model-file", "{" + name + "}"), [f"{name}.yaml"] + extra)
    for name, extra in [
        ("m_layers_bool", ["n_layers", "True"]), ("m_layers_zero", ["n_layers", "0"]), ("m_layers_str", ["n_layers", "'32'"]),
        ("m_layers_float", ["n_layers", "32.5"]), ("m_hidden_inf", ["hidden_size"]), ("m_heads_kv", ["n_kv_heads=5"]),
        ("m_heads_neg", ["n_heads", "-32"]), ("m_dense_gt", ["n_dense_layers"]), ("m_extra", ["bogus"]),
        ("m_attn_kind", ["linear"]), ("m_dtype", ["fp3"]), ("m_list", ["mapping"]), ("m_binary", ["binary"]),
        ("m_big", ["MB"]),
    ]
] + [
    ("m_dir", P + ("--model-file", "{dir}"), ["adir", "directory"]),
    # report
    ("report_source", R + ("--source", "nosuchgpu", "--out", "{dir}/r"), ["--source", "nosuchgpu"]),
    ("report_out_file", R + ("--out", "{existing}"), ["existing.json", "not a directory"]),
    ("report_out_under_file", R + ("--out", "{existing}/sub"), ["existing.json"]),
    ("report_profile_dir", R + ("--profile", "{dir}", "--out", "{dir}/r"), ["adir"]),
    ("report_gpus3", R[:3] + ("--gpus", "3", "--out", "{dir}/r"), ["--gpus 3"]),
    ("report_ctx0", R + ("--context", "0", "--out", "{dir}/r"), ["--context", "0"]),
    ("report_link", R + ("--link", "nosuchlink", "--out", "{dir}/r"), ["nosuchlink"]),
    # validate
    ("val_tol_neg", ("validate", "--tolerance", "-1"), ["--tolerance", "-1"]),
    ("val_tol_nan", ("validate", "--tolerance", "nan"), ["--tolerance", "nan"]),
    ("val_tol_inf", ("validate", "--tolerance", "inf"), ["--tolerance", "inf"]),
    ("val_tol_word", ("validate", "--tolerance", "loose"), ["loose"]),
    ("val_nothing", ("validate", "--no-published", "--profile", "{prof_no_e2e}"), ["nothing was checked"]),
    ("val_prof_dir", ("validate", "--profile", "{dir}"), ["adir", "directory"]),
    ("val_prof_list", ("validate", "--profile", "{prof_list}"), ["prof_list.json"]),
    ("val_prof_binary", ("validate", "--profile", "{prof_binary}"), ["prof_binary.json"]),
    ("val_prof_model", ("validate", "--profile", "{prof_e2e_model}"), ["prof_e2e_model.json", "no-such-model"]),
    ("val_prof_nan", ("validate", "--profile", "{prof_median_nan}"), ["median_ms"]),
    ("val_base_dir", ("validate", "--base", "{dir}"), ["adir"]),
    ("val_base_missing", ("validate", "--base", "{missing}"), ["no-such-file.json"]),
    # other commands
    ("schema_bad", ("schema", "nosuch"), ["nosuch"]),
    ("hw_show_bad", ("hw", "show", "nosuchgpu"), ["nosuchgpu"]),
    ("models_show_bad", ("models", "show", "nosuchmodel"), ["nosuchmodel"]),
    # measure: checked before looking for CUDA
    ("measure_out_dir", ("measure", "--out", "{dir}"), ["--out", "adir", "directory"]),
    ("measure_only_bad", ("measure", "--only", "nosuchbench", "--out", "{dir}/p.json"), ["--only", "nosuchbench"]),
    ("measure_exists", ("measure", "--out", "{existing}"), ["existing.json", "--resume", "--force"]),
    ("measure_under_file", ("measure", "--out", "{existing}/p.json"), ["existing.json"]),
]


@pytest.mark.parametrize("case_id,args,expect", CASES, ids=[c[0] for c in CASES])
def test_bad_input(files, case_id, args, expect):
    argv = [a.format(**files) for a in args]
    r = runner.invoke(app, argv)
    out = r.output + (r.stderr or "")
    assert r.exception is None or isinstance(r.exception, SystemExit), f"{argv}: {r.exception!r}"
    assert "Traceback" not in out
    assert r.exit_code == 2, f"{argv}: exit {r.exit_code}\n{out}"
    msg = r.stderr.strip()
    assert msg, f"{argv}: no message on stderr"
    for s in expect:
        s = s.format(**files)
        assert s in msg, f"{argv}: {s!r} not in {msg!r}"
    assert r.stdout.strip() == "", f"{argv}: wrote to stdout on failure: {r.stdout!r}"


def test_case_count():
    assert len(CASES) >= 150
    assert len({c[0] for c in CASES}) == len(CASES)
