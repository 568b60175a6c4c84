"""`perfmodel models import` / `--model-file config.json`: the presets' real HuggingFace configs
reproduce the presets' architecture and weight dtypes; bad configs are one line + exit 2."""

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from perfmodel.cli import app
from perfmodel.specs import registry
from perfmodel.specs.hf import import_hf_config

HF = Path(__file__).parent / "fixtures" / "hf"
PRESETS = ["deepseek-v3", "kimi-k2.6", "llama-3.1-8b", "mixtral-8x7b", "qwen3-30b-a3b", "gpt-oss-120b"]
ARCH = ("n_layers", "n_dense_layers", "hidden_size", "vocab_size", "tie_embeddings", "attention",
        "dense_intermediate_size", "moe", "dtypes")
runner = CliRunner()


@pytest.mark.parametrize("name", PRESETS)
def test_import_reproduces_the_preset(name):
    got = import_hf_config(HF / f"{name}.json", name=name).model_dump()
    want = registry.load_model(name).model_dump()
    for field in ARCH:
        assert got[field] == want[field], (name, field)


def test_cli_import_writes_yaml_that_projects(tmp_path):
    out = tmp_path / "k.yaml"
    r = runner.invoke(app, ["models", "import", str(HF / "kimi-k2.6.json"), "--name", "kimi-hf", "--out", str(out)])
    assert r.exit_code == 0, r.output
    spec = yaml.safe_load(out.read_text())
    assert spec["name"] == "kimi-hf" and spec["dtypes"]["routed_experts"] == "int4_g32"
    a = runner.invoke(app, ["project", "--model-file", str(out), "-c", "1", "-f", "json"])
    b = runner.invoke(app, ["project", "--model-file", str(HF / "kimi-k2.6.json"), "-c", "1", "-f", "json"])
    c = runner.invoke(app, ["project", "--model", "kimi-k2.6", "-c", "1", "-f", "json"])
    assert a.exit_code == b.exit_code == c.exit_code == 0, a.output + b.output
    tps = [json.loads(x.output)["points"][0]["tokens_per_s"] for x in (a, b, c)]
    assert tps[0] == tps[1] == pytest.approx(tps[2])


@pytest.mark.parametrize("edit,needle", [
    (lambda c: c.pop("num_hidden_layers"), "num_hidden_layers"),
    (lambda c: c.pop("kv_lora_rank"), "kv_lora_rank"),
    (lambda c: c.update(model_type="mamba", architectures=["MambaForCausalLM"]), "unknown architecture"),
    (lambda c: c.update(quantization_config={"quant_method": "gptq"}), "quant_method"),
])
def test_bad_config_is_one_line_exit_2(tmp_path, edit, needle):
    cfg = json.loads((HF / "deepseek-v3.json").read_text())
    edit(cfg)
    f = tmp_path / "config.json"
    f.write_text(json.dumps(cfg))
    for args in (["models", "import", str(f)], ["project", "--model-file", str(f)]):
        r = runner.invoke(app, args)
        assert r.exit_code == 2, r.output
        assert len(r.output.strip().splitlines()) == 1 and needle in r.output, r.output
