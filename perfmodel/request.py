"""Loading what a request names: GPU/model/link specs, the profile, the acceptance source and
the `--observed` figure, each checked, every failure one line (`ProjectionError`).

`resolve_specs(req)` turns a `Request` (the scenario, `perfmodel.scenario`) into the model's
inputs (`perfmodel.model.resolved.Resolved`) without a calibration; `perfmodel.api.resolve`
adds the calibration and the profile's self-check. The model receives a `Resolved` and only
does arithmetic.
"""

from __future__ import annotations

import dataclasses
import math
import re
from importlib import resources
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from perfmodel.errors import ProjectionError
from perfmodel.inputs import InputError, escaped, load_json, parse_json, parse_yaml, read_text, validated
from perfmodel.model import sanity
from perfmodel.model.resolved import Observed, Resolved
from perfmodel.profile import Profile, load_profile
from perfmodel.scenario import PARALLEL, SPEC, Request, layout_names, make_request, parse_parallel, request_error, request_schema  # noqa: F401
from perfmodel.specs import registry
from perfmodel.specs.schema import GpuSpec, InterconnectSpec, ModelSpec

DEFAULT_PROFILE = "h200-sxm.json"
# shipped beside it: a profile of 2x H200 over NVLink4 (older kernels), which holds the measured
# collectives and the 2-GPU e2e points that the embedded 1-GPU profile lacks; `perfmodel validate`
# predicts its e2e points from its own benches (evidence/README.md, "Profiles")
TWO_GPU_PROFILE = "h200-sxm-x2-0565ba9.json"


# ------------------------------------------------------------------------------ profiles
_PROFILES: dict = {}


def shipped_profile_path(name: str) -> Path | None:
    """The path of a profile shipped in perfmodel/data/ (file name, with .json), or None."""
    p = resources.files("perfmodel").joinpath("data", name)
    return Path(str(p)) if p.is_file() else None


ENGINE_CALIBRATION = "engine:"  # --calibration engine:<name>: a calibration shipped in perfmodel/data/engines/


def shipped_engine_calibrations() -> list[str]:
    """The engine calibrations shipped in perfmodel/data/engines/ (names, as engine:<name> takes them)."""
    d = resources.files("perfmodel").joinpath("data", "engines")
    return sorted(Path(str(p)).stem for p in d.iterdir() if str(p).endswith(".json")) if d.is_dir() else []


def calibration_path(spec: str) -> Path:
    """A --calibration argument as a path: a file, or `engine:<name>` for a shipped engine
    calibration (fitted on aiconfigurator's measured serving points; evidence/engine-calibrations/)."""
    if not spec.startswith(ENGINE_CALIBRATION):
        return Path(spec)
    name = spec[len(ENGINE_CALIBRATION):]
    if name not in shipped_engine_calibrations():
        raise ProjectionError(f"--calibration {spec}: no shipped engine calibration '{name}' (shipped: "
                              f"{', '.join(ENGINE_CALIBRATION + n for n in shipped_engine_calibrations()) or 'none'})")
    return Path(str(resources.files("perfmodel").joinpath("data", "engines", f"{name}.json")))


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
    _check_profile_refs(prof, path)
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


def model_preset_of(model_id: str) -> str | None:
    """The model preset a serving engine's model id names ('moonshotai/Kimi-K2.6', or a local
    path '/models/kimi-k2.6'): the id itself, else its last path part, as a preset name or alias
    (`perfmodel models list`); None when neither is one. No guessing beyond that: an id such as
    'Kimi-K2-Instruct' (FP8 weights) is not taken for the INT4 'kimi-k2.6' preset."""
    ident = str(model_id).strip()
    for cand in dict.fromkeys((ident, ident.rstrip("/").rsplit("/", 1)[-1])):
        if not cand:
            continue
        try:
            return registry.load_model(cand).name
        except registry.SpecError:
            continue
    return None


# ------------------------------------------------------------------------------ --observed
_OBS_PAR = re.compile(r"^(?P<par>" + "|".join(re.escape(n) for n in sorted(layout_names(), key=len, reverse=True))
                      + r")(?P<n>\d+)$")


