"""The one declaration of a scenario: what to project, field by field.

`Request` is the typed scenario (a pydantic dataclass: it validates on construction and on
`dataclasses.replace`; a bad field raises `ValueError` naming it). Each field carries, beside
its type and range, a `Cli` record: its flags, help text, how the command line's text becomes
the value, and whether `compare` sweeps it (`grid`). From this one declaration:
- the CLI options of `project`, `report`, `compare` and `step` (`perfmodel.options`),
- the scenario fields of a calibration point (`perfmodel.calibration_schema.ObservedPoint`),
- `compare`'s grid (the `grid` fields, comma lists on its command line),
- `perfmodel schema request`.
Adding an option is one field here and its use where the model reads it (docs/extending.md).
"""

from __future__ import annotations

import dataclasses
import re
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, ConfigDict, Field, StrictBool, TypeAdapter, ValidationError, field_validator
from pydantic.dataclasses import dataclass

from perfmodel.errors import ProjectionError
from perfmodel.profile import KERNEL_SETS, check_kernel_set
from perfmodel.specs.schema import MAX_DRAFT_TOPK, GpuSpec, ModelSpec

PARALLEL = ("tp", "ep", "tp-attn-ep-moe")  # the model's own layout keys (perfmodel/model/layers.py, profile files)
SPEC = ("none", "chain", "ddtree")
ParallelKind = Literal["tp", "ep", "tp-attn-ep-moe"]


# ------------------------------------------------------------------ layouts, as the engines name them
@dataclasses.dataclass(frozen=True)
class LayoutName:
    """A parallel layout: the key the model uses, the name shown, the names accepted for it."""

    key: str  # Layout.parallel, profile files, projections' `parallel`
    name: str  # the engine-style name shown in notes and help
    aliases: tuple[str, ...]  # also accepted (the old names among them)
    engines: str  # how the serving engines spell it

    def label(self, n_gpus: int) -> str:
        """'TP8', 'TP8 attention + EP8 MoE', 'DP8 attention + EP8 MoE'; a mixed layout's own
        ('TP4xDP2 attention + TP2xEP4 experts')."""
        if self.key not in LAYOUT_BY_KEY:
            return _parse_mixed(self.key).label()
        return {"tp": f"TP{n_gpus}", "tp-attn-ep-moe": f"TP{n_gpus} attention + EP{n_gpus} MoE",
                "ep": f"DP{n_gpus} attention + EP{n_gpus} MoE"}[self.key]


# Engine flags: SGLang server arguments (--tp, --ep, --enable-dp-attention: docs.sglang.io "Server
# Arguments", "Expert Parallelism", "DP, DPA and sgl-router"); vLLM --tensor-parallel-size,
# --data-parallel-size, --enable-expert-parallel (vLLM docs, "Data Parallel Deployment").
LAYOUTS = (
    LayoutName("tp", "tp", ("tensor-parallel",), "attention and experts tensor-parallel over the GPUs (SGLang/vLLM --tp N)"),
    LayoutName("tp-attn-ep-moe", "tp+ep", ("ep-moe", "tp-attn-ep-moe", "tp-ep"),
               "attention TP, routed experts EP: whole experts per GPU (SGLang --tp N --ep N, its 'EP8'; vLLM --tp N "
               "--enable-expert-parallel)"),
    LayoutName("ep", "dp-attn+ep", ("dp-attn-ep", "dp-attention", "ep"),
               "data-parallel attention (each GPU its own sequences), routed experts EP (SGLang --tp N --ep N "
               "--enable-dp-attention --dp N; vLLM --dp N --enable-expert-parallel)"),
)
LAYOUT_BY_KEY = {lay.key: lay for lay in LAYOUTS}
_LAYOUT_NAMES = {n: lay.key for lay in LAYOUTS for n in (lay.name, lay.key, *lay.aliases)}


