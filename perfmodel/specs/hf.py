"""A `ModelSpec` from a HuggingFace `config.json` (`perfmodel models import`, `--model-file config.json`).

Families: Llama, Qwen2/Qwen3 (dense), Qwen3-MoE, Mixtral, DeepSeek-V3 / Kimi-K2 (MLA) and gpt-oss.
`quantization_config` sets the weight dtypes: FP8 blocks (`quant_method: fp8`), compressed-tensors
INT4 groups (`int4_g32`/`int4_g128`) or FP8, and MXFP4. Every failure is one `SpecError` line
naming the field. The config is read by the input layer (`perfmodel.inputs.load_json`: a regular
file, UTF-8, no duplicate keys, bounded nesting, no NaN) and the fields read here are typed by
`HFConfig` (strict: a string for a size or zero heads is one line naming the field). Pure: re,
pydantic and the spec schema only.
"""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, ValidationError

from perfmodel.inputs import InputError, load_json, validated
from perfmodel.specs.registry import SpecError, _format_validation_error
from perfmodel.specs.schema import ModelSpec

DENSE = {"llama", "qwen2", "qwen3", "mistral"}
MOE_GQA = {"qwen3_moe": "num_experts", "mixtral": "num_local_experts", "gpt_oss": "num_local_experts"}
MLA = {"deepseek_v3", "kimi_k2"}
FAMILIES = sorted(DENSE | set(MOE_GQA) | MLA)

# A representative module name per weight group (DeepSeek/Llama naming), matched against the
# quantization config's ignore lists.
MODULES = {"attention": "model.layers.1.self_attn.o_proj", "routed_experts": "model.layers.1.mlp.experts.0.down_proj",
           "shared_experts": "model.layers.1.mlp.shared_experts.down_proj",
           "dense_mlp": "model.layers.0.mlp.down_proj", "lm_head": "lm_head", "embedding": "model.embed_tokens"}


Pos = Annotated[StrictInt, Field(gt=0)]
NonNeg = Annotated[StrictInt, Field(ge=0)]


class _Open(BaseModel):
    # the fields read are typed; the many others a config carries are kept as they are
    model_config = ConfigDict(extra="allow", strict=True, allow_inf_nan=False, populate_by_name=True)


class CTWeights(_Open):
    num_bits: Pos | None = None
    type: StrictStr = "int"
    group_size: Pos | None = None


class CTGroup(_Open):
    weights: CTWeights | None = None


class QuantizationConfig(_Open):
    quant_method: StrictStr = ""
    modules_to_not_convert: list[StrictStr] | None = None
    ignore: list[StrictStr] | None = None
    config_groups: dict[str, CTGroup] | None = None


class HFConfig(_Open):
    """The fields of a HuggingFace config.json perfmodel reads, each with its type and range."""

    model_type: StrictStr | None = None
    architectures: list[StrictStr] | None = None
    name_or_path: StrictStr | None = Field(None, alias="_name_or_path")
    num_hidden_layers: Pos | None = None
    hidden_size: Pos | None = None
    num_attention_heads: Pos | None = None
    num_key_value_heads: Pos | None = None
    head_dim: Pos | None = None
    vocab_size: Pos | None = None
    intermediate_size: Pos | None = None
    moe_intermediate_size: Pos | None = None
    q_lora_rank: NonNeg | None = None
    kv_lora_rank: Pos | None = None
    qk_nope_head_dim: Pos | None = None
    qk_rope_head_dim: Pos | None = None
    v_head_dim: Pos | None = None
    first_k_dense_replace: NonNeg | None = None
    n_routed_experts: Pos | None = None
    num_experts: Pos | None = None
    num_local_experts: Pos | None = None
    num_experts_per_tok: Pos | None = None
    experts_per_token: Pos | None = None
    n_shared_experts: NonNeg | None = None
    tie_word_embeddings: bool | None = None
    layer_types: list[StrictStr] | None = None
    sliding_window: Pos | None = None
    quantization_config: QuantizationConfig | None = None
    text_config: dict | None = None