def parse_observed(s: str) -> dict:
    """'[gpu,]<layout>N,c=C,X tok/s[,ctx=L][,spec=chain|ddtree][,b=B]' -> fields, the layout
    by any of its names (tp8, tp+ep8, dp-attn+ep8; the older ep8, tp-attn-ep-moe8).
    X is tokens/s per stream; a speculative figure names its spec (and budget for ddtree)."""
    usage = f"--observed '{s}': expected like 'rtx-pro-6000,tp8,c=1,98tok/s[,ctx=8192][,spec=ddtree,b=16]'"
    parts = [x.strip() for x in s.replace(" ", "").split(",") if x.strip()]
    out: dict = {"gpu": None, "context": None, "spec": "none", "budget": None}
    for i, part in enumerate(parts):
        low = part.lower()
        m = _OBS_PAR.match(low)
        try:
            if m:
                out["parallel"], out["gpus"] = parse_parallel(m["par"]), int(m["n"])
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


# ------------------------------------------------------------------------------ resolution
def _specs(req: Request) -> tuple[GpuSpec, ModelSpec, InterconnectSpec | None]:
    gpu = req.target if isinstance(req.target, GpuSpec) else (
        registry.load_gpu_file(req.hw_file) if req.hw_file else registry.load_gpu(req.target))
    if isinstance(req.model, ModelSpec):
        model = req.model
    elif req.model_file:
        model = _model_file(req.model_file)
    else:
        model = registry.load_model(req.model)
    link = _link(req, gpu) if req.gpus > 1 else None
    if req.dtypes:
        from pydantic import ValidationError

        try:
            model = model.model_copy(update={"dtypes": model.dtypes.model_validate(model.dtypes.model_dump() | req.dtypes)})
        except ValidationError as e:
            err = e.errors(include_url=False)[0]
            name = ".".join(str(x) for x in err["loc"])
            what = f"not a dtype of the model (known: {', '.join(type(model.dtypes).model_fields)})" \
                if err["type"] == "extra_forbidden" else err["msg"]
            raise ProjectionError(f"--dtype {name}={err['input']}: {what}") from None
    return gpu, model, link


def _model_file(path: str) -> ModelSpec:
    """--model-file: a model YAML, or a HuggingFace config.json."""
    from perfmodel.specs import hf

    return hf.import_hf_config(path) if hf.is_hf_config(path) else registry.load_model_file(path)


def _link(req: Request, gpu: GpuSpec):
    """The interconnect of a multi-GPU request: --link, else the GPU spec's default_interconnect."""
    try:
        return registry.load_link(req.link or gpu.default_interconnect)
    except registry.SpecError as e:
        where = "--link" if req.link else f"{req.hw_file or 'GPU ' + gpu.name}: default_interconnect"
        raise ProjectionError(f"{where}: {e}") from None


def _check(req: Request, model: ModelSpec) -> None:
    """Constraints that need the model spec (the rest are in `Request`'s schema)."""
    if req.parallel != "tp" and model.moe is None:
        raise ProjectionError(f"--parallel {req.parallel} needs an MoE model; {model.name} is dense")
    if req.spec != "none" and model.drafter is None and req.drafter not in model.drafter_options:
        options = f" (its drafter options: {', '.join(sorted(model.drafter_options))}; pick one with --drafter)" \
            if model.drafter_options else ""
        raise ProjectionError(f"--spec {req.spec} needs a drafter in the model spec; {model.name} has none{options}")
    spec_only = [f for f, v in (("--workload", req.workload), ("--acceptance-length", req.acceptance_length),
                                ("--draft-tokens", req.draft_tokens), ("--draft-topk", req.draft_topk),
                                ("--drafter", req.drafter),
                                ("--spec-off-above", req.spec_off_above), ("--acceptance-at", req.acceptance_at))
                if v is not None]
    if spec_only and req.spec == "none":
        raise ProjectionError(f"{spec_only[0]} describes speculative decoding: give --spec chain or --spec ddtree")
    if req.workload is not None and req.acceptance != "workload":
        raise ProjectionError(f"--workload {req.workload} picks the published acceptance of that workload; it cannot be "
                              f"combined with --acceptance {req.acceptance}")
    if req.acceptance_length is not None and req.acceptance != "workload":
        raise ProjectionError(f"--acceptance-length gives τ itself; it cannot be combined with --acceptance {req.acceptance}")
    if req.acceptance_at is not None and req.acceptance_length is None:
        raise ProjectionError("--acceptance-at says where --acceptance-length was measured: give --acceptance-length too")