def layout_of(key: str) -> LayoutName:
    """A layout's name record; a mixed layout (`tp4xdp2+tp2xep4`) is named by its own spelling."""
    if key in LAYOUT_BY_KEY:
        return LAYOUT_BY_KEY[key]
    return LayoutName(key, key, (), "mixed: attention TP x DP, routed experts TP x EP (TRT-LLM tp_size, "
                                    "enable_attention_dp, moe_tp_size, moe_ep_size)")


# ------------------------------------------------------------------ the split a layout makes
@dataclasses.dataclass(frozen=True)
class Split:
    """How a layout splits n GPUs: attention tensor-parallel over `attn_tp` GPUs in each of
    `attn_dp` data-parallel groups (each group its own sequences), the routed experts in `moe_ep`
    expert-parallel groups (E / moe_ep whole experts each), each expert's FFN tensor-parallel over
    the `moe_tp` GPUs of its group; attn_tp x attn_dp = moe_tp x moe_ep = n (aiconfigurator's
    `resolve_moe_parallelism`, TRT-LLM's mapping)."""

    attn_tp: int
    attn_dp: int
    moe_tp: int
    moe_ep: int

    @property
    def n_gpus(self) -> int:
        return self.attn_tp * self.attn_dp

    def key(self) -> str:
        """The mixed layout's spelling: `tp4xdp2+tp2xep4` (a width of 1 left out: `dp8+ep8`)."""
        def part(a: tuple[str, int], b: tuple[str, int]) -> str:
            return "x".join(f"{n}{w}" for n, w in (a, b) if w > 1) or f"{a[0]}1"
        return part(("tp", self.attn_tp), ("dp", self.attn_dp)) + "+" + part(("tp", self.moe_tp), ("ep", self.moe_ep))

    def label(self) -> str:
        """'TP4xDP2 attention + TP2xEP4 experts'."""
        return self.key().upper().replace("X", "x").replace("+", " attention + ") + " experts"


_MIXED = re.compile(r"^(?:tp(?P<at>\d+))?(?:x?dp(?P<ad>\d+))?\+(?:tp(?P<mt>\d+))?(?:x?ep(?P<me>\d+))?$")


def _parse_mixed(text: str) -> Split | None:
    """`tp4xdp2+tp2xep4` -> Split(4, 2, 2, 4); None where the text is not of that form (each side
    names at least one width; a side's widths multiply to the GPUs)."""
    m = _MIXED.match(text)
    if m is None or not (m["at"] or m["ad"]) or not (m["mt"] or m["me"]):
        return None
    w = {k: int(v) if v else 1 for k, v in m.groupdict().items()}
    if min(w.values()) < 1:
        return None
    return Split(w["at"], w["ad"], w["mt"], w["me"])


def layout_split(key: str, n: int) -> Split:
    """The split a layout key makes of n GPUs: the named layouts' (tp: attention and experts TP n;
    tp-attn-ep-moe: attention TP n, experts EP n; ep: attention DP n, experts EP n), or a mixed
    key's own widths. A mixed key whose widths do not make n GPUs: ValueError, one line."""
    if key == "tp":
        return Split(n, 1, n, 1)
    if key == "tp-attn-ep-moe":
        return Split(n, 1, 1, n)
    if key == "ep":
        return Split(1, n, 1, n)
    sp = _parse_mixed(key)
    if sp is None:
        raise ValueError(f"unknown layout '{key}': {layout_hint(key)}")
    if sp.attn_tp * sp.attn_dp != n or sp.moe_tp * sp.moe_ep != n:
        raise ValueError(f"--parallel {key}: attention {sp.attn_tp}x{sp.attn_dp} = {sp.attn_tp * sp.attn_dp} and experts "
                         f"{sp.moe_tp}x{sp.moe_ep} = {sp.moe_tp * sp.moe_ep} GPUs; both must be --gpus {n}")
    return sp


