"""Hostile input files, on every command that reads one: each must end in one line on stderr that
names the file (and the field or the value), exit code 2, no traceback, nothing on stdout.

Written as data. `KINDS` holds each kind of file a user gives (a valid document to break and the
commands that read it, `{f}` standing for the file); `GENERIC` the breakages every file of a kind
gets (nesting depth, duplicate keys, YAML aliases and merge keys, NaN, numbers past a float or
past Python's digit limit, bad UTF-8, NUL bytes, an oversized file, a line break in its name, a
FIFO, a device, a directory);
`SPECIFIC` one broken field of one kind, with the words the message must hold. A new command that
reads a kind of file is one line in `KINDS` (a test walks the CLI and asks for one per file
option); a new breakage one line in `GENERIC` or `SPECIFIC`.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest
import yaml
from test_bad_inputs import DELETE, _set
from typer.testing import CliRunner

from perfmodel.cli import app

runner = CliRunner()
ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "tests" / "fixtures"

OBS = yaml.safe_load((ROOT / "reports/examples/reference_observed.yaml").read_text())
CALIB = json.loads((ROOT / "reports/examples/b300-calibrated/calib.json").read_text())
VLLM = json.loads((FIX / "bench/vllm_bench_serve.json").read_text())
SGLANG = (FIX / "bench/sglang_bench_serving.jsonl").read_text()
HF = json.loads((FIX / "hf/llama-3.1-8b.json").read_text())
H100 = yaml.safe_load((ROOT / "hwspecs/gpus/h100-sxm.yaml").read_text())
LLAMA = yaml.safe_load((ROOT / "perfmodel/modelspecs/llama-3.1-8b.yaml").read_text())
PROFILE_SMALL = {"schema_version": 2, "provenance": {}}  # broken before its schema is read
LENGTHS = [[1024, 256], [2048, 128]]
ACCEPT = {"q": [[0.6, 0.2], [0.5, 0.1]], "p": [[0.7, 0.1], [0.6, 0.1]]}
SERVING = yaml.safe_load((FIX / "published_serving/three_points.yaml").read_text())

S = "rtx-pro-6000"
LLAMA_H100 = ("--model", "llama-3.1-8b", "--target", "h100", "--gpus", "1")
BENCH_SETUP = ("--target", S, "--gpus", "8", "--model", "kimi-k2.6")

# kind: (format, a valid document, the commands that read the file `{f}`; `{d}` is a scratch folder)
KINDS = {
    "profile": ("json", PROFILE_SMALL, [
        ("project", "--profile", "{f}"),
        ("report", "--target", "b300", "--gpus", "8", "--profile", "{f}", "--out", "{d}/r"),
        ("compare", "--target", "h200,b200", "--gpus", "8", "--profile", "{f}"),
        ("validate", "--profile", "{f}"),
        ("validate", "--base", "{f}"),
        ("calibrate", str(ROOT / "reports/examples/reference_observed.yaml"), "--profile", "{f}", "--out", "{d}/c.json"),
        ("step", "--decode", "8@4096", "--profile", "{f}"),
        ("profile", "import-aic", "--system", "b300_sxm", "--engine", "sglang@0.5.14", "--out", "{d}/c.json",
         "--fallback-profile", "{f}"),
    ]),
    "hw": ("yaml", H100, [("project", "--hw-file", "{f}"), ("report", "--hw-file", "{f}", "--out", "{d}/r"),
                          ("step", "--decode", "8@4096", "--hw-file", "{f}"), ("compare", "--gpus", "1,2", "--hw-file", "{f}")]),
    "model": ("yaml", LLAMA, [("project", "--model-file", "{f}"), ("step", "--decode", "8@4096", "--model-file", "{f}"),
                              ("compare", "--target", "h100,h200", "--gpus", "1", "--model-file", "{f}"),
                              ("report", "--target", "h100", "--gpus", "1", "--model-file", "{f}", "--out", "{d}/r")]),
    "hf": ("json", HF, [("models", "import", "{f}"), ("project", "--model-file", "{f}")]),
    "calib": ("json", CALIB, [
        ("project", "--calibration", "{f}"),
        ("report", "--target", "b300", "--gpus", "8", "--calibration", "{f}", "--out", "{d}/r"),
        ("compare", "--target", "h200,b300", "--gpus", "8", "--calibration", "{f}"),
        ("validate", "--calibration", "{f}"),
        ("step", "--decode", "8@4096", "--calibration", "{f}"),
    ]),
    "obs": ("yaml", OBS, [("calibrate", "{f}", "--out", "{d}/c.json")]),
    "vllm": ("json", VLLM, [("calibrate", "--from-vllm", "{f}", *BENCH_SETUP, "--out", "{d}/c.json")]),
    "sglang": ("jsonl", SGLANG, [("calibrate", "--from-sglang", "{f}", *BENCH_SETUP, "--out", "{d}/c.json")]),
    "lengths": ("json", LENGTHS, [("project", "--lengths-file", "{f}", *LLAMA_H100),
                                  ("compare", "--lengths-file", "{f}", "--model", "llama-3.1-8b", "--target", "h100,h200",
                                   "--gpus", "1"),
                                  ("report", "--lengths-file", "{f}", *LLAMA_H100, "--out", "{d}/r")]),
    "accept": ("json", ACCEPT, [("project", "--spec", "ddtree", "--acceptance", "file:{f}")]),
    "serving": ("yaml", SERVING, [("validate", "--published-serving", "--serving-file", "{f}")]),
}


def _deep(fmt: str) -> bytes:
    return (b"[" * 50_000 + b"]" * 50_000) if fmt != "yaml" else (b"a: " + b"[" * 50_000 + b"]" * 50_000 + b"\n")


def _dup(fmt: str, doc) -> bytes:
    if fmt == "yaml":
        key = next(iter(doc))
        return yaml.safe_dump(doc).encode() + yaml.safe_dump({key: doc[key]}).encode()
    if fmt == "jsonl":
        first = doc.splitlines()[0]
        return (first[:-1] + ', "backend": "x"}\n').encode()
    if isinstance(doc, list):
        return b'{"a": 1, "a": 2}'
    key = next(iter(doc))
    return ("{" + json.dumps(key) + ": " + json.dumps(doc[key]) + ", " + json.dumps(doc)[1:]).encode()


ALIAS_BOMB = b"""a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: [*f,*f,*f,*f,*f,*f,*f,*f,*f]
"""

# breakage: (formats it applies to, the bytes from (format, document), words of the message); bench
# results may hold Infinity where perfmodel reads nothing (SGLang writes "request_rate": Infinity)
BENCH = ("vllm", "sglang")
GENERIC = {
    "deep": (("json", "yaml", "jsonl"), lambda fmt, doc: _deep(fmt), ["nest"]),
    "dup": (("json", "yaml", "jsonl"), _dup, ["duplicate key"]),
    "alias": (("yaml",), lambda fmt, doc: ALIAS_BOMB, ["anchors and aliases"]),
    "merge": (("yaml",), lambda fmt, doc: b"x: 1\n<<: {y: 2}\n", ["merge keys"]),
    "nan": (("json",),  lambda fmt, doc: b'{"x": NaN}' if isinstance(doc, dict) else b"[[NaN, 1]]", ["not a finite number"]),
    "huge_number": (("json",), lambda fmt, doc: b'{"x": 1e400}' if isinstance(doc, dict) else b"[[1e400, 1]]",
                    ["not a finite number"]),
    "digits": (("json", "yaml", "jsonl"), lambda fmt, doc: b'{"x": 1' + b"9" * 5000 + b"}", ["digits"]),
    "utf8": (("json", "yaml", "jsonl"), lambda fmt, doc: b'{"a": "caf\xe9"}', ["not UTF-8"]),
    "nul": (("json", "yaml", "jsonl"), lambda fmt, doc: b"\x00\x01", ["binary file"]),
    "big": (("json", "yaml", "jsonl"), lambda fmt, doc: b" " * 10_000_001, ["MB limit"]),
    "empty": (("json",), lambda fmt, doc: b"", ["not valid JSON"]),
    "line_break_in_name": (("json", "yaml", "jsonl"), "line break", []),
    "fifo": (("json", "yaml", "jsonl"), "fifo", ["not a regular file"]),
    "device": (("json", "yaml", "jsonl"), "/dev/zero", ["not a regular file"]),
    "dir": (("json", "yaml", "jsonl"), "dir", ["directory"]),
}


def _j(doc, path: str, value) -> bytes:
    return json.dumps(_set(doc, path, value)).encode()


def _y(doc, path: str, value) -> bytes:
    return yaml.safe_dump(_set(doc, path, value)).encode()


def _factor(name: str) -> int:
    return next(i for i, f in enumerate(CALIB["factors"]) if f["name"] == name)


def _sglang(field: str, value) -> bytes:
    rec = json.loads(SGLANG.splitlines()[0])
    rec[field] = value
    return (json.dumps(rec) + "\n").encode()


def _obs_point(**kw) -> bytes:
    p = {k: v for k, v in OBS["points"][0].items() if k != "tokens_per_s_per_stream"} | kw
    return yaml.safe_dump({"engine": "e", "points": [p]}).encode()


# (id, kind, file bytes, words the message must hold)
SPECIFIC = [
    # calib.json read back: each factor is a positive finite multiplier (µs ≥ 0 for the host term),
    # σ ≥ 0, a known name once, the schema version known
    ("calib_bw0", "calib", _j(CALIB, f"factors.{_factor('bw.moe')}.value", 0.0), ["factors.", "value", "0"]),
    ("calib_floor_neg", "calib", _j(CALIB, f"factors.{_factor('floor.moe')}.value", -0.5), ["value", "-0.5"]),
    ("calib_factor_huge", "calib", _j(CALIB, f"factors.{_factor('bw.moe')}.value", 1e300), ["value", "1e+300"]),
    ("calib_factor_bool", "calib", _j(CALIB, f"factors.{_factor('bw.moe')}.value", True), ["value", "True"]),
    ("calib_factor_str", "calib", _j(CALIB, f"factors.{_factor('bw.moe')}.value", "0.5"), ["value", "'0.5'"]),
    ("calib_sigma_neg", "calib", _j(CALIB, "factors.0.sigma_post", -0.1), ["sigma_post", "-0.1"]),
    ("calib_prior_neg", "calib", _j(CALIB, "factors.0.sigma_prior", -1.0), ["sigma_prior", "-1"]),
    ("calib_factor_unknown", "calib", _j(CALIB, "factors.0.name", "bw.warp_drive"), ["bw.warp_drive"]),
    ("calib_factor_dup", "calib", _j(CALIB, "factors.1.name", CALIB["factors"][0]["name"]),
     ["factors", "bw.attention", "more than once"]),
    ("calib_version", "calib", _j(CALIB, "schema_version", 99), ["schema_version", "99"]),
    ("calib_version_bool", "calib", _j(CALIB, "schema_version", True), ["schema_version", "True"]),
    ("calib_host_neg", "calib", _j(CALIB, f"factors.{_factor('engine_host_us')}.value", -50.0), ["engine_host_us", "-50"]),
    ("calib_ttft_wait_huge", "calib", _j(_set(CALIB, f"factors.{_factor('engine_host_us')}.name", "engine_ttft_steps"),
                                         f"factors.{_factor('engine_host_us')}.value", 900.0), ["engine_ttft_steps", "900", "steps"]),
    ("calib_ttft_ms_huge", "calib", _j(_set(CALIB, f"factors.{_factor('engine_host_us')}.name", "engine_ttft_ms"),
                                       f"factors.{_factor('engine_host_us')}.value", 2e4), ["engine_ttft_ms", "20000", "ms"]),
    ("calib_ttft_ms_neg", "calib", _j(_set(CALIB, f"factors.{_factor('engine_host_us')}.name", "engine_ttft_ms"),
                                      f"factors.{_factor('engine_host_us')}.value", -5.0), ["engine_ttft_ms", "-5"]),
    ("calib_err_neg", "calib", _j(CALIB, "median_abs_err", -0.1), ["median_abs_err", "-0.1"]),
    ("calib_list", "calib", b"[1, 2]", ["expected a mapping"]),
    # OBSERVED.yaml: figures physical, strict types, layouts as `project` checks them
    ("obs_tps_huge", "obs", _obs_point(tokens_per_s_per_stream=1e300), ["tokens_per_s_per_stream", "1e+300"]),
    ("obs_step_huge", "obs", _obs_point(step_ms=1e300), ["step_ms", "1e+300"]),
    ("obs_step_tiny", "obs", _obs_point(step_ms=1e-300), ["step_ms", "1e-300"]),
    ("obs_tps_tiny", "obs", _obs_point(tokens_per_s_per_stream=1e-300), ["tokens_per_s_per_stream", "1e-300"]),
    ("obs_tpot_huge", "obs", _obs_point(tpot_ms=1e300), ["tpot_ms", "1e+300"]),
    ("obs_tps_bool", "obs", _obs_point(tokens_per_s_per_stream=True), ["tokens_per_s_per_stream", "True"]),
    ("obs_tps_str", "obs", _obs_point(tokens_per_s_per_stream="98"), ["tokens_per_s_per_stream", "'98'"]),
    ("obs_sigma_bool", "obs", _obs_point(tokens_per_s_per_stream=98.0, rel_sigma=True), ["rel_sigma", "True"]),
    ("obs_conc_bool", "obs", _obs_point(tokens_per_s_per_stream=98.0, concurrency=True), ["concurrency", "True"]),
    ("obs_ctx_bool", "obs", _obs_point(tokens_per_s_per_stream=98.0, context=True), ["context", "True"]),
    ("obs_gpus_float", "obs", _obs_point(tokens_per_s_per_stream=98.0, gpus=8.0), ["gpus", "8.0"]),
    ("obs_tp3", "obs", _obs_point(tokens_per_s_per_stream=98.0, gpus=3, parallel="tp"), ["point 0", "--gpus 3", "64"]),
    ("obs_ep7", "obs", _obs_point(tokens_per_s_per_stream=98.0, gpus=7, parallel="ep"), ["point 0", "384", "7"]),
    ("obs_tp1000", "obs", _obs_point(tokens_per_s_per_stream=98.0, gpus=1000), ["point 0", "--gpus 1000"]),
    ("obs_gpus_huge", "obs", _obs_point(tokens_per_s_per_stream=98.0, gpus=10**9), ["point 0", "--gpus"]),
    ("obs_ctx_huge", "obs", _obs_point(tokens_per_s_per_stream=98.0, context=10**12), ["point 0", "--context"]),
    ("obs_conc_huge", "obs", _obs_point(tokens_per_s_per_stream=98.0, concurrency=10**12), ["point 0", "concurrency"]),
    ("obs_engine_num", "obs", yaml.safe_dump({"engine": 5, "points": OBS["points"]}).encode(), ["engine", "5"]),
    ("obs_points_map", "obs", yaml.safe_dump({"engine": "e", "points": {"a": 1}}).encode(), ["points"]),
    ("obs_list", "obs", b"- 1\n- 2\n", ["expected a mapping"]),
    ("obs_inf", "obs", _obs_point(step_ms=float("inf")), ["step_ms", "inf"]),
    ("obs_too_many", "obs", yaml.safe_dump({"engine": "e", "points": [OBS["points"][0] | {"concurrency": c}
                                                                     for c in range(1, 300)]}).encode(),
     ["points", "at most 256"]),
    # bench results: the fields read, typed and in range
    ("vllm_completed0", "vllm", _j(VLLM, "completed", 0), ["completed", "0"]),
    ("vllm_completed_neg", "vllm", _j(VLLM, "completed", -64), ["completed", "-64"]),
    ("vllm_tokens_neg", "vllm", _j(VLLM, "total_input_tokens", -1), ["total_input_tokens", "-1"]),
    ("vllm_out_tokens_neg", "vllm", _j(VLLM, "total_output_tokens", -5), ["total_output_tokens", "-5"]),
    ("vllm_tpot_str", "vllm", _j(VLLM, "median_tpot_ms", "7.24"), ["median_tpot_ms", "'7.24'"]),
    ("vllm_tpot_bool", "vllm", _j(VLLM, "median_tpot_ms", True), ["median_tpot_ms", "True"]),
    ("vllm_tpot_neg", "vllm", _j(VLLM, "median_tpot_ms", -7.2), ["median_tpot_ms", "-7.2"]),
    ("vllm_tpot_huge", "vllm", _j(VLLM, "median_tpot_ms", 1e300), ["median_tpot_ms", "1e+300"]),
    ("vllm_tpot_missing", "vllm", _j(VLLM, "median_tpot_ms", DELETE), ["median_tpot_ms"]),
    ("vllm_conc_str", "vllm", _j(VLLM, "max_concurrency", "8"), ["max_concurrency", "'8'"]),
    ("vllm_conc0", "vllm", _j(VLLM, "max_concurrency", 0), ["max_concurrency", "0"]),
    ("vllm_conc_bool", "vllm", _j(VLLM, "max_concurrency", True), ["max_concurrency", "True"]),
    ("vllm_model_num", "vllm", _j(VLLM, "model_id", 5), ["model_id", "5"]),
    ("vllm_tpot_nan", "vllm", json.dumps(_set(VLLM, "median_tpot_ms", float("nan"))).encode(), ["median_tpot_ms", "nan"]),
    ("vllm_array_of_numbers", "vllm", b"[1, 2]", ["JSON object"]),
    ("vllm_too_many", "vllm", json.dumps([VLLM | {"max_concurrency": c} for c in range(1, 300)]).encode(),
     ["points", "at most 256"]),
    ("sglang_in_len_str", "sglang", _sglang("random_input_len", "4096"), ["random_input_len", "'4096'"]),
    ("sglang_out_len_neg", "sglang", _sglang("random_output_len", -1), ["random_output_len", "-1"]),
    ("sglang_completed0", "sglang", _sglang("completed", 0), ["completed", "0"]),
    ("sglang_line_list", "sglang", b"[1]\n[2]\n", ["JSON object"]),
    # HuggingFace config.json: the fields read, typed
    ("hf_hidden_str", "hf", _j(HF, "hidden_size", "4096"), ["hidden_size", "'4096'"]),
    ("hf_heads0", "hf", _j(HF, "num_attention_heads", 0), ["num_attention_heads", "0"]),
    ("hf_kv_heads0", "hf", _j(HF, "num_key_value_heads", 0), ["num_key_value_heads", "0"]),
    ("hf_layers_bool", "hf", _j(HF, "num_hidden_layers", True), ["num_hidden_layers", "True"]),
    ("hf_layers_float", "hf", _j(HF, "num_hidden_layers", 32.0), ["num_hidden_layers", "32.0"]),
    ("hf_arch_str", "hf", _j(HF, "architectures", "LlamaForCausalLM"), ["architectures", "LlamaForCausalLM"]),
    ("hf_arch_dict", "hf", _j(HF, "architectures", {"a": 1}), ["architectures"]),
    ("hf_arch_nums", "hf", _j(HF, "architectures", [1]), ["architectures.0", "1"]),
    ("hf_model_type_num", "hf", _j(HF, "model_type", 7), ["model_type", "7"]),
    ("hf_quant_str", "hf", _j(HF, "quantization_config", "fp8"), ["quantization_config", "fp8"]),
    ("hf_quant_list", "hf", _j(HF, "quantization_config", [1]), ["quantization_config"]),
    ("hf_quant_method_num", "hf", _j(HF, "quantization_config", {"quant_method": 5}), ["quant_method", "5"]),
    ("hf_quant_groups_list", "hf", _j(HF, "quantization_config", {"quant_method": "compressed-tensors",
                                                                   "config_groups": [1]}), ["config_groups"]),
    ("hf_quant_bits_str", "hf", _j(HF, "quantization_config", {"quant_method": "compressed-tensors", "config_groups": {
        "g": {"weights": {"num_bits": "4", "type": "int", "group_size": 32}}}}), ["num_bits", "'4'"]),
    ("hf_quant_ignore_str", "hf", _j(HF, "quantization_config", {"quant_method": "fp8", "modules_to_not_convert": "lm_head"}),
     ["modules_to_not_convert"]),
    ("hf_text_config_list", "hf", _j(HF, "text_config", [1]), ["text_config"]),
    ("hf_tie_str", "hf", _j(HF, "tie_word_embeddings", "yes"), ["tie_word_embeddings", "yes"]),
    ("hf_list", "hf", b"[1, 2]", ["JSON object"]),
    # --lengths-file and an acceptance file
    ("lengths_bool", "lengths", json.dumps([[True, 5]]).encode(), ["--lengths-file"]),
    ("lengths_obj", "lengths", b'{"isl": 5}', ["--lengths-file"]),
    ("accept_str", "accept", json.dumps({"q": "x", "p": "y"}).encode(), ["calibration file"]),
    ("accept_bool", "accept", _j(ACCEPT, "q.0.0", True), ["q.0.0", "True"]),
    ("accept_num_str", "accept", _j(ACCEPT, "p.1.0", "0.6"), ["p.1.0", "'0.6'"]),
    ("accept_sigma_neg", "accept", _j(ACCEPT, "tau_sigma_rel", -1), ["tau_sigma_rel", "-1"]),
    ("accept_sigma_bool", "accept", _j(ACCEPT, "tau_sigma_rel", True), ["tau_sigma_rel", "True"]),
    # spec files
    ("hw_dup_nested", "hw", yaml.safe_dump(H100).replace("memory:\n", "memory:\n  kind: HBM3\n", 1).encode(),
     ["duplicate key", "kind"]),
    ("model_layers_huge", "model", _y(LLAMA, "n_layers", 10**30), ["n_layers"]),
    ("model_vocab_huge", "model", _y(LLAMA, "vocab_size", 10**40), ["vocab_size", "above 10,000,000"]),
    ("hf_layers_huge", "hf", _j(HF, "num_hidden_layers", 10**30), ["layers", "above 10,000,000"]),
    ("lengths_huge", "lengths", json.dumps([[10**400, 5]]).encode(), ["--lengths-file", "10000000"]),
    ("calib_kernels", "calib", _j(CALIB, "kernels", "cutlass"), ["kernels", "cutlass"]),
    ("calib_gpus_num", "calib", _j(CALIB, "gpus", [1]), ["gpus.0", "1"]),
    ("obs_python_tag", "obs", b"engine: !!python/object/apply:os.system [ls]\npoints: []\n", ["python/object"]),
    ("obs_date", "obs", b"engine: 2026-01-01\npoints: []\n", ["engine", "date"]),
    ("serving_source", "serving", _y(SERVING, "groups.0.setup.source", "nowhere"), ["source", "nowhere"]),
    ("serving_str_number", "serving", _y(SERVING, "groups.0.points.0.mean_tpot_s", "0.02"), ["mean_tpot_s"]),
    ("serving_negative", "serving", _y(SERVING, "groups.0.points.0.mean_ttft_s", -1.0), ["mean_ttft_s"]),
    ("serving_unknown_field", "serving", _y(SERVING, "groups.0.setup.gpus", 8), ["gpus"]),
    ("obs_binary", "obs", _obs_point(step_ms=1.0).replace(b"step_ms: 1.0", b"step_ms: !!binary aGVsbG8="), ["step_ms"]),
]


def _cases():
    out = []
    for kind, (fmt, doc, cmds) in KINDS.items():
        for name, (fmts, make, words) in GENERIC.items():
            if fmt not in fmts or (kind in BENCH and name in ("nan", "huge_number", "empty")):
                continue
            for j, cmd in enumerate(cmds):
                out.append((f"{kind}-{name}-{cmd[0]}{j}", kind, cmd, make, words))
    for cid, kind, data, words in SPECIFIC:
        for j, cmd in enumerate(KINDS[kind][2]):
            out.append((f"{cid}-{cmd[0]}{j}", kind, cmd, data, words))
    return out


CASES = _cases()


def _file(tmp_path: Path, kind: str, make) -> tuple[str, str | None]:
    """The path of the bad file, and the name the message must hold."""
    fmt, doc, _ = KINDS[kind]
    suffix = {"yaml": ".yaml", "json": ".json", "jsonl": ".jsonl"}[fmt]
    if make == "fifo":
        p = tmp_path / f"{kind}-fifo{suffix}"
        os.mkfifo(p)
        return str(p), p.name
    if make == "line break":  # a file name with a line break: shown escaped, the message stays one line
        p = tmp_path / f"{kind}-bad\nname{suffix}"
        p.write_bytes(b"[")
        return str(p), p.name.replace("\n", "\\n")
    if make == "/dev/zero":
        return "/dev/zero", "/dev/zero"
    if make == "dir":
        p = tmp_path / f"{kind}-dir{suffix}"
        p.mkdir()
        return str(p), p.name
    p = tmp_path / f"{kind}-bad{suffix}"
    p.write_bytes(make(fmt, doc) if callable(make) else make)
    return str(p), p.name


def _unblock(path: str, after_s: float) -> threading.Thread:
    """Open a FIFO for writing after `after_s`, so that a reader that blocked on it fails the test
    instead of hanging it."""
    def run():
        time.sleep(after_s)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
            os.close(fd)
        except OSError:
            pass
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


@pytest.fixture
def aic_fixture(monkeypatch):
    """`profile import-aic` reads aiconfigurator's database from the rows in tests/fixtures/aic/."""
    from perfmodel import aic

    db = aic.Database(FIX / "aic" / "systems", (FIX / "aic" / "VERSION").read_text().strip())
    monkeypatch.setattr(aic.Database, "installed", classmethod(lambda cls: db))