def _drafter(req: Request, model: ModelSpec) -> ModelSpec:
    """The model served with the drafter the request names, drafting `--draft-tokens` per verify."""
    if req.spec == "none" or (model.drafter is None and req.drafter is None):
        return model
    if req.drafter is not None:
        try:
            model = model.with_drafter(req.drafter)
        except ValueError as e:
            raise ProjectionError(f"--drafter: {e}") from None
    if req.draft_tokens is not None:
        if model.drafter.kind == "dflash":
            raise ProjectionError(f"--draft-tokens is the chain length of an EAGLE-3 or MTP drafter; {model.name}'s "
                                  f"DFlash drafter drafts its block of {model.drafter.block_size - 1}: use --budget")
        model = model.model_copy(update={"drafter": model.drafter.model_copy(update={"num_speculative_tokens": req.draft_tokens})})
    if req.spec == "ddtree" and model.drafter.kind != "dflash":
        raise ProjectionError(f"--spec ddtree builds trees from a block drafter's per-position distributions; the "
                              f"{model.drafter.kind} drafter drafts a chain: use --spec chain")
    if req.draft_topk is not None:
        if model.drafter.kind == "dflash":
            raise ProjectionError(f"--draft-topk is the EAGLE tree branching of an EAGLE-3 or MTP drafter; {model.name}'s "
                                  f"DFlash drafter drafts one block: use --spec ddtree for a tree over it")
        model = model.model_copy(update={"drafter": model.drafter.model_copy(update={"topk": req.draft_topk})})
    _check_eagle_tree(req, model)
    return model


def _check_eagle_tree(req: Request, model: ModelSpec) -> None:
    """An EAGLE tree (topk > 1) verifies the nodes --budget names, at most the nodes its draft
    steps score (SGLang's organize_draft_results picks them among those by a top-k)."""
    from perfmodel.specs.schema import tree_candidates

    d = model.drafter
    if d is None or d.kind == "dflash" or d.topk == 1:
        return
    steps = d.num_speculative_tokens
    if req.budget == "auto":
        raise ProjectionError(f"--draft-topk {d.topk} drafts a tree: give its draft nodes with --budget (SGLang "
                              f"--speculative-num-draft-tokens - 1, at most {tree_candidates(d.topk, steps)} for "
                              f"{steps} steps)")
    if req.budget > tree_candidates(d.topk, steps):
        raise ProjectionError(f"--budget {req.budget}: an EAGLE tree of {steps} draft steps with topk {d.topk} scores "
                              f"{tree_candidates(d.topk, steps)} draft nodes, the most its verify can take")


def _acceptance(req: Request, model: ModelSpec):
    if req.spec == "none":
        return None
    from perfmodel.model.acceptance import acceptance_from_cli, engine_setting, from_engine_acceptance, workload_source

    depth = model.drafter.block_size - 1
    kind = model.drafter.kind
    topk = getattr(model.drafter, "topk", 1)
    structure = "ddtree" if req.spec == "ddtree" else "eagle" if topk > 1 else "chain"
    figures = registry.load_acceptance_data().figures
    if req.acceptance_length is not None:
        # measured at the engine's setting: the chain's draft tokens, the EAGLE tree's (topk, steps, verify
        # tokens) or the DDTree budget asked
        k = req.acceptance_at or (depth if structure == "chain" or req.budget == "auto" else req.budget)
        setting = (engine_setting(draft_tokens=k) if structure == "chain"
                   else engine_setting(topk=topk, steps=depth, verify_tokens=k + 1) if structure == "eagle"
                   else engine_setting(ddtree_budget=k, depth=depth))
        try:
            return from_engine_acceptance(req.acceptance_length, setting, kind, structure, depth, eagle_topk=topk,
                                          figures=figures)
        except ValueError as e:
            raise ProjectionError(f"--acceptance-length {req.acceptance_length:g}: {str(e).splitlines()[0]}") from None
    if req.acceptance == "workload":
        try:
            return workload_source(kind, req.workload, depth, structure, eagle_topk=topk, figures=figures)
        except ValueError as e:
            raise ProjectionError(f"--workload {req.workload or '(all)'}: {str(e).splitlines()[0]}") from None
    try:
        acc = acceptance_from_cli(req.acceptance, depth, structure=structure, drafter=kind, figures=figures,
                                  read_file=lambda path: _checked_json_text(path, "calibration file"), eagle_topk=topk)
    except ValueError as e:
        raise ProjectionError(f"--acceptance '{escaped(req.acceptance)}': {str(e).splitlines()[0]}") from None
    sanity.check_acceptance(req.acceptance, depth)
    return acc