def layout_hint(text: str) -> str:
    """The one-line hint for a layout name that is not one: 'ep8' -> the GPU count goes in --gpus."""
    names = " | ".join(lay.name for lay in LAYOUTS)
    low = str(text).strip().lower()
    base, n = low.rstrip("0123456789"), low[len(low.rstrip("0123456789")):]
    if n and base in ("ep", "tp+ep", "ep-moe", "tp-attn-ep-moe"):
        return (f"the GPU count goes in --gpus: SGLang's EP{n} (attention TP, experts EP) is --parallel tp+ep --gpus {n}; "
                f"data-parallel attention with EP experts is --parallel dp-attn+ep --gpus {n}")
    if n and base in _LAYOUT_NAMES:
        return f"the GPU count goes in --gpus: --parallel {LAYOUT_BY_KEY[_LAYOUT_NAMES[base]].name} --gpus {n}"
    if n and base in ("dp", "dp-attn", "dpa"):
        return f"the GPU count goes in --gpus: --parallel dp-attn+ep --gpus {n}"
    return (f"expected one of {names} (or {', '.join(a for lay in LAYOUTS for a in lay.aliases)}), or a mixed layout "
            "naming each side's widths: tp4xdp2+tp2xep4 (attention TP4 in 2 data-parallel groups, experts TP2 in 4 "
            "expert-parallel groups)")


def layout_memory_hint(key: str) -> str:
    """What to add to a memory error of a layout whose name misleads: perfmodel's older 'ep' is
    data-parallel attention (attention weights on every GPU), which SGLang's 'EP8' is not."""
    if key != "ep":
        return ""
    return ("; dp-attn+ep (the older 'ep') keeps attention whole on every GPU: SGLang's EP8 (attention TP, experts "
            "EP) is --parallel tp+ep")


def layout_names() -> tuple[str, ...]:
    """Every name a layout is accepted by."""
    return tuple(_LAYOUT_NAMES)


def parse_parallel(v: Any) -> Any:
    """A layout name as engines and older perfmodel versions write it -> the model's key; a mixed
    layout (`tp4xdp2+tp2xep4`) -> its spelling without widths of 1 (`Split.key`)."""
    if isinstance(v, str):
        low = v.strip().lower()
        key = _LAYOUT_NAMES.get(low)
        if key is None:
            sp = _parse_mixed(low)
            if sp is None:
                raise ValueError(f"unknown layout '{v}': {layout_hint(v)}")
            return sp.key()
        return key
    return v


ParallelName = Annotated[str, BeforeValidator(parse_parallel)]
SpecKind = Literal["none", "chain", "ddtree"]
Workload = Literal["chat", "code", "math", "long-context", "thinking"]
EngineKind = Literal["vllm", "sglang", "trtllm"]
PosInt = Annotated[int, Field(ge=1, strict=True)]


@dataclasses.dataclass(frozen=True)
class Cli:
    """How a scenario field appears on the command line."""

    flags: tuple[str, ...]
    help: str
    parse: Callable[[str], Any] | None = None  # command-line text -> field value (None: typer's own type)
    grid: bool = False  # `compare` takes a comma list and sweeps it
    cli_default: str | None = None  # the default as typed, where the field's default is not text


# ------------------------------------------------------------------ command-line text -> values
def split_list(s: str) -> list[str]:
    return [x.strip() for x in str(s).split(",") if x.strip()]


def parse_ints(s: str, flag: str) -> list[int]:
    try:
        out = [int(x) for x in split_list(s)]
    except ValueError:
        raise ProjectionError(f"{flag} '{s}': expected comma-separated integers like 1,8,32,128") from None
    if not out or any(x < 1 for x in out):
        raise ProjectionError(f"{flag} '{s}': values must be positive integers")
    return out


def _concurrency(s: str) -> list[int]:
    return parse_ints(s, "--concurrency")