@pytest.mark.parametrize("cid,kind,cmd,make,words", CASES, ids=[c[0] for c in CASES])
def test_bad_input_file(tmp_path, aic_fixture, cid, kind, cmd, make, words):
    path, name = _file(tmp_path, kind, make)
    argv = [a.format(f=path, d=tmp_path) for a in cmd]
    if make == "fifo":
        _unblock(path, 60.0)
    t0 = time.monotonic()
    r = runner.invoke(app, argv)
    took = time.monotonic() - t0
    out = r.output + (r.stderr or "")
    assert r.exception is None or isinstance(r.exception, SystemExit), f"{argv}: {r.exception!r}"
    assert "Traceback" not in out
    assert r.exit_code == 2, f"{argv}: exit {r.exit_code}\n{out}"
    assert make != "fifo" or took < 60, f"{argv}: took {took:.0f} s (blocked on the FIFO until it was opened for writing)"
    msg = r.stderr.strip()
    assert len(msg.splitlines()) == 1, f"{argv}: not one line: {msg!r}"
    for s in [name, *words]:
        assert s in msg, f"{argv}: {s!r} not in {msg!r}"
    assert r.stdout.strip() == "", f"{argv}: wrote to stdout on failure: {r.stdout!r}"
    assert not (tmp_path / "c.json").exists()


