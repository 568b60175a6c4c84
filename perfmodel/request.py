"""A projection request, and its resolution into the inputs the model computes on.

Everything that reads files or parses user text lives here: the `Request` schema (the CLI's
constraints, checked by pydantic), GPU/model/link specs, the profile, the acceptance source and
the `--observed` figure. `perfmodel.model.project` receives a `Resolved` and only does arithmetic.

`Request` is a pydantic dataclass: it validates on construction and on `dataclasses.replace`,
and a bad field raises `ValueError` (pydantic's `ValidationError`) naming the field.
"""

from __future__ import annotations

import dataclasses
import math
import re
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, StrictBool, TypeAdapter, ValidationError, field_validator
from pydantic.dataclasses import dataclass

from perfmodel.model import sanity
from perfmodel.profile import Profile, check_kernel_set, load_profile
from perfmodel.specs import registry
from perfmodel.specs.schema import GpuSpec, InterconnectSpec, MemoryKinds, ModelSpec

DEFAULT_PROFILE = "h200-sxm.json"
# shipped beside it: session 8's profile of 2x H200 over NVLink4 (older kernels), which holds the
# measured collectives and the 2-GPU e2e points that the embedded 1-GPU profile lacks; `perfmodel
# validate` predicts its e2e points from its own benches (evidence/README.md, "Profiles")
TWO_GPU_PROFILE = "h200-sxm-x2-0565ba9.json"
PARALLEL = ("tp", "ep", "tp-attn-ep-moe")
SPEC = ("none", "chain", "ddtree")

ParallelKind = Literal["tp", "ep", "tp-attn-ep-moe"]
SpecKind = Literal["none", "chain", "ddtree"]
PosInt = Annotated[int, Field(ge=1, strict=True)]


class ProjectionError(ValueError):
    """Bad request; the CLI prints the message as one line and exits 2."""


@dataclass(frozen=True, config=ConfigDict(extra="forbid", arbitrary_types_allowed=True))
class Request:
    """What to project. Defaults are the CLI's; `target`/`model` take a name, or a spec object."""

    target: str | GpuSpec = "b300"
    gpus: PosInt = 8
    model: str | ModelSpec = "kimi-k2.6"
    parallel: ParallelKind = "tp"
    concurrency: Annotated[list[PosInt], Field(min_length=1)] = dataclasses.field(
        default_factory=lambda: [1, 8, 32, 128])
    context: PosInt = 8192
    spec: SpecKind = "none"
    budget: PosInt | Literal["auto"] = "auto"
    acceptance: str = "dflash_default"
    graphs: StrictBool = True
    tree_build: Literal["cpu", "gpu"] = "gpu"
    profile: str | None = None  # path, "spec", or None for the embedded default
    link: str | None = None
    host_cpu_factor: Annotated[float, Field(gt=0, allow_inf_nan=False)] = 1.0
    observed: str | None = None
    hw_file: str | None = None
    model_file: str | None = None
    dtype_overrides: dict[str, str] | None = None  # e.g. {"routed_experts": "nvfp4"} (validation rows)
    calibration: str | None = None  # calibration JSON (`perfmodel calibrate`); applied by the model
    kernels: str = "perfmodel"  # kernel set (profile.KERNEL_SETS): perfmodel's kernels, or torch's native ops

    _kernel_set = field_validator("kernels")(lambda v: check_kernel_set(v))

    @field_validator("concurrency", mode="before")
    @classmethod
    def _one_concurrency(cls, v: Any) -> Any:
        if isinstance(v, int) and not isinstance(v, bool):
            return [v]
        return list(v) if isinstance(v, tuple) else v

    @field_validator("profile", "hw_file", "model_file", "calibration", mode="before")
    @classmethod
    def _paths(cls, v: Any) -> Any:
        return str(v) if isinstance(v, Path) else v

    @field_validator("host_cpu_factor", mode="before")
    @classmethod
    def _number(cls, v: Any) -> Any:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ValueError(f"expected a number, got {v!r}")
        return v

    @property
    def target_name(self) -> str:
        return self.target if isinstance(self.target, str) else self.target.name

    @property
    def model_name(self) -> str:
        return self.model if isinstance(self.model, str) else self.model.name


def request_error(e: ValidationError) -> str:
    """One line naming the field: '--budget: Input should be ... (got 0)'."""
    err = e.errors(include_url=False)[0]
    loc = [str(p) for p in err["loc"] if not isinstance(p, int)]
    field = loc[0] if loc else "request"
    msg = err["msg"].removeprefix("Value error, ")
    return f"--{field.replace('_', '-')}: {msg} (got {err['input']!r})"


# ------------------------------------------------------------------------------ profiles
_PROFILES: dict = {}


