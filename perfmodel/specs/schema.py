"""Pydantic schemas for hardware and model specs.

Units live in field names (`_GBps`, `_GB`, `_TFLOPS`, `_us`) and every number carries its
source. Datasheet peaks live under `peak`-style fields; empirical, fitted values live under
`calibrated` blocks and are never blended into the peaks.

GB = 1e9 bytes, GiB = 2**30 bytes. TFLOPS are dense (no 2:4 sparsity).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, field_validator, model_validator


class Strict(BaseModel):
    # strict: no bool -> int or str -> float coercion (`n_layers: true` is an error, not 1);
    # allow_inf_nan=False: `.inf` or `.nan` in a YAML is an error, not a silent infinity.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


class Sourced(Strict):
    """A number and where it comes from (datasheet, paper, or 'measured: <run id>')."""

    value: float
    source: str = Field(min_length=3)
    note: str = ""

    @field_validator("value")
    @classmethod
    def _positive(cls, v: float) -> float:
        if not v > 0:
            raise ValueError(f"must be > 0, got {v}")
        return v


class SourcedFraction(Sourced):
    @field_validator("value")
    @classmethod
    def _fraction(cls, v: float) -> float:
        if not 0 < v <= 1:
            raise ValueError(f"must be a fraction in (0, 1], got {v}")
        return v


# Physical ceilings for user-supplied GPU files: 10-100x beyond any part in hwspecs/, so that a
# typo (an extra three zeros, a unit slip) is an error rather than a projection.
MAX_CAPACITY_GB = 10_000.0
MAX_BANDWIDTH_GBps = 1_000_000.0
MAX_TFLOPS = 1_000_000.0

MemoryKind = Literal["GDDR6", "GDDR7", "HBM2e", "HBM3", "HBM3e"]
# "nvlink-c2c": Grace-Blackwell host link (GB200/GB300), added by the spec owner.
LinkKind = Literal["none", "pcie4", "pcie5", "pcie6", "nvlink3", "nvlink4", "nvlink5", "xgmi", "nvlink-c2c"]


class MemorySpec(Strict):
    kind: MemoryKind
    capacity_GB: Sourced
    usable_GB: Sourced | None = None
    bandwidth_GBps: Sourced
    achievable_fraction: SourcedFraction | None = Field(
        None, description="measured streaming fraction of THIS GPU's peak; overrides the memory kind's")

    @model_validator(mode="after")
    def _physical(self) -> MemorySpec:
        if self.capacity_GB.value > MAX_CAPACITY_GB:
            raise ValueError(f"capacity_GB {self.capacity_GB.value:g} is above {MAX_CAPACITY_GB:g} GB per GPU")
        if self.bandwidth_GBps.value > MAX_BANDWIDTH_GBps:
            raise ValueError(f"bandwidth_GBps {self.bandwidth_GBps.value:g} is above {MAX_BANDWIDTH_GBps:g} GB/s")
        if self.usable_GB is not None and self.usable_GB.value > self.capacity_GB.value:
            raise ValueError(f"usable_GB {self.usable_GB.value:g} is above capacity_GB {self.capacity_GB.value:g}")
        return self

    def streaming_fraction(self, kinds: MemoryKinds) -> float:
        """Fraction of the datasheet bandwidth a streaming read reaches: this GPU's measured
        figure when the spec has one, else its memory technology's."""
        f = self.achievable_fraction or kinds.kinds[self.kind].achievable_fraction
        return f.value


class ComputeSpec(Strict):
    """Dense tensor-core peaks per dtype. Absent = the chip has no native path."""

    bf16_dense_TFLOPS: Sourced
    fp8_dense_TFLOPS: Sourced | None = None
    fp4_dense_TFLOPS: Sourced | None = None
    int8_dense_TOPS: Sourced | None = None

    @model_validator(mode="after")
    def _physical(self) -> ComputeSpec:
        for name in ("bf16_dense_TFLOPS", "fp8_dense_TFLOPS", "fp4_dense_TFLOPS", "int8_dense_TOPS"):
            v = getattr(self, name)
            if v is not None and v.value > MAX_TFLOPS:
                raise ValueError(f"{name} {v.value:g} is above {MAX_TFLOPS:g}")
        return self


class LinkSpec(Strict):
    kind: LinkKind
    bw_per_dir_GBps: Sourced | None = None

    @model_validator(mode="after")
    def _bw_unless_none(self) -> LinkSpec:
        if self.kind != "none" and self.bw_per_dir_GBps is None:
            raise ValueError(f"link kind {self.kind} needs bw_per_dir_GBps")
        return self