def _budget(s: str):
    if s == "auto":
        return "auto"
    try:
        b = int(s)
    except ValueError:
        raise ProjectionError(f"--budget '{s}': expected a positive integer or 'auto'") from None
    if b < 1:
        raise ProjectionError(f"--budget '{s}': must be ≥ 1")
    return b


def _dtypes(s: str) -> dict[str, str]:
    out = {}
    for part in split_list(s):
        k, eq, v = part.partition("=")
        if not eq or not k.strip() or not v.strip():
            raise ProjectionError(f"--dtype '{s}': expected name=dtype pairs like kv_cache=fp8,routed_experts=nvfp4")
        out[k.strip()] = v.strip()
    return out


# ------------------------------------------------------------------ the declaration
@dataclass(frozen=True, config=ConfigDict(extra="forbid", arbitrary_types_allowed=True))
class Request:
    """What to project. Defaults are the CLI's; `target`/`model` take a name, or a spec object."""

    target: Annotated[str | GpuSpec, Cli(("--target", "-t"), "GPU name or alias (perfmodel hw list); compare: a comma list.",
                                         grid=True)] = "b300"
    gpus: Annotated[PosInt, Cli(("--gpus", "-n"), "GPUs in the system; compare: a comma list like 4,8.", grid=True)] = 8
    model: Annotated[str | ModelSpec, Cli(("--model", "-m"), "Model preset (perfmodel models list).")] = "kimi-k2.6"
    parallel: Annotated[ParallelName, Cli(("--parallel",), "Layout: tp (TP over --gpus) | tp+ep (attention TP, experts EP: "
                                                       "SGLang's EP8; also ep-moe, tp-attn-ep-moe) | dp-attn+ep (data-parallel "
                                                       "attention, experts EP; also ep) | mixed, each side's widths: "
                                                       "tp4xdp2+tp2xep4 (attention TP4 x DP2, experts TP2 x EP4); "
                                                       "compare: a comma list.",
                                        grid=True)] = "tp"
    concurrency: Annotated[list[PosInt], Field(min_length=1),
                           Cli(("--concurrency", "-c"), "Comma-separated concurrencies.", parse=_concurrency,
                               cli_default="1,8,32,128")] = dataclasses.field(default_factory=lambda: [1, 8, 32, 128])
    context: Annotated[PosInt, Cli(("--context",), "Context length (tokens) of each sequence.")] = 8192
    spec: Annotated[SpecKind, Cli(("--spec",), "Speculative decoding: none | chain | ddtree.")] = "none"
    budget: Annotated[PosInt | Literal["auto"], Cli(("--budget",), "Tree budget B (verify B+1 tokens) or 'auto'.",
                                                    parse=_budget)] = "auto"
    acceptance: Annotated[str, Cli(("--acceptance",), "Acceptance: 'workload' (published figures of the drafter on --workload, "
                                                      "or spanning every workload), a preset name, scalar α ('0.8'), "
                                                      "'table:16=6.1,64=7.8' or 'file:calib.json'.")] = "workload"
    workload: Annotated[Workload | None, Cli(("--workload",), "Workload class the acceptance is taken for: chat | code | math | "
                                                             "long-context | thinking (default: τ spans them all).")] = None
    acceptance_length: Annotated[float | None, Field(ge=1, allow_inf_nan=False),
                                 Cli(("--acceptance-length",), "Your engine's mean acceptance length, the bonus token included "
                                                               "(SGLang 'accept len', vLLM 'Mean acceptance length'), measured "
                                                               "at --draft-tokens (chain) or --budget (ddtree).")] = None
    acceptance_at: Annotated[PosInt | None, Cli(("--acceptance-at",), "The tree budget (ddtree) or draft tokens (chain) "
                                                                     "--acceptance-length was measured at (default: --budget, "
                                                                     "or the drafter's block; a chain's --draft-tokens).")] = None
    draft_tokens: Annotated[PosInt | None, Cli(("--draft-tokens",), "Draft tokens per verify of a chain drafter (EAGLE-3, MTP: "
                                                                   "the engine's num_speculative_tokens).")] = None
    draft_topk: Annotated[PosInt | None, Field(le=MAX_DRAFT_TOPK),
                          Cli(("--draft-topk",), "EAGLE tree branching of an EAGLE-3 or MTP drafter: tokens per sequence "
                                                 "in each draft step after the first (SGLang --speculative-eagle-topk); "
                                                 "above 1 the tree's draft nodes are --budget (SGLang "
                                                 "--speculative-num-draft-tokens - 1) and its depth --draft-tokens "
                                                 "(--speculative-num-steps).")] = None
    spec_off_above: Annotated[PosInt | None, Cli(("--spec-off-above",), "The engine turns speculation off above this batch "
                                                                       "size (TensorRT-LLM max_concurrency, vLLM "
                                                                       "speculative_disable_by_batch_size).")] = None
    drafter: Annotated[str | None, Cli(("--drafter",), "Drafter the model is served with: its default, or an option of the "
                                                       "preset (dflash | eagle3 | mtp; perfmodel models show).")] = None
    graphs: Annotated[StrictBool, Cli(("--graphs/--no-graphs",), "CUDA-graph replay (default) or eager launches.")] = True
    tree_build: Annotated[Literal["cpu", "gpu"], Cli(("--tree-build",), "Where DDTree trees are built: gpu | cpu.")] = "gpu"
    isl: Annotated[PosInt | None, Cli(("--isl",), "Input tokens per request: serve whole requests (TTFT, TPOT, tok/s per "
                                                  "user and per GPU) under continuous batching; needs --osl.")] = None
    osl: Annotated[PosInt | None, Cli(("--osl",), "Output tokens per request (with --isl).")] = None
    lengths_file: Annotated[str | None, Cli(("--lengths-file",), "A JSON list of [isl, osl] pairs the requests draw from (a "
                                                                 "ShareGPT sample), instead of --isl/--osl.")] = None
    seed: Annotated[int, Field(ge=0, strict=True), Cli(("--seed",), "Seed of the lengths drawn from --lengths-file "
                                                                 "or --min-length-ratio.")] = 0
    min_length_ratio: Annotated[float, Field(gt=0, le=1, allow_inf_nan=False),
                                Cli(("--min-length-ratio",), "Each request's input and output lengths drawn uniformly "
                                                             "from this share of --isl/--osl up to them, as InferenceX's "
                                                             "benchmark_serving.py --random-range-ratio draws them (1: "
                                                             "fixed lengths).")] = 1.0
    engine: Annotated[EngineKind, Cli(("--engine",), "Serving engine whose scheduler forms the steps: vllm | sglang | trtllm "
                                                     "(its default token budget and prefill policy).")] = "vllm"
    max_batched_tokens: Annotated[PosInt | None, Cli(("--max-batched-tokens",), "Token budget of a step (vLLM "
                                                                               "max_num_batched_tokens, SGLang "
                                                                               "chunked_prefill_size, TRT-LLM max_num_tokens); "
                                                                               "default: the engine's.")] = None
    max_running: Annotated[PosInt | None, Cli(("--max-running",), "Running requests at most (vLLM max_num_seqs, SGLang "
                                                                 "max_running_requests, TRT-LLM max_batch_size); default: "
                                                                 "the engine's.")] = None
    recv_interval: Annotated[PosInt | None, Cli(("--recv-interval",), "SGLang --scheduler-recv-interval: new requests reach "
                                                                     "the scheduler every this many decode steps (and after "
                                                                     "each prefill step); default 1.")] = None
    batch_wait_iters: Annotated[int | None, Field(ge=0, strict=True),
                                Cli(("--batch-wait-iters",), "TRT-LLM batch_wait_timeout_iters: while requests decode, new "
                                                             "prompts wait up to this many steps for more to batch with "
                                                             "(see --batch-wait-tokens-ratio); default 0 (no waiting).")] = None
    batch_wait_tokens_ratio: Annotated[float | None, Field(ge=0, le=1, allow_inf_nan=False),
                                       Cli(("--batch-wait-tokens-ratio",), "TRT-LLM batch_wait_max_tokens_ratio: the wait "
                                                                           "ends once the step's tokens reach this share of "
                                                                           "--max-batched-tokens; default 0.")] = None
    adp_balance_iters: Annotated[int | None, Field(ge=1, strict=True),
                                 Cli(("--adp-balance-iters",), "TRT-LLM attention_dp_config enable_balance with "
                                                               "timeout_iters N: with data-parallel attention, new prompts "
                                                               "wait until every rank has one, at most N steps; default: "
                                                               "no balancing.")] = None
    request_rate: Annotated[float | None, Field(gt=0, allow_inf_nan=False),
                            Cli(("--request-rate",), "Requests per second (Poisson) instead of keeping C in flight.")] = None
    prefix_hit: Annotated[float, Field(ge=0, lt=1, allow_inf_nan=False),
                          Cli(("--prefix-hit",), "Share of each prompt served from the prefix cache.")] = 0.0
    profile: Annotated[str | None, Cli(("--profile",), "Profile JSON, or the name of a shipped profile (perfmodel/data/; "
                                                       "default: the embedded measured H200 profile); 'spec' = spec-derived.")] = None
    link: Annotated[str | None, Cli(("--link",), "Interconnect (hwspecs/links); default: the GPU's own.")] = None
    host_cpu_factor: Annotated[float, Field(gt=0, allow_inf_nan=False),
                               Cli(("--host-cpu-factor",), "Host CPU time relative to the profile's host.")] = 1.0
    observed: Annotated[str | None, Cli(("--observed",), "Known figure on a source machine, e.g. "
                                                         "'rtx-pro-6000,tp8,c=1,98tok/s'.")] = None
    hw_file: Annotated[str | None, Cli(("--hw-file",), "Your own GPU YAML (overrides --target).")] = None
    model_file: Annotated[str | None, Cli(("--model-file",), "Your own model YAML, or a HuggingFace config.json "
                                                             "(overrides --model).")] = None
    dtypes: Annotated[dict[str, str] | None, Cli(("--dtype",), "Weight/KV dtypes that differ from the model preset, e.g. "
                                                               "'kv_cache=fp8,routed_experts=nvfp4'.", parse=_dtypes)] = None
    calibration: Annotated[str | None, Cli(("--calibration",), "Calibration JSON written by `perfmodel calibrate`, or "
                                                             "engine:vllm | engine:sglang | engine:trtllm for a shipped "
                                                             "engine calibration.")] = None
    kernels: Annotated[str, Cli(("--kernels",), "Kernel set priced: " + " | ".join(KERNEL_SETS) + " (perfmodel: its own "
                                                "kernels; torch: PyTorch's native ops: SDPA, torch._grouped_mm, unfused norms).")
                       ] = "perfmodel"

    _kernel_set = field_validator("kernels")(lambda v: check_kernel_set(v))

    @field_validator("target", "model")
    @classmethod
    def _spec_checked(cls, v: Any) -> Any:
        # a spec built in code (model_construct, model_copy(update=...)) skips its validators:
        # checked here as a spec file is, so a zero bandwidth is a ValidationError, not a division by zero
        return type(v).model_validate(v.model_dump()) if isinstance(v, GpuSpec | ModelSpec) else v

    @field_validator("concurrency", mode="before")
    @classmethod
    def _one_concurrency(cls, v: Any) -> Any:
        if isinstance(v, int) and not isinstance(v, bool):
            return [v]
        return list(v) if isinstance(v, tuple) else v

    @field_validator("profile", "hw_file", "model_file", "calibration", "lengths_file", mode="before")
    @classmethod
    def _paths(cls, v: Any) -> Any:
        return str(v) if isinstance(v, Path) else v

    @field_validator("host_cpu_factor", "acceptance_length", "request_rate", "prefix_hit", "min_length_ratio",
                     "batch_wait_tokens_ratio", mode="before")
    @classmethod
    def _number(cls, v: Any) -> Any:
        if v is None:
            return v
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ValueError(f"expected a number, got {v!r}")
        return v

    def server_settings(self) -> dict[str, Any]:
        return server_settings(self)

    @property
    def target_name(self) -> str:
        return self.target if isinstance(self.target, str) else self.target.name

    @property
    def model_name(self) -> str:
        return self.model if isinstance(self.model, str) else self.model.name


