"""Published aggregated-serving points (`perfmodel/data/published_serving.yaml`) as calibration-style
observed points, and `perfmodel validate --published-serving`: their mean TTFT and TPOT against the
serving simulation, uncalibrated.

The file holds each point as its source publishes it (`Setup`: engine, GPU, layout, precision;
`Point`: ISL, OSL, concurrency and the published figures, in the source's units), every point read,
including those perfmodel cannot express. This module expresses a point as an `ObservedPoint`
(`perfmodel.calibration_schema`: the one declaration of a figure observed under a scenario; its
`request()` is the `perfmodel project --isl --osl --concurrency --engine` request), or says in one
line why it cannot (`silicon.NotExpressible`). Pricing, statistics and the table are those of
`validate --silicon` (`silicon_validate.price_request`, `summarise`).

How a published setup is expressed (each rule cites where it comes from):

  framework   trt -> trtllm, sglang, vllm; other stacks (ATOM, Dynamo's and MoRI's disaggregated
              serving) are not simulated
  hardware    the GPU specs of `hwspecs/gpus/`
  layout      the decode side's tp, ep and dp_attention as published, built as the silicon rows'
              (`silicon.split_layout`): attention TP tp (data-parallel with dp_attention), experts
              EP ep and TP tp / ep (ep 1 -> tp; ep = tp -> tp+ep or dp-attn+ep; others mixed); the
              GPU count is tp (InferenceX's num_*_gpu fields count tp x ep for aggregated points)
  precision   `CHECKPOINTS`: the checkpoint InferenceX serves for (model, precision, vendor)
              (SemiAnalysisAI/InferenceX configs/nvidia-master.yaml, configs/amd-master.yaml) and
              the dtypes perfmodel prices it with; the KV cache is FP8 (the benchmark scripts pass
              `kv_cache_config: dtype: fp8` to trtllm-serve and `--kv-cache-dtype fp8_e4m3` to SGLang)
  server      what the point's InferenceX script set at the point's date (`perfmodel.inferencex`):
              the step budget (TRT-LLM max_num_tokens, SGLang chunked_prefill_size), the running
              requests at most, SGLang's scheduler_recv_interval, TRT-LLM's batch waiting; the
              engine's defaults where the script sets nothing

Not expressed: disaggregated prefill/decode, multi-node replicas, speculative decoding without a
published acceptance length, and experts EP that does not divide the GPUs.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from perfmodel.calibration_schema import ObservedPoint
from perfmodel.inputs import load_yaml, parse_yaml, validated
from perfmodel.scenario import SERVER_SETTINGS
from perfmodel.silicon import INFERENCEX_RANGE_RATIO, NotExpressible

DATA = "published_serving.yaml"
RUN_URL = "https://github.com/SemiAnalysisAI/InferenceX/actions/runs/"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True, strict=True)


class Source(_Strict):
    cite: str = Field(min_length=1, description="the entry of hwspecs/SOURCES.md (Part 3 row, [S..] id)")
    url: str = Field(min_length=1, description="where the figures are read, at a fixed commit")
    what: str = Field(min_length=1, description="which records, and what each figure means")


class Prefill(_Strict):
    """The prefill side of a disaggregated setup, as published."""

    tp: int = Field(ge=1)
    ep: int = Field(ge=1)
    dp_attention: bool
    workers: int = Field(ge=0)


class Setup(_Strict):
    """A serving setup as its source states it (InferenceX's field names)."""

    source: str
    framework: str = Field(min_length=1)
    hardware: str = Field(min_length=1)
    model: str = Field(min_length=1)
    precision: str = Field(min_length=1)
    spec_method: str = "none"
    disagg: bool = False
    is_multinode: bool = False
    tp: int = Field(ge=1, description="the decode side's tensor parallelism (decode_tp)")
    ep: int = Field(ge=1, description="the decode side's expert parallelism (decode_ep)")
    dp_attention: bool = Field(description="the decode side's data-parallel attention (decode_dp_attention)")
    prefill: Prefill | None = None
    decode_workers: int | None = Field(None, ge=0)
    image: str | None = Field(None, description="the container image (engine version), where published")
    date: str | None = None
    run: str | None = Field(None, description="the benchmark run, '<id>/attempts/<n>' under " + RUN_URL)


class Point(_Strict):
    """One published point: the workload and the figures, in the source's units (seconds)."""

    isl: int = Field(ge=1)
    osl: int = Field(ge=2)
    conc: int = Field(ge=1)
    mean_ttft_s: float = Field(gt=0, le=1e4)
    mean_tpot_s: float = Field(gt=0, le=1e3)
    tput_per_gpu: float | None = Field(None, gt=0, description="total (input + output) tok/s per GPU")
    image: str | None = None
    date: str | None = None
    run: str | None = None


class Group(_Strict):
    setup: Setup
    points: list[Point] = Field(min_length=1)


class PublishedServing(_Strict):
    sources: dict[str, Source] = Field(min_length=1)
    groups: list[Group] = Field(min_length=1, max_length=1000)

    @model_validator(mode="after")
    def _sources_known(self) -> PublishedServing:
        for i, g in enumerate(self.groups):
            if g.setup.source not in self.sources:
                raise ValueError(f"groups.{i}.setup.source '{g.setup.source}' is not in sources ({', '.join(self.sources)})")
            for j, p in enumerate(g.points):
                if (p.run or g.setup.run) is None:
                    raise ValueError(f"groups.{i}.points.{j}: no run (on the point or its setup): every point needs its source's run")
        return self


@dataclass(frozen=True)
class Published:
    """A point with its setup resolved (a point's image, date and run override its group's)."""

    id: str
    setup: Setup
    point: Point
    source: Source

    @property
    def image(self) -> str | None:
        return self.point.image or self.setup.image

    @property
    def run_url(self) -> str:
        return RUN_URL + (self.point.run or self.setup.run)

    @property
    def engine_version(self) -> str:
        return (self.image or "").rpartition(":")[2]

    def layout_text(self) -> str:
        s = self.setup
        text = f"tp{s.tp} ep{s.ep}" + (" dp-attn" if s.dp_attention else "")
        if s.prefill is not None:
            p = s.prefill
            text = (f"prefill tp{p.tp} ep{p.ep}{' dp-attn' if p.dp_attention else ''} x{p.workers}, decode {text}"
                    + (f" x{s.decode_workers}" if s.decode_workers is not None else ""))
        return text


def read(data: PublishedServing) -> list[Published]:
    """Every point, with an id from its setup and workload (unique within the file)."""
    out, seen = [], set()
    for g in data.groups:
        s = g.setup
        for p in g.points:
            pid = (f"{s.source}-{s.hardware}-{s.framework}-{s.model}-{s.precision}-tp{s.tp}ep{s.ep}"
                   + ("dpa" if s.dp_attention else "") + ("-disagg" if s.disagg else "")
                   + (f"-p{s.prefill.tp}x{s.prefill.workers}d{s.decode_workers}" if s.prefill else "")
                   + ("" if s.spec_method == "none" else f"-{s.spec_method}") + f"-{p.isl}x{p.osl}-c{p.conc}")
            pid = pid if pid not in seen else f"{pid}-run{(p.run or s.run).split('/')[0]}"
            seen.add(pid)
            out.append(Published(id=pid, setup=s, point=p, source=data.sources[s.source]))
    return out


def load(path: str | None = None) -> list[Published]:
    """The shipped points, or those of `path` (through the input layer: one line naming the file on a bad one)."""
    if path is None:
        text = resources.files("perfmodel").joinpath("data", DATA).read_text()
        label = f"perfmodel/data/{DATA}"
        return read(validated(PublishedServing, parse_yaml(text, label), label))
    return read(validated(PublishedServing, load_yaml(path, "--serving-file"), path))


# ------------------------------------------------------------------------------ expressing
ENGINES = {"trt": "trtllm", "sglang": "sglang", "vllm": "vllm"}
GPUS = {"h100": "h100-sxm", "h200": "h200-sxm", "b200": "b200-sxm", "b300": "b300-sxm", "gb200": "gb200", "gb300": "gb300",
        "mi300x": "mi300x", "mi325x": "mi325x", "mi355x": "mi355x"}
Vendor = Literal["nvidia", "amd"]


@dataclass(frozen=True)
class Checkpoint:
    """How perfmodel serves a published (model, precision) on a vendor's GPUs: the preset and the
    dtypes that differ from it."""

    preset: str
    dtypes: dict[str, str]
    note: str


KV_FP8 = {"kv_cache": "fp8"}  # the benchmark scripts' KV cache (module docstring)
CHECKPOINTS: dict[tuple[str, str, Vendor], Checkpoint] = {
    ("dsr1", "fp8", "nvidia"): Checkpoint("deepseek-v3", KV_FP8, "deepseek-ai/DeepSeek-R1-0528: FP8 128x128 blocks, the preset's own"),
    ("dsr1", "fp8", "amd"): Checkpoint("deepseek-v3", KV_FP8, "deepseek-ai/DeepSeek-R1-0528: FP8 128x128 blocks, the preset's own"),
    ("dsr1", "fp4", "nvidia"): Checkpoint("deepseek-v3", {"routed_experts": "nvfp4", **KV_FP8},
                                          "nvidia/DeepSeek-R1-0528-FP4(-V2): ModelOpt NVFP4 routed experts; the other "
                                          "weights priced as the FP8 release's"),
    ("dsr1", "fp4", "amd"): Checkpoint("deepseek-v3", {"routed_experts": "mxfp4", **KV_FP8},
                                       "amd/DeepSeek-R1-0528-MXFP4(-Preview): MXFP4 routed experts; the other weights "
                                       "priced as the FP8 release's"),
}


def _vendor(hardware: str) -> Vendor:
    return "amd" if hardware.startswith("mi") else "nvidia"


def _layout(s: Setup, found=None) -> str:
    """The decode side's layout over its tp GPUs, built as the silicon rows' (`silicon.split_layout`):
    attention TP tp (data-parallel over them with dp_attention), the experts EP ep, each TP tp / ep;
    where the point's script chose the layout itself (`found`: `inferencex.ServerSettings.split`), that."""
    from perfmodel.scenario import Split
    from perfmodel.silicon import split_layout

    sp = found.split(s.tp) if found is not None else None
    if sp is None:
        if s.tp % s.ep:
            raise NotExpressible(f"layout tp{s.tp} ep{s.ep}: experts EP {s.ep} does not divide the {s.tp} GPUs")
        sp = Split(1, s.tp, s.tp // s.ep, s.ep) if s.dp_attention else Split(s.tp, 1, s.tp // s.ep, s.ep)
    return split_layout(sp)[0]


def server_settings(p: Published):
    """What the point's InferenceX script set at the point's date (`inferencex.settings`), or None."""
    from perfmodel import inferencex

    s, q = p.setup, p.point
    date = q.date or s.date
    if s.source != "inferencex" or date is None:
        return None
    return inferencex.settings(ENGINES.get(s.framework, s.framework), s.model, s.precision, s.hardware, tp=s.tp, isl=q.isl,
                               osl=q.osl, conc=q.conc, date=date, attention_dp=s.dp_attention, spec_method=s.spec_method)


def _length_ratio(source: str) -> float:
    """The share of isl/osl each request's lengths were drawn from: InferenceX's benchmark draws
    them uniformly from 0.8 x isl/osl up to isl/osl (`perfmodel.silicon.INFERENCEX_RANGE_RATIO`)."""
    return INFERENCEX_RANGE_RATIO if source == "inferencex" else 1.0


def express(p: Published) -> ObservedPoint:
    """The point as an observed serving point (mean TTFT and TPOT in ms), or `NotExpressible`."""
    s = p.setup
    if s.disagg:
        raise NotExpressible("disaggregated prefill/decode: perfmodel simulates aggregated serving only")
    if s.is_multinode:
        raise NotExpressible("multi-node replica: perfmodel prices one node's NVLink or xGMI domain")
    if s.spec_method != "none":
        raise NotExpressible(f"spec_method {s.spec_method}: no published acceptance length for the run")
    engine = ENGINES.get(s.framework)
    if engine is None:
        raise NotExpressible(f"framework {s.framework}: perfmodel schedules {', '.join(ENGINES)}")
    gpu = GPUS.get(s.hardware)
    if gpu is None:
        raise NotExpressible(f"hardware {s.hardware}: no GPU spec (mapped: {', '.join(GPUS)})")
    ck = CHECKPOINTS.get((s.model, s.precision, _vendor(s.hardware)))
    if ck is None:
        raise NotExpressible(f"model {s.model} {s.precision}: no checkpoint mapped to a preset")
    found = server_settings(p)
    parallel = _layout(s, found)
    q = p.point
    server = found.request_fields() if found else {}
    if "max_batched_tokens" not in server:
        from perfmodel.scenario import layout_split
        from perfmodel.silicon import serving_budget

        server["max_batched_tokens"] = serving_budget(engine, gpu, q.isl, q.conc, layout_split(parallel, s.tp).attn_dp)
    return ObservedPoint(target=gpu, gpus=s.tp, model=ck.preset, parallel=parallel, dtypes=dict(ck.dtypes) or None,
                         isl=q.isl, osl=q.osl, engine=engine, min_length_ratio=_length_ratio(s.source), **server,
                         concurrency=q.conc, ttft_ms=q.mean_ttft_s * 1e3, tpot_ms=q.mean_tpot_s * 1e3, label=p.id)


def express_all(points: list[Published]) -> tuple[list[tuple[Published, ObservedPoint]], list[tuple[Published, str]]]:
    ok, refused = [], []
    for p in points:
        try:
            ok.append((p, express(p)))
        except NotExpressible as e:
            refused.append((p, e.reason))
    return ok, refused


# ------------------------------------------------------------------------------ the run
def _matches(p: Published, engines, systems, models) -> bool:
    low = lambda xs: {x.lower() for x in xs} if xs else None  # noqa: E731
    e, s, m = low(engines), low(systems), low(models)
    eng = ENGINES.get(p.setup.framework, p.setup.framework)
    return ((e is None or eng in e or p.setup.framework in e) and (s is None or p.setup.hardware in s or GPUS.get(p.setup.hardware) in s)
            and (m is None or p.setup.model in m or any(ck.preset in m for k, ck in CHECKPOINTS.items() if k[0] == p.setup.model)))


def run_published_serving(*, path: str | None = None, profile: str | None = None, engines=None, systems=None, models=None,
                          progress: Callable[[str, int, int], None] | None = None) -> dict:
    """Every point of the file: the expressed ones priced through the serving simulation from the local
    profile (no calibration), the others counted with their reason. The result has the shape of
    `validate --silicon`'s (`summary`, `points`), way `local`."""
    import time

    from perfmodel import silicon
    from perfmodel.silicon_validate import price_request, summarise

    points = [p for p in load(path) if _matches(p, engines, systems, models)]
    expressed, refused = express_all(points)
    out, t0 = [], time.perf_counter()
    for i, (p, obs) in enumerate(expressed):
        if progress:
            progress("local", i, len(expressed))
        try:
            priced = price_request(obs.model_copy(update={"profile": profile}).request())
        except ValueError as x:  # a request field the scenario refuses
            priced = {"error": str(x).splitlines()[0]}
        out.append({"id": p.id, "model": obs.model, "system": obs.target, "engine": obs.engine, "engine_version": p.engine_version,
                    "scenario": (obs.model_copy(update={"label": None}).describe() + f" (published {p.layout_text()})"
                                 + "".join(f", {k} {getattr(obs, k):g}" for k in SERVER_SETTINGS if getattr(obs, k) is not None)
                                 + "".join(f", {k}={v}" for k, v in sorted((obs.dtypes or {}).items()))),
                    "source": f"{p.source.cite}; {p.run_url}",
                    "measured": {"ttft_ms": obs.ttft_ms, "tpot_ms": obs.tpot_ms},
                    "predicted": {} if "error" in priced else {"local": priced},
                    "errors": {"local": priced["error"]} if "error" in priced else {}})
    seconds = (time.perf_counter() - t0) / max(len(expressed), 1)
    reasons: dict[str, int] = defaultdict(int)
    for _, why in refused:
        reasons[silicon.reason_kind(why)] += 1
    unpriced: dict[str, int] = defaultdict(int)
    for q in out:
        if "local" in q["errors"]:
            unpriced[silicon.reason_kind(q["errors"]["local"])] += 1
    return {"file": path or f"perfmodel/data/{DATA}", "profile": profile or "embedded", "calibration": None, "ways": ["local"],
            "counts": {"points": len(points), "expressed": len(expressed), "priced": sum(1 for q in out if q["predicted"])},
            "seconds_per_row": {"local": seconds},
            "not_expressed": dict(sorted(reasons.items(), key=lambda kv: -kv[1])),
            "not_expressed_points": [{"id": p.id, "reason": why, "layout": p.layout_text(),
                                      "measured": {"ttft_ms": p.point.mean_ttft_s * 1e3, "tpot_ms": p.point.mean_tpot_s * 1e3},
                                      "source": p.run_url} for p, why in refused],
            "not_priced": {"local": dict(sorted(unpriced.items(), key=lambda kv: -kv[1]))},
            "summary": summarise(out, ["local"]),
            "points": out}