class GpuSpec(Strict):
    name: str
    aliases: list[str] = []
    display_name: str
    vendor: Literal["nvidia", "amd"]
    architecture: str
    memory: MemorySpec
    compute: ComputeSpec
    sm_count: Sourced
    l2_MB: Sourced | None = None
    boost_clock_MHz: Sourced | None = None
    tdp_W: Sourced | None = None
    scale_up: LinkSpec
    host_link: LinkSpec
    default_interconnect: str = Field(description="name of a hwspecs/links/*.yaml used for multi-GPU systems")
    notes: str = ""


class InterconnectPeak(Strict):
    bw_per_dir_GBps: Sourced


class InterconnectCalibrated(Strict):
    """Empirical collective behaviour for decode-sized messages, from cited measurements."""

    allreduce_latency_us: Sourced
    allreduce_busbw_GBps: Sourced
    alltoall_latency_us: Sourced
    alltoall_busbw_GBps: Sourced


class InterconnectSpec(Strict):
    name: str
    aliases: list[str] = []
    kind: LinkKind
    topology: Literal["switch", "host-bridge", "pcie-switch", "mesh"]
    peak: InterconnectPeak
    calibrated: InterconnectCalibrated
    latency_uncertainty_rel: float = Field(0.3, gt=0, le=2)
    bandwidth_uncertainty_rel: float = Field(0.2, gt=0, le=2)
    notes: str = ""


class MemoryKindSpec(Strict):
    """Fraction of the datasheet peak a streaming read achieves, per memory technology."""

    achievable_fraction: SourcedFraction
    uncertainty_rel: float = Field(gt=0, le=1)


class MemoryKinds(Strict):
    kinds: dict[MemoryKind, MemoryKindSpec]


# ----------------------------------------------------------------------------- models

WeightDtype = Literal["bf16", "fp8", "int8", "int4_g32", "int4_g128", "mxfp4", "nvfp4"]


class MLASpec(Strict):
    kind: Literal["mla"] = "mla"
    n_heads: int = Field(gt=0)
    q_lora_rank: int = Field(ge=0, description="0 = no low-rank q projection")
    kv_lora_rank: int = Field(gt=0)
    qk_nope_head_dim: int = Field(gt=0)
    qk_rope_head_dim: int = Field(gt=0)
    v_head_dim: int = Field(gt=0)


class GQASpec(Strict):
    kind: Literal["gqa"] = "gqa"
    n_heads: int = Field(gt=0)
    n_kv_heads: int = Field(gt=0)
    head_dim: int = Field(gt=0)
    sliding_window: int | None = Field(None, gt=0)
    sliding_layer_fraction: float = Field(0.0, ge=0, le=1)

    @model_validator(mode="after")
    def _divisible(self) -> GQASpec:
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_heads={self.n_heads} not a multiple of n_kv_heads={self.n_kv_heads}")
        return self


class MoESpec(Strict):
    n_routed_experts: int = Field(gt=0)
    top_k: int = Field(gt=0)
    n_shared_experts: int = Field(ge=0)
    expert_intermediate_size: int = Field(gt=0)
    shared_intermediate_size: int | None = Field(None, gt=0, description="defaults to expert size × n_shared")

    @model_validator(mode="after")
    def _k_le_e(self) -> MoESpec:
        if self.top_k > self.n_routed_experts:
            raise ValueError(f"top_k={self.top_k} > n_routed_experts={self.n_routed_experts}")
        return self


class ModelDtypes(Strict):
    attention: WeightDtype = "bf16"
    routed_experts: WeightDtype = "bf16"
    shared_experts: WeightDtype = "bf16"
    dense_mlp: WeightDtype = "bf16"
    embedding: WeightDtype = "bf16"
    lm_head: WeightDtype = "bf16"
    kv_cache: Literal["bf16", "fp8"] = "bf16"
    activations: Literal["bf16"] = "bf16"


class DrafterSpec(Strict):
    """A DFlash-style block drafter: one non-causal forward over a block, sharing the
    target's embedding and lm_head. (`kind` may be left out: older presets have none.)"""

    kind: Literal["dflash"] = "dflash"
    name: str
    source: str
    n_layers: int = Field(gt=0)
    hidden_size: int = Field(gt=0)
    n_heads: int = Field(gt=0)
    n_kv_heads: int = Field(gt=0)
    head_dim: int = Field(gt=0)
    intermediate_size: int = Field(gt=0)
    block_size: int = Field(gt=1)
    n_target_layers_fused: int = Field(1, ge=1, description="target hidden states concatenated into fc")
    dtype: WeightDtype = "bf16"