FILE_OPTIONS = ("--profile", "--hw-file", "--model-file", "--calibration", "--lengths-file", "--base", "--from-vllm",
                "--from-sglang", "--fallback-profile", "--serving-file")
FILE_ARGUMENTS = ("observed", "config")  # calibrate OBSERVED.yaml, models import CONFIG


def _cli_commands():
    import typer

    def walk(cmd, path):
        if hasattr(cmd, "commands"):
            for name, sub in cmd.commands.items():
                yield from walk(sub, (*path, name))
        else:
            yield path, cmd
    yield from walk(typer.main.get_command(app), ())


def test_every_file_option_of_every_command_is_in_the_table():
    """A command that takes a file gets the hostile files of its kind: a new file option is a row in KINDS."""
    rows = [cmd for _, _, cmds in KINDS.values() for cmd in cmds]
    missing = []
    for path, cmd in _cli_commands():
        for p in cmd.params:
            opt = p.opts[0] if p.param_type_name == "option" else None
            if opt not in FILE_OPTIONS and not (p.param_type_name == "argument" and p.name in FILE_ARGUMENTS):
                continue
            ok = any(r[:len(path)] == path and ("{f}" in r if opt is None else
                                                any(a == opt and b.endswith("{f}") for a, b in zip(r, r[1:])))
                     for r in rows)
            if not ok:
                missing.append(f"{' '.join(path)} {opt or p.name.upper()}")
    assert not missing, missing


def test_spec_objects_built_in_code_are_validated():
    """The Python API: a GpuSpec or ModelSpec built around its validators (model_copy(update=...),
    model_construct) is refused by the schema when it enters a Request, never a division by zero later."""
    from pydantic import ValidationError

    from perfmodel import api
    from perfmodel.scenario import Request
    from perfmodel.specs import registry
    from perfmodel.specs.schema import Sourced

    h100, llama = registry.load_gpu("h100"), registry.load_model("llama-3.1-8b")
    for bw in (0.0, -900.0):
        bad = h100.model_copy(update={"memory": h100.memory.model_copy(
            update={"bandwidth_GBps": Sourced.model_construct(value=bw, source="typed in", note="")})})
        with pytest.raises(ValidationError, match="bandwidth_GBps"):
            api.project(Request(target=bad, gpus=1, model="llama-3.1-8b", concurrency=[1]))
    with pytest.raises(ValidationError, match="n_layers"):
        Request(model=llama.model_copy(update={"n_layers": 0}), target="h100", gpus=1)
    ok = api.project(Request(target=h100, gpus=1, model=llama, concurrency=[1]))
    assert ok.points[0].tokens_per_s > 0