# The engine server settings a scenario may set (Request fields; a calibration point carries them too),
# by the name `serving.Engine.with_settings` takes.
SERVER_SETTINGS = {"max_batched_tokens": "max_batched_tokens", "max_running": "max_seqs", "recv_interval": "recv_interval",
                   "batch_wait_iters": "batch_wait_iters", "batch_wait_tokens_ratio": "batch_wait_tokens_ratio",
                   "adp_balance_iters": "adp_balance_iters"}


def server_settings(scenario: Any) -> dict[str, Any]:
    """The engine's server settings a Request (or a calibration point) sets, None where it keeps the
    engine's default, keyed as `serving.Engine.with_settings` takes them."""
    return {engine_name: getattr(scenario, name) for name, engine_name in SERVER_SETTINGS.items()}


# Settings only one engine has: (scenario field, its flag, the engine, the engine's own name of it)
_ENGINE_ONLY = (("recv_interval", "--recv-interval", "sglang", "--scheduler-recv-interval"),
                ("batch_wait_iters", "--batch-wait-iters", "trtllm", "batch_wait_timeout_iters"),
                ("batch_wait_tokens_ratio", "--batch-wait-tokens-ratio", "trtllm", "batch_wait_max_tokens_ratio"),
                ("adp_balance_iters", "--adp-balance-iters", "trtllm", "attention_dp_config timeout_iters"))


