"""The calibration files' schemas: the observed points `perfmodel calibrate` reads
(`CalibrationInput`) and the `calib.json` it writes (`CalibrationResult`). Pure pydantic, read
by the fit (`perfmodel.calibrate`) and by the model, which applies a result's factors.

A point's scenario fields (target, GPUs, layout, context, speculation, ...) are generated from
the scenario's one declaration (`perfmodel.scenario.Request`); `ObservedPoint.request()` turns a
point into the `Request` it was observed under, so a point is checked as `project` checks it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model, field_validator, model_serializer, model_validator

from perfmodel.profile import check_kernel_set
from perfmodel.scenario import SERVER_SETTINGS, EngineKind, PosInt, Request, fields, server_settings_problem

FIGURES = ("tokens_per_s_per_stream", "tokens_per_s", "step_ms", "tpot_ms", "ttft_ms")
SERVING = ("ttft_ms", "tpot_ms")  # with isl/osl: whole requests through the serving simulation, one point may give both
REL_SIGMA = 0.03
MAX_POINTS = 256  # a calibration's points: each distinct one is priced at every step of the fit
# The range a figure may take: a step between 1 µs and 1000 s, a stream between 0.001 and 10
# million tokens per second; anything beyond is a unit slip, not a measurement.
FIGURE_RANGE = {"tokens_per_s_per_stream": (1e-3, 1e7), "tokens_per_s": (1e-3, 1e10), "step_ms": (1e-3, 1e6),
                "tpot_ms": (1e-3, 1e6), "ttft_ms": (1e-3, 1e7)}

# The calibration factors (`perfmodel.model.calibration` applies them; `perfmodel.calibrate` fits
# them): one multiplicative factor per kind and group or link family, plus the additive engine host
# terms (µs per step, µs per draft forward).
GROUPS = ("attention", "attention_verify", "moe", "gemm", "elementwise")
FAMILIES = ("pcie", "nvlink", "xgmi")
HOST = "engine_host_us"
DRAFT_HOST = "engine_draft_host_us"
# The engine's wait before a prompt's first token reaches the client, in the request's own decode
# steps: scheduler settings the serving rows do not record (TensorRT-LLM's batch waiting,
# `batch_wait_timeout_iters`; SGLang's `scheduler_recv_interval`), perfmodel/model/SOURCES.md [V11].
TTFT_STEPS = "engine_ttft_steps"
# The engine's and its server's work, per request, before the first token reaches the client that
# no step prices (tokenising the prompt, the scheduler receiving it, the HTTP and streaming path),
# in ms: a wait of the same length whatever the load, where TTFT_STEPS grows with the step time.
TTFT_MS = "engine_ttft_ms"
# The engine's host time per kernel of a step that carries prompt tokens, in µs: engines run such
# steps outside CUDA graphs (SGLang's and TensorRT-LLM's prefill, vLLM's beyond its captured sizes),
# so each kernel's launch from Python costs the host again (a one-token DeepSeek-V3 prefill: 82.6 ms
# eager against 23.1 ms replayed from a graph, sgl-project/sglang#12160). A prompt's floor that
# does not shrink with more GPUs and grows with the kernels a model's forward launches
# (evidence/dsr1-ttft-floor/floor.txt). It adds to the step's GPU work: taking the longer of the two
# instead (launches overlapping the GPU work) fitted TRT-LLM's rows worse, TTFT held out by system
# 62.3% against 28.6% (evidence/engine-calibrations/variants/launch-overlap-cauchy/).
PREFILL_LAUNCH = "engine_prefill_launch_us"
ADDITIVE = (HOST, DRAFT_HOST, TTFT_STEPS, TTFT_MS, PREFILL_LAUNCH)  # additive terms (≥ 0); every other factor is multiplicative
# The engine's GPU time of a step that carries prompt tokens, as a multiple of what the step's ops
# price: per-op tables time each kernel alone, and a prompt's step in an engine runs work they do
# not hold (activation quantisation, norms and RoPE, the MoE's routing and permutes, KV-cache
# writes), a larger share at prompt sizes. Against aiconfigurator's silicon rows the measured
# TTFT grows per prompt token 1.48x as fast as the imported step's at the median of 74 groups,
# faster in 53 of them (evidence/dsr1-ttft-floor/floor.txt). Multiplicative, applied to the priced step as the
# engine's host terms are (`ENGINE_STEP`): its kernels are priced once for every value.
PREFILL_WORK = "engine_prefill_work"
ENGINE_STEP = (*ADDITIVE, PREFILL_WORK)  # the engine terms a priced step takes last: no op's price moves with them
FACTOR_MAX = 50.0  # the fit's bounds on a multiplicative factor: [1 / FACTOR_MAX, FACTOR_MAX]
HOST_MAX_US = 1e6  # ... and on the engine host terms
TTFT_STEPS_MAX = 500.0  # ... and on the first token's wait, in steps
TTFT_MS_MAX = 10_000.0  # ... and in ms: a server's per-request work, not a queue (which the simulation prices)
PREFILL_LAUNCH_MAX_US = 10_000.0  # ... and per kernel of a prompt's step
ADDITIVE_MAX = {HOST: HOST_MAX_US, DRAFT_HOST: HOST_MAX_US, TTFT_STEPS: TTFT_STEPS_MAX, TTFT_MS: TTFT_MS_MAX,
                PREFILL_LAUNCH: PREFILL_LAUNCH_MAX_US}
ADDITIVE_UNIT = {HOST: " µs", DRAFT_HOST: " µs", TTFT_STEPS: " steps", TTFT_MS: " ms", PREFILL_LAUNCH: " µs/kernel"}


# How the fit weighs a point's miss (in its figure's 1σ, log space): "squares" (least squares),
# "soft_l1" (2 (sqrt(1 + r^2) - 1): squares within 1σ, about |r| beyond, so a few points that the
# model misses by far do not pull the factors that fit the others), or "cauchy" (c^2 log(1 + (r/c)^2),
# c = CAUCHY_SCALE_SIGMAS: squares within c σ, a pull that fades beyond, so a group of points the
# model misses by far, a mechanism it lacks, does not set the factors the other points agree on);
# the priors stay squares.
Loss = Literal["squares", "soft_l1", "cauchy"]
# cauchy's scale in the points' σ: 1, as soft_l1's (scipy's f_scale = 1). A wider one (5σ, the
# model's usual miss before calibration) kept SGLang's held-out TTFT at 50% against 36% at 1σ
# (evidence/engine-calibrations/variants/cauchy-5sigma/).
CAUCHY_SCALE_SIGMAS = 1.0
LOSS_HELP = ("how the fit weighs each point's miss: squares (least squares), soft_l1 (squares within the point's "
             "1σ, about linear beyond: a few far-off points pull the factors less) or cauchy (squares within 1σ, a "
             "pull that fades beyond: a group of far-off points barely moves the factors)")


def in_figure_range(figure: str, v: float) -> float:
    """`v` if it lies in `FIGURE_RANGE[figure]`, else ValueError (a unit slip, not a measurement)."""
    lo, hi = FIGURE_RANGE[figure]
    if not lo <= v <= hi:
        raise ValueError(f"{v!r} is outside [{lo:g}, {hi:g}], the range of a measured figure (check its unit)")
    return v


def factor_names() -> tuple[str, ...]:
    """Every factor a calibration may hold."""
    return (*(f"{k}.{g}" for k in ("floor", "bw") for g in GROUPS),
            *(f"{k}.{fam}" for k in ("coll_lat", "coll_bw") for fam in FAMILIES), "launch", "tau", *ENGINE_STEP)


class _Strict(BaseModel):
    # strict: no bool or string where a number belongs (`step_ms: true` is an error, not 1)
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True, strict=True)


# The scenario fields a point carries, and where a point's type or default differs from the
# request's: a point names its GPU and model by preset or by file (never an inline spec), its GPU
# count defaults to one, and its budget is a number (no 'auto').
POINT_SCENARIO = ("target", "hw_file", "gpus", "link", "model", "model_file", "profile", "parallel", "context", "spec", "budget",
                  "acceptance", "workload", "acceptance_length", "acceptance_at", "draft_tokens", "draft_topk", "drafter", "spec_off_above", "graphs",
                  "tree_build", "dtypes", "isl", "osl", "min_length_ratio", "engine", *SERVER_SETTINGS)
_POINT_TYPES: dict[str, tuple[Any, Any]] = {
    "target": (str | None, None), "model": (str | None, None), "gpus": (PosInt, 1),
    "budget": (PosInt | None, None), "acceptance": (str | None, None), "engine": (EngineKind | None, None)}


def _scenario_fields() -> dict[str, tuple[Any, Any]]:
    out = {}
    for name in POINT_SCENARIO:
        ann, default, cli = fields()[name]
        ann, default = _POINT_TYPES.get(name, (ann, default))
        out[name] = (ann, Field(default, description=cli.help))
    return out


_PointScenario = create_model("_PointScenario", __base__=_Strict, **_scenario_fields())


class ObservedPoint(_PointScenario):
    """One figure observed on a machine, with the setup it was observed under."""

    label: str | None = Field(None, description="free text shown in the output")
    concurrency: int = Field(ge=1, strict=True)
    q: int | None = Field(None, ge=1, le=4096, strict=True,
                          description="tokens per sequence in a plain (non-drafting) step, e.g. a verify-width sweep")
    n_layers: int | None = Field(None, ge=1, strict=True, description="layers, if the stack ran fewer than the model")
    lm_head: bool = Field(True, strict=True)
    host: bool = Field(True, strict=True, description="the figure includes the host loop (false: GPU replay time only)")
    statistic: Literal["mean", "median"] = Field("mean", description="the statistic over requests of ttft_ms / tpot_ms "
                                                                      "with isl/osl (vllm bench serve prints both)")
    rel_sigma: float = Field(REL_SIGMA, gt=0, le=1, description="relative 1σ of the figure")
    tokens_per_s_per_stream: float | None = Field(None, gt=0)
    tokens_per_s: float | None = Field(None, gt=0, description="aggregate over the concurrency")
    step_ms: float | None = Field(None, gt=0)
    tpot_ms: float | None = Field(None, gt=0, description="time per output token per stream (= step / tau); with isl/osl, "
                                                           "per request (e2e - ttft) / (osl - 1) as vllm bench serve defines "
                                                           "it, from the serving simulation")
    ttft_ms: float | None = Field(None, gt=0, description="time to first token of whole requests (needs isl/osl), from the "
                                                           "serving simulation")

    @model_validator(mode="after")
    def _one_of(self):
        given = [f for f in FIGURES if getattr(self, f) is not None]
        if len(given) != 1 and not (set(given) == set(SERVING) and self.isl is not None):
            raise ValueError(f"give exactly one of {', '.join(FIGURES)}, or ttft_ms and tpot_ms together with isl/osl "
                             f"(got {', '.join(given) or 'none'})")
        if (self.target is None) == (self.hw_file is None):
            raise ValueError("give exactly one of target, hw_file")
        if (self.model is None) == (self.model_file is None):
            raise ValueError("give exactly one of model, model_file")
        if self.spec == "ddtree" and self.budget is None:
            raise ValueError("spec ddtree needs budget")
        if self.spec != "none" and self.q is not None:
            raise ValueError("q is for plain steps; a speculative step verifies budget+1 tokens")
        if (self.isl is None) != (self.osl is None):
            raise ValueError("isl and osl go together")
        if self.isl is not None and not set(given) <= {"tokens_per_s", *SERVING}:
            raise ValueError(f"isl/osl describe whole requests: give tokens_per_s, ttft_ms or tpot_ms, not {given[0]}")
        whole = {"ttft_ms": self.ttft_ms is not None, "engine": self.engine is not None,
                 **{k: getattr(self, k) is not None for k in SERVER_SETTINGS}, "min_length_ratio": self.min_length_ratio < 1}
        if self.isl is None and any(whole.values()):
            what = next(k for k, v in whole.items() if v)
            raise ValueError(f"{what} is for whole requests: give isl and osl")
        problem = server_settings_problem(self, self.engine)
        if problem:
            raise ValueError(problem)
        if self.isl is not None and self.osl < 2 and self.tpot_ms is not None:
            raise ValueError("tpot_ms needs osl >= 2 (the time per output token after the first)")
        return self

    @field_validator(*FIGURES)
    @classmethod
    def _physical(cls, v: float | None, info) -> float | None:
        return v if v is None else in_figure_range(info.field_name, v)

    @property
    def figure(self) -> tuple[str, float]:
        f = next(f for f in FIGURES if getattr(self, f) is not None)
        return f, getattr(self, f)

    @property
    def serving(self) -> bool:
        """Whole requests priced through the serving simulation (ttft_ms / tpot_ms with isl/osl)."""
        return self.isl is not None and self.tokens_per_s is None

    def singles(self) -> list[ObservedPoint]:
        """One point per figure (a serving point may give ttft_ms and tpot_ms together)."""
        given = [f for f in FIGURES if getattr(self, f) is not None]
        if len(given) == 1:
            return [self]
        return [self.model_copy(update={g: None for g in given if g != f}) for f in given]

    def request(self, kernels: str = "perfmodel") -> Request:
        """The request this point was observed under (one concurrency; checked as `project` checks it)."""
        kw = {n: getattr(self, n) for n in POINT_SCENARIO if getattr(self, n) is not None}
        return Request(**kw, concurrency=[self.concurrency], kernels=kernels)

    def describe(self) -> str:
        gpu = self.target or Path(self.hw_file).name
        setting = f"B={self.budget}" if self.budget is not None else f"k={self.draft_tokens}" if self.draft_tokens else ""
        extra = f" q={self.q}" if self.q else (f" {self.spec} {setting}".rstrip() if self.spec != "none" else "")
        shape = f"{self.isl}/{self.osl}" + (f" {self.engine}" if self.engine else "") if self.isl is not None else f"L={self.context}"
        return (self.label or f"{self.model or Path(self.model_file).name} {self.gpus}x {gpu} {self.parallel} "
                f"C={self.concurrency} {shape}{extra}")


class CalibrationInput(_Strict):
    engine: str = Field(min_length=1, description="the engine and its kernels, free text carried into every output")
    kernels: str = Field("perfmodel", description="the kernel set the factors start from: perfmodel (its own "
                                                  "kernels) or torch (PyTorch's native ops: SDPA, torch._grouped_mm, "
                                                  "unfused norms); the closest to the engine's kernels")
    points: list[ObservedPoint] = Field(min_length=1, max_length=MAX_POINTS)
    factors: list[str] | None = Field(None, min_length=1, description="fit only these factors (names as calib.json "
                                                                       "lists them); the others stay at 1 (0 µs)")
    held_out: Literal["point", "gpu", "model"] = Field("point", description="what the leave-one-out error leaves out: "
                                                                             "each point, each GPU's points, or each "
                                                                             "model's points")
    loss: Loss = Field("squares", description=LOSS_HELP)

    _kernel_set = field_validator("kernels")(lambda v: check_kernel_set(v))


class FactorResult(_Strict):
    name: str
    value: float
    sigma_post: float = Field(ge=0, description="posterior 1σ: relative (log) for factors, in the unit of the additive "
                                                            "engine terms for those (µs, steps, ms)")
    sigma_prior: float = Field(ge=0)
    determined: bool = Field(description="pinned by the data on its own: posterior σ < 0.7 × prior σ, and in no "
                                         "group of `undetermined`")
    outside_range: bool = Field(False, description="outside [0.33, 3]: the model misses a mechanism here")

    @field_validator("name")
    @classmethod
    def _known(cls, v: str) -> str:
        if v not in factor_names():
            raise ValueError(f"unknown factor '{v}' (known: {', '.join(factor_names())})")
        return v

    @field_validator("value")
    @classmethod
    def _in_range(cls, v: float, info) -> float:
        name = info.data.get("name")
        lo, hi = (0.0, ADDITIVE_MAX[name]) if name in ADDITIVE else (1 / FACTOR_MAX, FACTOR_MAX)
        if not lo * (1 - 1e-9) <= v <= hi * (1 + 1e-9):
            unit = ADDITIVE_UNIT.get(name, "")
            raise ValueError(f"{name} = {v!r}{unit} is outside [{lo:g}, {hi:g}{unit}], the range the fit can reach")
        return v


class PointResult(_Strict):
    index: int
    label: str
    figure: str
    observed: float = Field(gt=0)
    uncalibrated: float = Field(gt=0)
    predicted: float = Field(gt=0)
    err: float = Field(gt=-1, description="fitted: predicted / observed - 1")
    loo_err: float | None = Field(None, gt=-1, description="leave-one-out: fit on the others (the other GPUs' or models' "
                                                             "points with held_out gpu or model), predict this one")


class Undetermined(_Strict):
    """Factors the points cannot separate: they fix a combination of them (or nothing), not each."""

    factors: list[str]
    why: str


class CalibrationResult(_Strict):
    schema_version: Literal[1] = 1
    engine: str
    kernels: str = Field("perfmodel", description="the kernel set the factors apply to")
    profile: str = Field(description="the profile the factors were fitted against")

    _kernel_set = field_validator("kernels")(lambda v: check_kernel_set(v))
    machines: list[str]
    gpus: list[str]
    describes: str
    factors: list[FactorResult]
    points: list[PointResult]
    median_abs_err: float = Field(ge=0)
    loo_median_abs_err: float | None = Field(ge=0)
    held_out: Literal["point", "gpu", "model"] = Field("point", description="what each leave-one-out fit left out")
    loss: Loss = Field("squares", description=LOSS_HELP)
    warnings: list[str] = []
    undetermined: list[Undetermined] = Field([], description="the factors the points cannot separate, and why")

    @field_validator("schema_version", mode="before")
    @classmethod
    def _version(cls, v: Any) -> Any:
        if type(v) is not int or v != 1:
            raise ValueError(f"unknown schema version {v!r}: this perfmodel reads version 1 (rerun perfmodel calibrate)")
        return v

    @field_validator("factors")
    @classmethod
    def _once(cls, v: list[FactorResult]) -> list[FactorResult]:
        names = [f.name for f in v]
        again = next((n for i, n in enumerate(names) if n in names[:i]), None)
        if again is not None:
            raise ValueError(f"factor '{again}' is given more than once")
        return v

    @model_serializer(mode="wrap")
    def _leave_out_defaults(self, handler):
        """calib.json as before for the default leave-one-point-out and least squares: `held_out`
        written only when each GPU's or model's points were held out, `loss` only when not squares."""
        out = handler(self)
        for k, default in (("held_out", "point"), ("loss", "squares")):
            if out.get(k) == default:
                del out[k]
        return out

    @property
    def model_error(self) -> float:
        """How far to trust predictions from this calibration: its leave-one-out median |error|
        (the in-sample median with one point)."""
        return self.loo_median_abs_err if self.loo_median_abs_err is not None else self.median_abs_err


# ---------------------------------------------------------------- bench results
_Count = Field(None, ge=0, strict=True)


class BenchRecord(BaseModel):
    """The fields `perfmodel calibrate --from-vllm/--from-sglang` reads from one record of a
    `vllm bench serve` or SGLang `bench_serving` result, each typed and in range; the many other
    fields are kept as they are (SGLang writes `"request_rate": Infinity`)."""

    model_config = ConfigDict(extra="allow", strict=True, frozen=True)

    median_tpot_ms: float = Field(gt=0, allow_inf_nan=False, description="median time per output token after the "
                                                                        "first, per request")
    max_concurrency: int | None = Field(None, ge=1)
    completed: int | None = Field(None, ge=1, description="requests completed (a run that completed none measured "
                                                         "nothing)")
    total_input_tokens: int | None = _Count
    total_output_tokens: int | None = _Count
    random_input_len: int | None = Field(None, ge=1)
    random_output_len: int | None = Field(None, ge=1)
    model_id: str | None = None
    model: str | None = None
    model_path: str | None = None
    served_model_name: str | None = None

    @field_validator("median_tpot_ms")
    @classmethod
    def _physical(cls, v: float) -> float:
        return in_figure_range("tpot_ms", v)
