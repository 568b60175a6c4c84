"""The typed result of a projection: `Projection` holding `Point`s (pydantic).

`Projection.to_dict()` (= `model_dump(mode="json")`) is exactly the JSON `perfmodel project -f json`
prints; keys that only some points carry (`budget_curve`, `budget_note`, `note`, …) are left out
when empty, as they always were. Definitions of the per-token latencies (tools disagree on TPOT):

- `tpot_ms` = step_ms / τ: mean time per output token of one stream (vLLM bench's TPOT,
  genai-perf's "inter-token latency"); with speculative decoding one step yields τ tokens.
- `itl_ms` = step_ms: the gap between two deliveries to one stream (vLLM bench's ITL, measured
  between streamed chunks); with speculative decoding a delivery carries τ tokens on average.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, model_serializer


class _Out(BaseModel):
    """Frozen result record; fields in `_omit_none` are left out of the dump when None."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    _omit_none: ClassVar[frozenset[str]] = frozenset()

    @model_serializer(mode="wrap")
    def _drop_empty(self, handler) -> dict[str, Any]:
        d = handler(self)
        return {k: v for k, v in d.items() if not (k in self._omit_none and v is None)}

    def to_dict(self) -> dict:
        return self.model_dump(mode="json")

    def to_json(self, indent: int | None = 1) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    # Compatibility for callers written against the old dict result: `res["points"]`, `p.get(...)`.
    def __getitem__(self, key: str):
        return self.to_dict()[key]

    def get(self, key: str, default=None):
        return self.to_dict().get(key, default)

    def __contains__(self, key: str) -> bool:
        return key in self.to_dict()


class Target(_Out):
    gpu: str
    display_name: str
    n_gpus: int
    memory_kind: str
    link: str | None
    link_kind: str | None


class Interval(_Out):
    """90% interval (`level`) as [low, high] pairs."""

    step_ms: list[float]
    tokens_per_s_per_stream: list[float]
    tokens_per_s: list[float]
    tau: list[float] | None = None
    tau_share: float | None = Field(None, description="τ's share of the tok/s interval's (log-space) spread")
    level: float

    _omit_none: ClassVar[frozenset[str]] = frozenset({"tau_share"})


class SpecSplit(_Out):
    draft_ms: float
    tree_build_ms: float
    verify_ms: float
    other_ms: float


class MemoryGB(_Out):
    weights: float
    kv: float
    usable: float


class BudgetPoint(_Out):
    _omit_none = frozenset({"tau", "step_ms", "tokens_per_s_per_stream"})
    budget: int
    tau: float | None = None
    step_ms: float | None = None
    tokens_per_s_per_stream: float | None = None
    fits_in_memory: bool


class Serving(_Out):
    """Whole requests under continuous batching at this concurrency (`--isl/--osl`), as `vllm
    bench serve` reports them: per request TTFT, TPOT ((e2e - TTFT) / (output - 1)), inter-token
    latency and end-to-end latency (ms; mean, median, p90, p99), output tok/s in total, per GPU
    and per user (1000 / mean TPOT), each with its 90% interval."""

    engine: str
    max_batched_tokens: int
    n_requests: int
    ttft_ms: dict[str, float]
    tpot_ms: dict[str, float]
    itl_ms: dict[str, float]
    e2e_latency_ms: dict[str, float]
    tokens_per_s: float
    tokens_per_s_per_gpu: float
    tokens_per_s_per_user: float
    interval: dict[str, list[float]]
    kv_limited: bool
    mean_decode_batch: float
    assumptions: list[str]


class StepResult(_Out):
    """One forward pass of a batch (`perfmodel step`): its time, by component, with its 90% interval."""

    batch: str
    step_ms: float
    breakdown_ms: dict[str, float]
    interval: dict[str, list[float]]
    bottleneck: str
    n_kernels: int
    tokens: int
    assumptions: list[str]
    describes: str