def shipped_profile_path(name: str) -> Path | None:
    """The path of a profile shipped in perfmodel/data/ (file name, with .json), or None."""
    p = resources.files("perfmodel").joinpath("data", name)
    return Path(str(p)) if p.is_file() else None


def embedded_profile_path() -> Path | None:
    """The embedded default profile's path, or None (an install without it: spec-derived)."""
    return shipped_profile_path(DEFAULT_PROFILE)


def shipped_profiles() -> list[Path]:
    """The profiles shipped in perfmodel/data/, sorted by name (the embedded default first)."""
    d = Path(str(resources.files("perfmodel").joinpath("data")))
    return sorted(d.glob("*.json"), key=lambda p: p.stem)


def shipped_profile_names() -> list[str]:
    """The shipped profiles' names (file names without .json), as --profile takes them."""
    return [p.stem for p in shipped_profiles()]


def profile_path(spec: str) -> Path:
    """A --profile argument as a path: the file it names, or else a shipped profile of that name
    (`h200-sxm-x2-0565ba9`, with or without .json); a missing file is left to the reader's error."""
    path = Path(spec)
    if path.exists() or path.parent != Path("."):
        return path
    shipped = shipped_profile_path(spec if spec.endswith(".json") else spec + ".json")
    return shipped or path


def resolve_profile(spec: str | None, gpu_for_spec: GpuSpec | None = None) -> Profile:
    """A profile path or shipped profile name, 'spec' (spec-derived for `gpu_for_spec`) or None
    (the embedded one); cached."""
    from perfmodel.model.derived import spec_derived_profile

    if spec == "spec" or (spec is None and embedded_profile_path() is None):
        return spec_derived_profile(gpu_for_spec or registry.load_gpu("h200"), registry.load_memory_kinds())
    path = profile_path(spec) if spec else embedded_profile_path()
    try:
        key = (str(path.resolve()), path.stat().st_mtime_ns)
    except OSError:
        key = None
    if key in _PROFILES:
        return _PROFILES[key]
    try:
        prof = load_profile(path)
    except ValueError as e:
        raise ProjectionError(str(e)) from None
    sanity.check_profile_refs(prof, path)
    if key is not None:
        _PROFILES[key] = prof  # sensitivity, reports and compare build many projectors on one profile
    return prof


def profile_source_gpu(profile: Profile) -> GpuSpec:
    name = profile.provenance.gpu_spec
    if not name:
        raise ProjectionError("profile provenance.gpu_spec is empty: cannot tell which GPU it was measured on")
    try:
        return registry.load_gpu(name)
    except registry.SpecError as e:
        raise ProjectionError(str(e)) from None


# ------------------------------------------------------------------------------ --observed
_OBS_PAR = re.compile(r"^(?P<par>tp-attn-ep-moe|tp|ep)(?P<n>\d+)$")


def parse_observed(s: str) -> dict:
    """'[gpu,]tpN|epN|tp-attn-ep-moeN,c=C,X tok/s[,ctx=L][,spec=chain|ddtree][,b=B]' -> fields.
    X is tokens/s per stream; a speculative figure names its spec (and budget for ddtree)."""
    usage = f"--observed '{s}': expected like 'rtx-pro-6000,tp8,c=1,98tok/s[,ctx=8192][,spec=ddtree,b=16]'"
    parts = [x.strip() for x in s.replace(" ", "").split(",") if x.strip()]
    out: dict = {"gpu": None, "context": None, "spec": "none", "budget": None}
    for i, part in enumerate(parts):
        low = part.lower()
        m = _OBS_PAR.match(low)
        try:
            if m:
                out["parallel"], out["gpus"] = m["par"], int(m["n"])
            elif low.startswith("c="):
                out["concurrency"] = int(low[2:])
            elif low.startswith("ctx="):
                out["context"] = int(low[4:])
            elif low.startswith("spec="):
                out["spec"] = low[5:]
            elif low.startswith("b="):
                out["budget"] = int(low[2:])
            elif low.endswith("tok/s"):
                out["tokens_per_s"] = float(low[:-5])
            elif i == 0:
                out["gpu"] = part
            else:
                raise ValueError(part)
        except ValueError:
            raise ProjectionError(f"{usage}; cannot read '{part}'") from None
    missing = [k for k in ("parallel", "concurrency", "tokens_per_s") if k not in out]
    if missing:
        raise ProjectionError(f"{usage}; missing {', '.join(missing)}")
    if out["gpus"] < 1 or out["concurrency"] < 1 or not (0 < out["tokens_per_s"] < math.inf):
        raise ProjectionError(f"{usage}; GPUs, concurrency and tok/s must be positive and finite")
    if out["context"] is not None and out["context"] < 1:
        raise ProjectionError(f"{usage}; ctx must be >= 1")
    if out["spec"] not in ("none", "chain", "ddtree"):
        raise ProjectionError(f"{usage}; spec must be none, chain or ddtree")
    if out["spec"] == "ddtree" and not out["budget"]:
        raise ProjectionError(f"{usage}; spec=ddtree needs b=<tree budget>")
    return out