# An EAGLE tree's branching (SGLang --speculative-eagle-topk): each draft step after the first runs
# `topk` tokens per sequence through the drafter and keeps the best topk of their topk x topk
# children by cumulative score; the tree is then reranked to the verify's draft nodes
# (sgl-project/sglang python/sglang/srt/speculative/eagle_worker.py `draft_forward`,
# eagle_utils.py `organize_draft_results`, `build_tree_kernel_efficient`). 1 = a chain.
TOPK_HELP = "draft tokens per sequence in each draft step after the first (SGLang speculative_eagle_topk; 1: a chain)"
MAX_DRAFT_TOPK = 64  # a guard against typos, not an engine's limit


def tree_candidates(topk: int, steps: int) -> int:
    """Draft nodes an EAGLE tree of `steps` draft steps with branching `topk` scores, from which
    its verify's nodes are taken: topk from the first step, topk x topk from each later one
    (SGLang organize_draft_results takes the best num_draft_tokens - 1 of them)."""
    return topk + (steps - 1) * topk * topk


class Eagle3DrafterSpec(Strict):
    """An EAGLE-3 head (Li et al., arXiv 2503.01840; SGLang/vLLM `LlamaForCausalLMEagle3`): one
    Llama-style decoder layer (GQA attention + SwiGLU MLP) whose q/k/v read
    [input_layernorm(embedding) ; hidden_norm(h)] (2 x hidden wide), where h is `fc` over the
    concatenated low/mid/high target hidden states (n_target_layers_fused x target hidden ->
    hidden) on the first draft step and the head's own output after it; its own final norm and
    lm_head over `draft_vocab_size` tokens (mapped to the target's vocabulary by a table); the
    embedding is the target's. Engines run it as a chain of `num_speculative_tokens` steps
    (SGLang `--speculative-num-steps`, vLLM `num_speculative_tokens`)."""

    kind: Literal["eagle3"]
    name: str
    source: str
    n_layers: int = Field(1, gt=0)
    hidden_size: int = Field(gt=0)
    n_heads: int = Field(gt=0)
    n_kv_heads: int = Field(gt=0)
    head_dim: int = Field(gt=0)
    intermediate_size: int = Field(gt=0)
    draft_vocab_size: int = Field(gt=0, description="the head's lm_head width (the target vocab when not reduced)")
    n_target_layers_fused: int = Field(3, ge=1, description="target hidden states concatenated into fc")
    num_speculative_tokens: int = Field(gt=0, description="draft steps per verify (the chain length k)")
    topk: int = Field(1, ge=1, le=MAX_DRAFT_TOPK, description=TOPK_HELP)
    dtype: WeightDtype = "bf16"

    @property
    def block_size(self) -> int:
        """Tokens one verify step can yield at most: k drafts + the bonus token."""
        return self.num_speculative_tokens + 1


class MTPDrafterSpec(Strict):
    """The model's own multi-token-prediction module (DeepSeek-V3 report sect. 2.2): one decoder
    layer of the target's shape (its attention and its MoE FFN with the shared expert, or the
    dense MLP of a dense model), an eh_proj (2 x hidden -> hidden) over [enorm(embedding) ;
    hnorm(h)], and the target's embedding and lm_head, shared. DeepSeek-V3/R1 ship one module
    (num_nextn_predict_layers: 1); engines reuse it for k > 1 draft steps (TRT-LLM "MTP Eagle",
    vLLM `deepseek_mtp`, SGLang NEXTN). `n_heads` and `intermediate_size` repeat the target's
    (checked) so that layout checks read every drafter alike."""

    kind: Literal["mtp"]
    name: str
    source: str
    n_modules: int = Field(1, gt=0, description="MTP modules in the checkpoint (num_nextn_predict_layers)")
    num_speculative_tokens: int = Field(gt=0, description="draft steps per verify (the chain length k)")
    topk: int = Field(1, ge=1, le=MAX_DRAFT_TOPK, description=TOPK_HELP)
    n_heads: int = Field(gt=0)
    intermediate_size: int = Field(gt=0)

    @property
    def n_layers(self) -> int:
        return 1  # one module's layer per draft step

    @property
    def block_size(self) -> int:
        """Tokens one verify step can yield at most: k drafts + the bonus token."""
        return self.num_speculative_tokens + 1


def _drafter_kind(v: Any) -> str:
    """The drafter's kind, "dflash" when a preset gives none (older presets)."""
    if isinstance(v, dict):
        return v.get("kind", "dflash")
    return getattr(v, "kind", "dflash")