def server_settings_problem(scenario: Any, engine: str | None) -> str | None:
    """The one-line reason a scenario's server settings do not fit its engine, or None."""
    for name, flag, owner, theirs in _ENGINE_ONLY:
        if getattr(scenario, name) is not None and (engine or "vllm") != owner:
            return f"{flag} is {owner}'s {theirs}: give --engine {owner} (got --engine {engine or 'vllm'})"
    return None


def fields() -> dict[str, tuple[Any, Any, Cli]]:
    """Each scenario field: (its annotation without the Cli record, its default, its Cli record)."""
    hints = typing.get_type_hints(Request, include_extras=True)
    out = {}
    for f in dataclasses.fields(Request):
        ann = hints[f.name]
        cli = next(m for m in ann.__metadata__ if isinstance(m, Cli))
        rest = tuple(m for m in ann.__metadata__ if not isinstance(m, Cli))
        base = Annotated[(ann.__origin__, *rest)] if rest else ann.__origin__
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        out[f.name] = (base, default, cli)
    return out


def request_error(e: ValidationError) -> str:
    """One line naming the field: '--budget: Input should be ... (got 0)'."""
    err = e.errors(include_url=False)[0]
    loc = [str(p) for p in err["loc"] if not isinstance(p, int)]
    field = loc[0] if loc else "request"
    msg = err["msg"].removeprefix("Value error, ")
    flag = fields()[field][2].flags[0].split("/")[0] if field in fields() else f"--{field.replace('_', '-')}"
    return f"{flag}: {msg} (got {err['input']!r})"


def make_request(**kw) -> Request:
    """`Request(**kw)`, with a bad field as one-line `ProjectionError` (for the CLI)."""
    try:
        return Request(**kw)
    except ValidationError as e:
        raise ProjectionError(request_error(e)) from None


def request_schema() -> dict:
    return TypeAdapter(Request).json_schema()