def _typed(cfg: dict, label: str) -> dict:
    """`cfg` with the fields perfmodel reads checked by `HFConfig`; SpecError names the field."""
    try:
        c = validated(HFConfig, cfg, label)
    except InputError as e:
        raise SpecError(str(e)) from None
    q = c.quantization_config
    out = dict(cfg)
    out["quantization_config"] = q.model_dump(exclude_none=True) if q is not None else None
    return out


class _Cfg:
    """Field access that names the missing field."""

    def __init__(self, d: dict, label: str, family: str):
        self.d, self.label, self.family = d, label, family

    def __call__(self, key: str, default: Any = ...) -> Any:
        v = self.d.get(key)
        if v is None:
            if default is ...:
                raise SpecError(f"{self.label}: missing field '{key}' (needed for {self.family})")
            return default
        return v


def _family(cfg: dict, label: str) -> str:
    mt = str(cfg.get("model_type", "")).lower()
    if mt in FAMILIES:
        return mt
    arch = (cfg.get("architectures") or [""])[0]
    by_arch = {"LlamaForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2", "Qwen3ForCausalLM": "qwen3",
               "Qwen3MoeForCausalLM": "qwen3_moe", "MixtralForCausalLM": "mixtral",
               "DeepseekV3ForCausalLM": "deepseek_v3", "GptOssForCausalLM": "gpt_oss",
               "MistralForCausalLM": "mistral"}
    if arch in by_arch:
        return by_arch[arch]
    what = f"model_type '{mt}'" if mt else f"architectures '{arch}'" if arch else "model_type (missing)"
    raise SpecError(f"{label}: unknown architecture: {what}; supported model_type: {', '.join(FAMILIES)}")


def _ignored(name: str, patterns: list[str]) -> bool:
    for p in patterns:
        if p.startswith("re:"):
            if re.match(p[3:], name):
                return True
        elif name == p or fnmatch.fnmatch(name, p) or fnmatch.fnmatch(name, p + ".*") or name.endswith("." + p):
            return True
    return False


def _ct_dtype(q: dict, label: str) -> str:
    """compressed-tensors: the dtype of its (first) config group's weights."""
    groups = q.get("config_groups") or {}
    if not groups:
        raise SpecError(f"{label}: missing field 'quantization_config.config_groups'")
    w = next(iter(groups.values())).get("weights") or {}
    bits, kind, gs = w.get("num_bits"), w.get("type", "int"), w.get("group_size")
    if bits == 4 and kind == "int" and gs in (32, 128):
        return f"int4_g{gs}"
    if bits == 8 and kind == "float":
        return "fp8"
    if bits == 8 and kind == "int":
        return "int8"
    raise SpecError(f"{label}: quantization_config.config_groups weights num_bits={bits} type={kind} "
                    f"group_size={gs} has no perfmodel dtype (int4 group 32/128, int8, fp8)")


def _dtypes(cfg: dict, family: str, has_moe: bool, label: str) -> dict:
    q = cfg.get("quantization_config")
    if not q:
        return {}
    method = str(q.get("quant_method", "")).lower()
    if method == "fp8":
        dt, ignore = "fp8", q.get("modules_to_not_convert") or []
        groups = ("attention", "routed_experts", "shared_experts", "dense_mlp")
    elif method == "compressed-tensors":
        dt, ignore = _ct_dtype(q, label), q.get("ignore") or []
        groups = ("attention", "routed_experts", "shared_experts", "dense_mlp", "lm_head")
    elif method == "mxfp4":  # gpt-oss: only the MoE expert weights are MXFP4
        dt, ignore, groups = "mxfp4", [], ("routed_experts",)
    else:
        raise SpecError(f"{label}: quantization_config.quant_method '{method}' is not supported "
                        "(fp8, compressed-tensors, mxfp4)")
    out = {g: dt for g in groups if not _ignored(MODULES[g], ignore)}
    if not has_moe:
        out = {k: v for k, v in out.items() if k not in ("routed_experts", "shared_experts")}
    return out