@dataclasses.dataclass(frozen=True)
class Observed:
    """A known figure on a source machine (`--observed`), with its specs resolved."""

    figure: dict  # parse_observed's fields
    gpu: GpuSpec
    link: InterconnectSpec | None


# ------------------------------------------------------------------------------ resolution
@dataclasses.dataclass(frozen=True)
class Resolved:
    """A validated request with every input loaded: what the model computes on."""

    req: Request
    gpu: GpuSpec
    model: ModelSpec
    link: InterconnectSpec | None
    profile: Profile
    source_gpu: GpuSpec
    mk: MemoryKinds
    acc: Any  # AcceptanceSource | None
    observed: Observed | None
    profile_path: str  # as reported: the path given, the embedded file's name, or "spec-derived"


def _specs(req: Request) -> tuple[GpuSpec, ModelSpec, InterconnectSpec | None]:
    gpu = req.target if isinstance(req.target, GpuSpec) else (
        registry.load_gpu_file(req.hw_file) if req.hw_file else registry.load_gpu(req.target))
    if isinstance(req.model, ModelSpec):
        model = req.model
    elif req.model_file:
        from perfmodel.specs import hf

        model = hf.import_hf_config(req.model_file) if hf.is_hf_config(req.model_file) else \
            registry.load_model_file(req.model_file)
    else:
        model = registry.load_model(req.model)
    link = sanity.resolve_link(req, gpu) if req.gpus > 1 else None
    if req.dtype_overrides:
        model = model.model_copy(update={"dtypes": model.dtypes.model_validate(
            model.dtypes.model_dump() | req.dtype_overrides)})
    return gpu, model, link


def _check(req: Request, model: ModelSpec) -> None:
    """Constraints that need the model spec (the rest are in `Request`'s schema)."""
    if req.parallel != "tp" and model.moe is None:
        raise ProjectionError(f"--parallel {req.parallel} needs an MoE model; {model.name} is dense")
    if req.spec != "none" and model.drafter is None:
        raise ProjectionError(f"--spec {req.spec} needs a drafter in the model spec; {model.name} has none")


def _acceptance(req: Request, model: ModelSpec):
    if req.spec == "none":
        return None
    from perfmodel.model.acceptance import acceptance_from_cli

    depth = model.drafter.block_size - 1
    try:
        acc = acceptance_from_cli(req.acceptance, depth, structure="chain" if req.spec == "chain" else "ddtree")
    except ValueError as e:
        raise ProjectionError(f"--acceptance '{req.acceptance}': {str(e).splitlines()[0]}") from None
    sanity.check_acceptance(req.acceptance, depth)
    return acc


def _observed(req: Request, source_gpu: GpuSpec, model: ModelSpec) -> Observed | None:
    if not req.observed:
        return None
    o = parse_observed(req.observed)
    try:
        g = registry.load_gpu(o["gpu"]) if o["gpu"] else source_gpu
    except registry.SpecError as e:
        raise ProjectionError(f"--observed '{req.observed}': {e}") from None
    sanity.check_observed(req.observed, o, model, g, o["context"] if o["context"] is not None else req.context)
    link = registry.load_link(g.default_interconnect) if o["gpus"] > 1 else None
    return Observed(o, g, link)


def resolve(req: Request) -> Resolved:
    """Load and check everything `req` names; every failure is one-line `ProjectionError`."""
    if not isinstance(req, Request):
        raise ProjectionError(f"expected a perfmodel Request, got {type(req).__name__}")
    try:
        gpu, model, link = _specs(req)
        sanity.check_request(req, model)
        _check(req, model)
        profile = resolve_profile(req.profile, gpu if req.profile == "spec" else None)
        sanity.check_treebuild(req, profile, req.profile or "the embedded profile")
        source_gpu = profile_source_gpu(profile)
        acc = _acceptance(req, model)
        observed = _observed(req, source_gpu, model)
        mk = registry.load_memory_kinds()
    except registry.SpecError as e:
        raise ProjectionError(str(e)) from None
    path = req.profile or (DEFAULT_PROFILE if embedded_profile_path() else "spec-derived")
    return Resolved(req, gpu, model, link, profile, source_gpu, mk, acc, observed, path)


def make_request(**kw) -> Request:
    """`Request(**kw)`, with a bad field as one-line `ProjectionError` (for the CLI)."""
    try:
        return Request(**kw)
    except ValidationError as e:
        raise ProjectionError(request_error(e)) from None


def request_schema() -> dict:
    return TypeAdapter(Request).json_schema()