class Point(_Out):
    """One concurrency. Throughput and step fields are None where the point does not fit."""

    _omit_none = frozenset({"budget_curve", "budget_note", "note", "speculation_fits", "tau_sigma", "tau_measured", "serving",
                            "unpinned_factors", "notes"})
    _UNFIT = ("concurrency", "fits_in_memory", "budget", "memory_GB", "note")

    concurrency: int
    step_ms: float | None = None
    tokens_per_s_per_stream: float | None = None
    tokens_per_s: float | None = None
    tau: float | None = None
    tau_sigma: float | None = None  # 1σ of τ from the acceptance source
    tau_measured: bool | None = None  # τ from a measured table / calibration rather than modelled
    budget: int | None  # None where the point does not fit (no budget was priced)
    breakdown_ms: dict[str, float] | None = None
    bottleneck: str | None = None
    n_kernels: int | None = None
    interval: Interval | None = None
    spec_split: SpecSplit | None = None
    fits_in_memory: bool
    memory_GB: MemoryGB
    budget_curve: list[BudgetPoint] | None = None
    budget_note: str | None = None
    speculation_fits: bool | None = None  # False: the drafter and the smallest tree do not fit here
    note: str | None = None  # why it does not fit
    # engine effects that make this point slower per sequence than its neighbours (an uneven
    # data-parallel attention round), one line each; printed under the table
    notes: list[str] | None = None
    tokens_per_s_per_gpu: float | None = None
    tpot_ms: float | None = None  # step_ms / τ (see the module docstring)
    itl_ms: float | None = None  # step_ms: gap between deliveries to one stream
    serving: Serving | None = None  # whole requests at the workload (--isl/--osl), None otherwise
    # calibrated projections: factors the calibration did not pin -> d ln step / d ln factor here
    unpinned_factors: dict[str, float] | None = None

    @model_serializer(mode="wrap")
    def _drop_empty(self, handler) -> dict[str, Any]:
        d = handler(self)
        if not self.fits_in_memory:
            return {k: d[k] for k in self._UNFIT}
        return {k: v for k, v in d.items() if not (k in self._omit_none and v is None)}

    def row(self) -> dict:
        """Flat record: scalars, interval bounds, memory, why it does not fit (`note`) and
        `<component>_ms` columns (POINT_COLUMNS, then the components)."""
        r: dict[str, Any] = {"concurrency": self.concurrency, "fits_in_memory": self.fits_in_memory}
        for k in ("tokens_per_s_per_stream", "tokens_per_s", "tokens_per_s_per_gpu", "step_ms", "tpot_ms",
                  "itl_ms", "tau", "budget", "bottleneck", "n_kernels"):
            r[k] = getattr(self, k)
        iv = self.interval
        r["tokens_per_s_per_stream_lo"], r["tokens_per_s_per_stream_hi"] = iv.tokens_per_s_per_stream if iv else (None, None)
        r["step_ms_lo"], r["step_ms_hi"] = iv.step_ms if iv else (None, None)
        for k, v in self.memory_GB.model_dump().items():
            r[f"memory_{k}_GB"] = v
        r["note"] = self.note
        if self.serving is not None:  # whole requests (--isl/--osl): the columns compare's rows carry
            r |= {"ttft_ms": self.serving.ttft_ms["median"], "tokens_per_s_per_user": self.serving.tokens_per_s_per_user,
                  "served_tokens_per_s_per_gpu": self.serving.tokens_per_s_per_gpu}
        for k, v in (self.breakdown_ms or {}).items():
            r[f"{k}_ms"] = v
        return r


# The columns of a flat row (`Projection.rows()`, the CSV of `project` and of `compare`): the
# configuration, the point, then one `<component>_ms` column per step component present.
CONFIG_COLUMNS = ("gpu", "n_gpus", "link", "model", "parallel", "context", "spec", "graphs")
POINT_COLUMNS = ("concurrency", "fits_in_memory", "tokens_per_s_per_stream", "tokens_per_s", "tokens_per_s_per_gpu",
                 "step_ms", "tpot_ms", "itl_ms", "tau", "budget", "bottleneck", "n_kernels", "tokens_per_s_per_stream_lo",
                 "tokens_per_s_per_stream_hi", "step_ms_lo", "step_ms_hi", "memory_weights_GB", "memory_kv_GB",
                 "memory_usable_GB", "note")


SERVING_COLUMNS = ("ttft_ms", "tokens_per_s_per_user", "served_tokens_per_s_per_gpu")  # with --isl/--osl only


def row_columns(rows: list[dict]) -> list[str]:
    """The columns of `rows` (flat rows as `Projection.rows()` gives them), in the one order:
    CONFIG_COLUMNS, POINT_COLUMNS, the serving columns where a row has them, any other scalar a
    point carries, then the components sorted."""
    fixed = list(CONFIG_COLUMNS + POINT_COLUMNS)
    serving = [c for c in SERVING_COLUMNS if any(c in r for r in rows)]
    known = set(fixed) | set(SERVING_COLUMNS)
    extra = list(dict.fromkeys(k for r in rows for k in r if k not in known and not k.endswith("_ms")))
    comps = sorted({k for r in rows for k in r if k.endswith("_ms") and k not in known})
    return fixed + serving + extra + comps


class Acceptance(_Out):
    source: str
    description: str
    measured: bool = False
    sigma: str | None = None


class ProfileInfo(_Out):
    kind: str
    gpu_name: str | None
    gpu_spec: str | None
    timestamp: str | None
    path: str
    label: str


class SelfCheck(_Out):
    """The model's error on the profile's own end-to-end steps (None without such steps)."""

    _omit_none = frozenset({"max_abs_err"})
    n_points: int
    median_abs_err: float | None
    max_abs_err: float | None = None


class Sensitivity(_Out):
    input: str
    concurrency: int
    minus: float
    plus: float


class Projection(_Out):
    """A projection of decode throughput per concurrency on one target system."""

    _omit_none = frozenset({"sensitivity", "layout_notes"})
    target: Target
    model: str
    parallel: str
    context: int
    spec: str
    graphs: bool
    tree_build: str | None
    acceptance: Acceptance | None
    profile: ProfileInfo
    self_check: SelfCheck
    observed: dict[str, Any] | None
    describes: str = ""
    calibration: dict[str, Any] | None = None
    max_concurrency_that_fits: int
    rules: dict[str, str | None]
    points: list[Point]
    sensitivity: list[Sensitivity] | None = None
    layout_notes: list[str] | None = None  # what the layout replicates (e.g. KV heads when TP > n_kv_heads)

    def rows(self) -> list[dict]:
        """One flat dict per point, with the configuration repeated (for `pandas.DataFrame`)."""
        cfg = {"gpu": self.target.gpu, "n_gpus": self.target.n_gpus, "link": self.target.link, "model": self.model,
               "parallel": self.parallel, "context": self.context, "spec": self.spec, "graphs": self.graphs}
        return [cfg | p.row() for p in self.points]

    def point(self, concurrency: int) -> Point:
        return next(p for p in self.points if p.concurrency == concurrency)