class AcceptanceFile(BaseModel):
    """An acceptance calibration file (`--acceptance file:PATH`): the fields
    `perfmodel.model.acceptance.from_calibration_json` reads, typed (no string or bool for a
    probability); other keys are kept."""

    model_config = ConfigDict(extra="allow", strict=True, allow_inf_nan=False)

    q: list[list[float]] = Field(min_length=1, description="acceptance probability per depth and rank")
    p: list[list[float]] = Field(min_length=1, description="draft probability per depth and rank")
    description: str = ""
    tau_sigma_rel: float | None = Field(None, ge=0, description="1σ of τ as a fraction of (τ - 1)")


def _checked_json_text(path: str, what: str) -> str:
    """The text of an acceptance file, which the model parses itself: checked first by the input
    layer (size, nesting, duplicate keys, NaN) and `AcceptanceFile`."""
    text = read_text(path, what)
    validated(AcceptanceFile, parse_json(text, f"{what} {path}"), f"{what} {path}")
    return text


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


def _lengths(req: Request) -> tuple[Request, tuple[tuple[int, int], ...] | None]:
    """A serving request's lengths (--isl/--osl or --lengths-file), its decode context set to the
    mean decode context of a request (isl + osl / 2: what a step-level figure prices)."""
    if (req.isl is None) != (req.osl is None):
        raise ProjectionError("--isl and --osl go together: the input and output tokens of each request")
    if req.lengths_file and req.isl is not None:
        raise ProjectionError("give --isl/--osl or --lengths-file, not both")
    from perfmodel.scenario import SERVER_SETTINGS, fields, server_settings_problem

    serving_only = [fields()[k][2].flags[0] for k in SERVER_SETTINGS if getattr(req, k) is not None] + \
        (["--request-rate"] if req.request_rate is not None else []) + (["--prefix-hit"] if req.prefix_hit else [])
    if serving_only and req.isl is None and not req.lengths_file:
        raise ProjectionError(f"{serving_only[0]} shapes serving whole requests: give --isl and --osl (or --lengths-file)")
    problem = server_settings_problem(req, req.engine)
    if problem:
        raise ProjectionError(problem)
    if req.min_length_ratio < 1 and req.isl is None:
        raise ProjectionError("--min-length-ratio draws each request's lengths up to --isl/--osl: give them")
    if req.isl is not None:
        r = req.min_length_ratio  # the mean of the uniform draw from floor(r x len) to len
        isl, osl = (req.isl + int(req.isl * r)) / 2, (req.osl + int(req.osl * r)) / 2
        return dataclasses.replace(req, context=max(1, round(isl + osl / 2) if r < 1 else req.isl + req.osl // 2)), None
    if not req.lengths_file:
        return req, None
    where = f"--lengths-file {req.lengths_file}"
    try:
        data = load_json(req.lengths_file, "--lengths-file")
    except InputError as e:
        raise ProjectionError(str(e)) from None
    ok = isinstance(data, list) and data and all(
        isinstance(x, list | tuple) and len(x) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= sanity.MAX_CONTEXT for v in x) for x in data)
    if not ok:
        raise ProjectionError(f"{where}: expected a non-empty JSON list of [isl, osl] pairs of integers from 1 to "
                              f"{sanity.MAX_CONTEXT}")
    pairs = tuple((int(i), int(o)) for i, o in data)
    ctx = round(sum(i for i, _ in pairs) / len(pairs) + sum(o for _, o in pairs) / len(pairs) / 2)
    return dataclasses.replace(req, context=max(1, ctx)), pairs


def resolve_specs(req: Request, profile: Profile | None = None) -> Resolved:
    """Load and check everything `req` names but its calibration (against `profile` when given,
    else the one `req` names); every failure is one-line `ProjectionError`."""
    if not isinstance(req, Request):
        raise ProjectionError(f"expected a perfmodel Request, got {type(req).__name__}")
    req, lengths = _lengths(req)
    try:
        if req.link:
            _link(req, None)
        gpu, model, link = _specs(req)
        _check(req, model)
        model = _drafter(req, model)
        sanity.check_request(req, model)
        profile = profile or resolve_profile(req.profile, gpu if req.profile == "spec" else None)
        sanity.check_treebuild(req, profile, req.profile or "the embedded profile")
        source_gpu = profile_source_gpu(profile)
        acc = _acceptance(req, model)
        observed = _observed(req, source_gpu, model)
        mk = registry.load_memory_kinds()
    except registry.SpecError as e:
        raise ProjectionError(str(e)) from None
    except ValueError as e:  # a spec the model refuses (sanity's checks raise ProjectionError, a ValueError)
        raise ProjectionError(str(e).splitlines()[0]) from None
    path = req.profile or (DEFAULT_PROFILE if embedded_profile_path() else "spec-derived")
    return Resolved(req, gpu, model, link, profile, source_gpu, mk, acc, observed, path, lengths=lengths,
                    fallback_gpu=profile_source_gpu(profile.fallback) if profile.fallback is not None else None)


def _check_profile_refs(profile: Profile, path) -> None:
    """The names a profile refers to exist: its GPU (provenance.gpu_spec) and the model of each
    end-to-end point. One line naming the file and the field."""
    where = f"profile {path}" if path else "profile"
    refs = [("provenance.gpu_spec", registry.load_gpu, profile.provenance.gpu_spec)] if profile.provenance.gpu_spec else []
    fb = profile.fallback
    if fb is not None:
        if not fb.provenance.gpu_spec:
            raise ProjectionError(f"{where}: fallback.provenance.gpu_spec is empty: cannot tell which GPU the fallback profile "
                                  "was measured on")
        refs.append(("fallback.provenance.gpu_spec", registry.load_gpu, fb.provenance.gpu_spec))
    refs += [(f"e2e.{i}.model", registry.load_model, p.model) for i, p in enumerate(profile.e2e)]
    for field, load, name in refs:
        try:
            load(name)
        except registry.SpecError as e:
            raise ProjectionError(f"{where}: {field}: {e}") from None


def e2e_inputs(profile: Profile, src: GpuSpec) -> tuple[dict[str, ModelSpec], InterconnectSpec | None]:
    """What predicting a profile's e2e points needs besides the profile: the models they name and,
    for multi-GPU points, the source GPU's default interconnect."""
    models = {p.model: registry.load_model(p.model) for p in profile.e2e}
    multi = any(p.n_gpus > 1 for p in profile.e2e)
    return models, registry.load_link(src.default_interconnect) if multi else None


def production_floors() -> dict:
    """perfmodel/data/production_floors.yaml: published production-kernel floors (the what-if)."""
    text = resources.files("perfmodel").joinpath("data", "production_floors.yaml").read_text()
    return parse_yaml(text, "perfmodel/data/production_floors.yaml")


def check_files(req: Request) -> None:
    """Read and check every file `req` names but its calibration (its profile, --hw-file,
    --model-file, --lengths-file, an --acceptance file), as resolving it would; ProjectionError
    naming the file. For a sweep: a bad file is the user's error for all of it, not one row's."""
    try:
        if req.profile != "spec":
            resolve_profile(req.profile)
        if req.hw_file:
            registry.load_gpu_file(req.hw_file)
        if req.model_file and not isinstance(req.model, ModelSpec):
            _model_file(req.model_file)
        if req.acceptance.startswith("file:") and req.acceptance[len("file:"):]:
            _checked_json_text(req.acceptance[len("file:"):], "calibration file")
        _lengths(req)
    except (registry.SpecError, InputError) as e:
        raise ProjectionError(str(e)) from None


def input_files(req: Request) -> list[Path]:
    """The files `req` reads (its profile, shipped or not, --hw-file, --model-file, --calibration,
    --lengths-file, an --acceptance file): what an output of the command must never overwrite."""
    files = [profile_path(req.profile) if req.profile and req.profile != "spec" else
             embedded_profile_path() if req.profile is None else None,
             req.hw_file, req.model_file, calibration_path(req.calibration) if req.calibration else None, req.lengths_file,
             req.acceptance[len("file:"):] if req.acceptance.startswith("file:") else None]
    return [Path(f) for f in files if f]