Drafter = Annotated[
    Annotated[DrafterSpec, Tag("dflash")] | Annotated[Eagle3DrafterSpec, Tag("eagle3")]
    | Annotated[MTPDrafterSpec, Tag("mtp")],
    Discriminator(_drafter_kind),
]
DRAFTER_KINDS = ("dflash", "eagle3", "mtp")


class SpeculationEngineSpec(Strict):
    """How a serving engine runs a drafter, beside its shape. `disable_above_batch_size`: the
    engine turns speculation off when more sequences than this are batched (TensorRT-LLM
    `DecodingBaseConfig.max_concurrency`: "speculation will be disabled at batch sizes above this
    value"; vLLM V0 `speculative_disable_by_batch_size`; vLLM V1 schedules draft length by batch
    size, `num_speculative_tokens_per_batch_size`, where a 0 entry does the same; SOURCES.md sect. 7d)."""

    engine: str = ""
    disable_above_batch_size: int | None = Field(None, ge=1)

    def speculates_at(self, concurrency: int) -> bool:
        return self.disable_above_batch_size is None or concurrency <= self.disable_above_batch_size


MAX_MODEL_SIZE = 10_000_000  # any count or size of a model: 40x the largest vocabulary; above it is a typo


def _sizes_in_range(data: Any) -> Any:
    """Refuse any integer of a model spec above MAX_MODEL_SIZE (walked without recursion), naming it."""
    stack = [((), data)]
    while stack:
        path, node = stack.pop()
        if isinstance(node, dict):
            stack.extend((path + (k,), v) for k, v in node.items())
        elif isinstance(node, list | tuple):
            stack.extend((path + (i,), v) for i, v in enumerate(node))
        elif isinstance(node, int) and not isinstance(node, bool) and node > MAX_MODEL_SIZE:
            shown = node if node < 10**15 else f"a number of {len(str(node))} digits"
            raise ValueError(f"{'.'.join(map(str, path))} {shown} is above {MAX_MODEL_SIZE:,} (a typo?)")
    return data


class ModelSpec(Strict):
    name: str
    aliases: list[str] = []
    display_name: str
    source: str
    n_layers: int = Field(gt=0)
    n_dense_layers: int = Field(ge=0, description="leading layers with a dense MLP instead of MoE")
    hidden_size: int = Field(gt=0)
    vocab_size: int = Field(gt=0)
    tie_embeddings: bool = False
    attention: MLASpec | GQASpec = Field(discriminator="kind")
    dense_intermediate_size: int | None = Field(None, gt=0)
    moe: MoESpec | None = None
    dtypes: ModelDtypes = ModelDtypes()
    drafter: Drafter | None = None
    drafter_options: dict[str, Drafter] = Field(
        default_factory=dict, description="other drafters this model is served with, by name (`with_drafter`)")
    notes: str = ""

    @model_validator(mode="before")
    @classmethod
    def _sizes(cls, data: Any) -> Any:
        return _sizes_in_range(data)

    @model_validator(mode="after")
    def _layers(self) -> ModelSpec:
        if self.n_dense_layers > self.n_layers:
            raise ValueError("n_dense_layers > n_layers")
        if self.moe is None and self.n_dense_layers != self.n_layers:
            raise ValueError("a model without moe must have n_dense_layers == n_layers")
        if self.n_dense_layers and self.dense_intermediate_size is None:
            raise ValueError("dense layers need dense_intermediate_size")
        for label, d in [("drafter", self.drafter)] + [(f"drafter_options.{k}", v) for k, v in self.drafter_options.items()]:
            if isinstance(d, MTPDrafterSpec):
                inter = self.moe.expert_intermediate_size if self.moe else self.dense_intermediate_size
                if (d.n_heads, d.intermediate_size) != (self.attention.n_heads, inter):
                    raise ValueError(f"{label}: an MTP module is a layer of the target: n_heads {d.n_heads} and "
                                     f"intermediate_size {d.intermediate_size} must be the target's "
                                     f"{self.attention.n_heads} and {inter}")
        return self

    def with_drafter(self, name: str) -> ModelSpec:
        """The same model served with its drafter option `name` (or its default drafter's name)."""
        if self.drafter is not None and name in (self.drafter.name, self.drafter.kind, "default"):
            return self
        if name not in self.drafter_options:
            known = [self.drafter.kind] if self.drafter is not None else []
            known += sorted(self.drafter_options)
            raise ValueError(f"{self.name} has no drafter '{name}'; known: {', '.join(known) or 'none'}")
        return self.model_copy(update={"drafter": self.drafter_options[name]})