def from_hf_config(cfg: dict, name: str, label: str = "config.json") -> ModelSpec:
    """The ModelSpec of a HuggingFace config dict (a multimodal config's `text_config` is used)."""
    if not isinstance(cfg, dict):
        raise SpecError(f"{label}: expected a JSON object")
    if isinstance(cfg.get("text_config"), dict):
        cfg = {**cfg["text_config"], "quantization_config": cfg["text_config"].get("quantization_config")
               or cfg.get("quantization_config")}
    cfg = _typed(cfg, label)
    family = _family(cfg, label)
    c = _Cfg(cfg, label, family)
    n_layers, hidden, n_heads = c("num_hidden_layers"), c("hidden_size"), c("num_attention_heads")
    spec: dict[str, Any] = {
        "name": name, "display_name": name, "n_layers": n_layers, "hidden_size": hidden,
        "vocab_size": c("vocab_size"), "tie_embeddings": bool(cfg.get("tie_word_embeddings", False)),
        "source": f"HuggingFace {label} ({family}), imported by `perfmodel models import`",
    }
    if family in MLA:
        spec["attention"] = {"kind": "mla", "n_heads": n_heads, "q_lora_rank": c("q_lora_rank", 0),
                             "kv_lora_rank": c("kv_lora_rank"), "qk_nope_head_dim": c("qk_nope_head_dim"),
                             "qk_rope_head_dim": c("qk_rope_head_dim"), "v_head_dim": c("v_head_dim")}
        spec["n_dense_layers"] = c("first_k_dense_replace", 0)
        spec["moe"] = {"n_routed_experts": c("n_routed_experts"), "top_k": c("num_experts_per_tok"),
                       "n_shared_experts": c("n_shared_experts", 0),
                       "expert_intermediate_size": c("moe_intermediate_size")}
        if spec["n_dense_layers"]:
            spec["dense_intermediate_size"] = c("intermediate_size")
    else:
        att = {"kind": "gqa", "n_heads": n_heads, "n_kv_heads": c("num_key_value_heads", n_heads),
               "head_dim": c("head_dim", hidden // n_heads)}
        types = cfg.get("layer_types") or []
        if family == "gpt_oss" and cfg.get("sliding_window"):
            att["sliding_window"] = cfg["sliding_window"]
            att["sliding_layer_fraction"] = (sum(t == "sliding_attention" for t in types) / len(types)
                                             if types else 0.5)
        spec["attention"] = att
        if family in DENSE:
            spec["n_dense_layers"] = n_layers
            spec["dense_intermediate_size"] = c("intermediate_size")
        else:
            size_key = "moe_intermediate_size" if family == "qwen3_moe" else "intermediate_size"
            spec["n_dense_layers"] = 0
            spec["moe"] = {"n_routed_experts": c(MOE_GQA[family]),
                           "top_k": cfg.get("num_experts_per_tok") or cfg.get("experts_per_token") or c("num_experts_per_tok"),
                           "n_shared_experts": 0, "expert_intermediate_size": c(size_key)}
    spec["dtypes"] = _dtypes(cfg, family, "moe" in spec, label)
    try:
        return ModelSpec.model_validate(spec)
    except ValidationError as e:
        raise SpecError(_format_validation_error(label, e)) from None


def is_hf_config(path: str | Path) -> bool:
    return Path(path).suffix.lower() == ".json"


def import_hf_config(path: str | Path, name: str | None = None) -> ModelSpec:
    p = Path(path)
    try:
        cfg = load_json(p, "HuggingFace config")
    except InputError as e:
        raise SpecError(str(e)) from None
    stem = p.parent.name if p.name == "config.json" and p.parent.name else p.stem
    if name is None and isinstance(cfg, dict):
        name = str(cfg.get("_name_or_path") or stem).rstrip("/").split("/")[-1].lower()
    return from_hf_config(cfg, name or stem, label=p.name)


def to_yaml(spec: ModelSpec) -> str:
    import yaml

    return yaml.safe_dump(spec.model_dump(mode="json", exclude_none=True), sort_keys=False, allow_unicode=True)