# Bytes per weight, scales included (group scales are bf16, one per group; block FP8 has an
# fp32 scale per 128×128 block; MXFP4 has an e8m0 scale per 32; NVFP4 an fp8 scale per 16).
WEIGHT_BYTES: dict[str, float] = {
    "bf16": 2.0,
    "fp8": 1.0 + 4.0 / (128 * 128),
    "int8": 1.0 + 2.0 / 128,
    "int4_g32": 0.5 + 2.0 / 32,
    "int4_g128": 0.5 + 2.0 / 128,
    "mxfp4": 0.5 + 1.0 / 32,
    "nvfp4": 0.5 + 1.0 / 16,
}


# ----------------------------------------------------------------------------- published acceptance

WorkloadClass = Literal["chat", "code", "math", "long-context", "thinking", "other"]
WORKLOAD_CLASSES = ("chat", "code", "math", "long-context", "thinking")  # "other": kept, used by no preset
DrafterKind = Literal["dflash", "eagle3", "mtp"]


class DraftSetting(Strict):
    """The draft setting a published acceptance length was measured at.

    chain       `draft_tokens` = k drafts per verify (vLLM num_speculative_tokens; SGLang
                num_steps with topk 1, num_draft_tokens = k + 1; DFlash block size - 1).
    ddtree      a DDTree over a block drafter of `depth` positions with `budgets` draft nodes;
                the figure is the mean of tau over the budgets listed.
    eagle-tree  an EAGLE-2/3 dynamic tree: `topk` per step, `steps` deep, reranked to
                `verify_tokens` - 1 draft nodes (SGLang num_draft_tokens counts the root)."""

    structure: Literal["chain", "ddtree", "eagle-tree"]
    draft_tokens: int | None = Field(None, ge=1)
    budgets: list[int] | None = None
    depth: int | None = Field(None, ge=1)
    topk: int | None = Field(None, ge=1)
    steps: int | None = Field(None, ge=1)
    verify_tokens: int | None = Field(None, ge=2)

    @model_validator(mode="after")
    def _complete(self) -> DraftSetting:
        need = {"chain": ("draft_tokens",), "ddtree": ("budgets", "depth"),
                "eagle-tree": ("topk", "steps", "verify_tokens")}[self.structure]
        missing = [f for f in need if getattr(self, f) is None]
        if missing:
            raise ValueError(f"a {self.structure} setting needs {', '.join(missing)}")
        if self.budgets is not None and (not self.budgets or min(self.budgets) < 1):
            raise ValueError("budgets must be a non-empty list of draft-node counts >= 1")
        return self

    @property
    def verify_width(self) -> int:
        """Tokens one verify forward runs (draft nodes + the root)."""
        if self.structure == "chain":
            return self.draft_tokens + 1
        if self.structure == "ddtree":
            return round(sum(self.budgets) / len(self.budgets)) + 1
        return self.verify_tokens


class AcceptanceFigure(Strict):
    """One published mean acceptance length (tokens per verify step, the bonus token included:
    SGLang's "accept len", vLLM's "Mean acceptance length"), with its citation."""

    id: str = Field(min_length=3)
    drafter: DrafterKind
    workload: WorkloadClass
    dataset: str
    target: str
    setting: DraftSetting
    tau: float = Field(ge=1)
    tau_range: list[float] | None = None
    derived: str = Field("", description="how tau follows from the printed figures, when it is not printed as is")
    temperature: float | None = Field(None, ge=0)
    engine: str = ""
    series: str = Field("", description="figures of one drafter, target and dataset at several settings")
    source: str = Field(min_length=3)
    note: str = ""

    @model_validator(mode="after")
    def _physical(self) -> AcceptanceFigure:
        cap = self.setting.verify_width
        if self.setting.structure == "ddtree":
            cap = min(cap, self.setting.depth + 1)
        elif self.setting.structure == "eagle-tree":
            cap = min(cap, self.setting.steps + 1)
        if self.tau > cap + 1e-9:
            raise ValueError(f"tau {self.tau:g} is above the {cap} tokens this setting can yield per step")
        if self.tau_range is not None and not (len(self.tau_range) == 2 and self.tau_range[0] <= self.tau <= self.tau_range[1]):
            raise ValueError("tau_range must be [low, high] around tau")
        return self


class AcceptanceData(Strict):
    figures: list[AcceptanceFigure] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique(self) -> AcceptanceData:
        ids = [f.id for f in self.figures]
        dup = sorted({i for i in ids if ids.count(i) > 1})
        if dup:
            raise ValueError(f"duplicate figure ids: {', '.join(dup)}")
        return self
