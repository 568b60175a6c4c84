"""Serving at a workload: continuous batching over the step model, as a serving benchmark sees it.

Requests arrive to keep C in flight (closed loop, as `vllm bench serve --max-concurrency C
--request-rate inf`) or at a request rate (Poisson), with input/output lengths fixed, drawn
uniformly from a share of them up to them (`min_length_ratio`, InferenceX's random dataset:
[V10]), or drawn from a list of (isl, osl) pairs with a seed. With fixed lengths a closed loop
runs in waves (every request of a wave finishes in the same step, and the next C prompts arrive
at once); drawn output lengths spread the finishes and the arrivals with them. Each engine step is formed as the engine's
scheduler forms it (`Engine`: a token budget, chunked or whole prefills, prefills sharing the
step with decodes or not) and priced by `step.batch_estimate`. Out come the figures users read,
defined as `vllm bench serve` defines them (perfmodel/model/SOURCES.md [V1]):

  ttft_ms         request sent -> first output token (queueing + prefill, chunked or not; the
                  prefill step samples the first token)
  tpot_ms         per request (e2e - ttft) / (output tokens - 1), then mean / median / p90 over
                  requests (the steps slowed by other requests' prefill chunks included)
  itl_ms          gaps between a request's successive steps (one step may carry several tokens
                  with speculative decoding), over all gaps of all requests
  e2e_latency_ms  request sent -> last token
  tokens_per_s    output tokens / benchmark duration (first request sent -> last one done);
                  per GPU: / the GPU count; per user: 1000 / mean TPOT (the "interactivity" of
                  InferenceX-style plots)

Schedulers (perfmodel/model/SOURCES.md [V2]-[V5]; `engine_defaults` holds each engine's default budget):

  vllm    V1 scheduler: every running request in turn, decodes first in practice (older), each
          taking min(its remaining tokens, the budget left), then waiting requests while budget
          remains; prefills are chunked; decodes and prefill chunks share the step.
  sglang  prefill first: while a chunked request or an admissible waiting request exists, a
          prefill-only batch runs (chunks under `chunked_prefill_size`) and the decodes wait;
          otherwise a decode batch. `enable_mixed_chunk` (off by default) mixes them as vLLM does.
  trtllm  generation requests first, then whole contexts while they fit in `max_num_tokens`
          (context chunking off by default in `trtllm-serve`), stopping at the first that does not.

Server settings that hold a prompt back before it runs (off by default, set per server):

  recv_interval      SGLang `--scheduler-recv-interval N` [V12]: the scheduler receives new
                     requests only when its counter reaches N; a decode step adds 1, a step with
                     prefill (or an idle loop) reaches N at once, and a receive resets it. A
                     request sent during a decode stretch waits for the next receive.
  batch_wait_iters,  TensorRT-LLM `batch_wait_timeout_iters` / `batch_wait_max_tokens_ratio` [V11]:
  batch_wait_tokens_ratio  while generation requests run (and attention is not data-parallel),
                     the scheduled context requests are held until the held steps reach the
                     timeout or the step's tokens reach the ratio of `max_num_tokens`.
  adp_balance_iters  TensorRT-LLM `attention_dp_config` `enable_balance`, `timeout_iters` [V13]:
                     with data-parallel attention, while generation requests run, the context
                     requests are held until every rank has one, at most that many steps.

Decodes are never held back by the budget (each takes its 1 or `width` tokens first; the
budget binds the prefill chunks), which is what the engines do while C x width stays within it.

KV cache: a request is admitted when the engine's KV pool (`memory.kv_capacity_tokens`) holds
its whole prompt and output (reserved up front, as TRT-LLM's GUARANTEED_NO_EVICT does; vLLM
allocates as it goes and preempts, so near the pool's limit vLLM admits a little more). A
prefix-cache hit rate h serves the first floor(h·isl) prompt tokens from the cache (at least one
prompt token is computed). Speculative decoding runs verify steps (`SpecDecode`: `width` tokens
per sequence, τ accepted on average) in place of decode steps.

Speed: a pure-decode stretch between two events (an arrival, a prefill chunk, a finish) is
priced once at its middle context and advanced k steps at once (at most `MAX_STRETCH`); step
prices are cached by batch composition, decode contexts on a grid (16 points per octave) with
linear interpolation between grid points. `exact=True` prices every step on its own at its
exact context: the reference the shortcut is tested against (tests/test_physics_serving.py).

Pure arithmetic: no file reading.
"""

from __future__ import annotations

import math
import random
from collections import deque
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from perfmodel.model.layers import Batch, Decode, Layout, Prefill, Verify
from perfmodel.model.machine import Machine
from perfmodel.model.memory import kv_capacity_tokens
from perfmodel.model.step import Z90, StepTerms, batch_terms
from perfmodel.specs.schema import GpuSpec, ModelSpec

EngineName = Literal["vllm", "sglang", "trtllm"]
MAX_STRETCH = 256  # decode steps advanced at once, at most
GiB, MiB = 2.0**30, 2.0**20


class Engine(BaseModel):
    """How an engine's scheduler forms a step."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: EngineName
    max_batched_tokens: int = Field(ge=1, description="token budget of a step (vLLM max_num_batched_tokens, SGLang "
                                                      "chunked_prefill_size, TRT-LLM max_num_tokens)")
    max_seqs: int | None = Field(None, ge=1, description="running requests at most (None: the KV pool and the load decide)")
    chunked: bool = Field(description="prefills split into chunks under the budget (else whole prompts only)")
    mixed: bool = Field(description="prefill chunks share a step with the decodes (else a prefill step runs alone)")
    budget_per_dp_rank: bool = Field(False, description="with data-parallel attention each rank schedules its own steps "
                                                       "with this budget and max_seqs (vLLM, TRT-LLM); else they are the "
                                                       "whole step's (SGLang divides its budget among the ranks)")
    recv_interval: int = Field(1, ge=1, description="SGLang scheduler_recv_interval: new requests reach the scheduler "
                                                    "only when its poll counter (+1 a decode step, at once after a "
                                                    "prefill step or while idle) reaches this (perfmodel/model/SOURCES.md "
                                                    "[V12])")
    batch_wait_iters: int = Field(0, ge=0, description="TRT-LLM batch_wait_timeout_iters: while generation requests run "
                                                       "(and attention is not data-parallel), new context requests are "
                                                       "held for up to this many steps, or until the step's tokens reach "
                                                       "batch_wait_tokens_ratio x max_batched_tokens (perfmodel/model/"
                                                       "SOURCES.md [V11]; 0: no waiting)")
    batch_wait_tokens_ratio: float = Field(0.0, ge=0.0, le=1.0, description="TRT-LLM batch_wait_max_tokens_ratio (above)")
    adp_balance_iters: int = Field(0, ge=0, description="TRT-LLM attention_dp_config enable_balance, timeout_iters: with "
                                                        "data-parallel attention, while generation requests run, new context "
                                                        "requests are held until every rank has one, or for this many steps "
                                                        "(PyExecutor._balance_adp_requests, perfmodel/model/SOURCES.md [V13]; "
                                                        "0: no balancing)")
    source: str = ""

    @property
    def batch_waiting(self) -> bool:
        return self.batch_wait_iters > 0 or self.batch_wait_tokens_ratio > 0

    def with_settings(self, **settings) -> Engine:
        """The engine with the server settings given (`max_batched_tokens`, `max_seqs`, `recv_interval`,
        `batch_wait_iters`, `batch_wait_tokens_ratio`); a setting given as None keeps the default."""
        update = {k: v for k, v in settings.items() if v is not None}
        return Engine.model_validate({**self.model_dump(), **update}) if update else self

    def over(self, dp_ranks: int) -> Engine:
        """The engine as one scheduler over `dp_ranks` data-parallel attention ranks: an engine whose
        budget is per rank runs `dp_ranks` of them side by side (perfmodel/model/SOURCES.md [V9])."""
        if dp_ranks <= 1 or not self.budget_per_dp_rank:
            return self
        return self.model_copy(update={"max_batched_tokens": self.max_batched_tokens * dp_ranks,
                                       "max_seqs": self.max_seqs * dp_ranks if self.max_seqs else None})


def engine_defaults(name: EngineName, gpu: GpuSpec) -> Engine:
    """An engine's default scheduler on a GPU, from its own code (perfmodel/model/SOURCES.md [V2]-[V5]).

    vLLM (API server): max_num_batched_tokens 8192 and max_num_seqs 1024 on GPUs with at least
      70 GiB that are not A100s, else 2048 and 256 (`EngineArgs._set_default_args`).
    SGLang: chunked_prefill_size by GPU memory (MiB): < 35 GiB 2048, < 60 GiB 4096, < 160 GiB 8192,
      else 16384 (`ServerArgs._handle_gpu_memory_settings`); enable_mixed_chunk off.
    TRT-LLM (`trtllm-serve`): max_num_tokens 8192, chunked prefill off."""
    mem = gpu.memory.capacity_GB.value * 1e9
    if name == "vllm":
        big = mem >= 70 * GiB and "a100" not in gpu.name.lower()
        return Engine(name="vllm", max_batched_tokens=8192 if big else 2048, max_seqs=1024 if big else 256, chunked=True,
                      mixed=True, budget_per_dp_rank=True, source="perfmodel/model/SOURCES.md [V2], [V3]: vLLM V1 defaults for the OpenAI API server")
    if name == "sglang":
        mib = mem / MiB
        size = 2048 if mib < 35 * 1024 else 4096 if mib < 60 * 1024 else 8192 if mib < 160 * 1024 else 16384
        return Engine(name="sglang", max_batched_tokens=size, chunked=True, mixed=False,
                      source="perfmodel/model/SOURCES.md [V4]: SGLang chunked_prefill_size by GPU memory, enable_mixed_chunk off")
    if name == "trtllm":
        return Engine(name="trtllm", max_batched_tokens=8192, chunked=False, mixed=True, budget_per_dp_rank=True,
                      source="perfmodel/model/SOURCES.md [V5]: TRT-LLM max_num_tokens 8192, trtllm-serve chunked prefill off")
    raise ValueError(f"unknown engine '{name}' (known: vllm, sglang, trtllm)")


class SpecDecode(BaseModel):
    """Speculative decoding inside the loop: each step verifies `width` tokens per sequence
    (drafted + 1) and accepts τ of them on average (bonus token included)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    width: int = Field(ge=2)
    tau: float = Field(ge=1.0)
    draft: bool = Field(True, description="price the model's drafter forward in each verify step")
    tree_budget: int = Field(0, ge=0, description="tree nodes built per sequence per step (0: a chain)")

    @model_validator(mode="after")
    def _tau_le_width(self) -> SpecDecode:
        if self.tau > self.width:
            raise ValueError(f"tau {self.tau:g} is above the verified width {self.width}")
        return self


class Workload(BaseModel):
    """What the load generator sends."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    isl: int | None = Field(None, ge=1, description="input tokens per request")
    osl: int | None = Field(None, ge=1, description="output tokens per request")
    lengths: tuple[tuple[int, int], ...] | None = Field(None, min_length=1,
                                                        description="(isl, osl) pairs each request draws from")
    min_length_ratio: float = Field(1.0, gt=0.0, le=1.0, description="each request's input and output lengths drawn "
                                    "uniformly from [floor(r x isl), isl] and [floor(r x osl), osl] (1: fixed; "
                                    "perfmodel/model/SOURCES.md [V10])")
    seed: int = 0
    concurrency: int | None = Field(None, ge=1, description="requests in flight at most (closed loop)")
    request_rate: float | None = Field(None, gt=0, description="requests/s, Poisson arrivals")
    n_requests: int | None = Field(None, ge=1, description="requests sent (default 10 x concurrency, perfmodel/model/SOURCES.md [V6])")
    prefix_hit: float = Field(0.0, ge=0.0, lt=1.0, description="share of each prompt served from the prefix cache")
    spec: SpecDecode | None = None

    @model_validator(mode="after")
    def _complete(self) -> Workload:
        if (self.isl is None) != (self.osl is None):
            raise ValueError("isl and osl go together")
        if (self.isl is None) == (self.lengths is None):
            raise ValueError("give either isl/osl or a list of (isl, osl) lengths")
        if self.lengths is not None and any(i < 1 or o < 1 for i, o in self.lengths):
            raise ValueError("every (isl, osl) pair needs isl >= 1 and osl >= 1")
        if self.min_length_ratio < 1 and self.isl is None:
            raise ValueError("a min_length_ratio below 1 draws around isl/osl: give them, not a list of lengths")
        if self.concurrency is None and self.request_rate is None:
            raise ValueError("give a concurrency, a request rate or both")
        if self.concurrency is None and self.n_requests is None:
            raise ValueError("a request-rate workload needs n_requests")
        return self

    @property
    def requests(self) -> int:
        return self.n_requests if self.n_requests is not None else 10 * self.concurrency


@dataclass(frozen=True)
class Stat:
    mean: float
    median: float
    p90: float
    p99: float


@dataclass(frozen=True)
class Interval:
    lo: float
    hi: float


@dataclass
class ServingPoint:
    """One workload point: per-request figures (ms) aggregated as `vllm bench serve` does, and
    throughput. `interval`: 90% intervals from the steps' correlated 1σ (the laws' errors move
    every step alike), keyed by the figure they bound."""

    engine: str
    concurrency: int | None
    request_rate: float | None
    n_requests: int
    n_gpus: int
    ttft_ms: Stat
    tpot_ms: Stat
    itl_ms: Stat
    e2e_latency_ms: Stat
    tokens_per_s: float
    tokens_per_s_per_user: float
    tokens_per_s_per_gpu: float
    duration_s: float
    interval: dict[str, Interval]
    steps: int
    prefill_steps: int  # steps that carried prefill tokens
    mean_decode_batch: float  # sequences decoding in a step, averaged over decode-carrying steps
    max_running: int
    kv_capacity_tokens: int
    kv_limited: bool  # the KV pool held back a request that the load offered
    assumptions: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        from dataclasses import asdict

        return asdict(self)


# ----------------------------------------------------------------------------- step pricing

def _grid(ctx: float) -> tuple[int, int]:
    """The decode-context grid points around ctx: 16 per octave above 256, every 16 below."""
    c = max(ctx, 0.0)
    step = max(16, 2 ** (int(math.log2(max(c, 16.0))) - 4))
    lo = int(c // step) * step
    return lo, lo + step


def _nearest(x: float) -> int:
    lo, hi = _grid(x)
    return lo if x - lo <= hi - x else hi


class StepPricer:
    """Step prices of one (model, machine, layout) for the simulation, cached by batch
    composition: (decode sequences, their mean context, prefill chunks as (count, tokens,
    prefix)). One pricer serves every point of a projection. `terms`: the steps' prices but for
    the engine's host time per step (`step.StepTerms`) by batch composition, a dict that pricers
    of machines differing in that time alone may share (a calibration trying host times)."""

    def __init__(self, model: ModelSpec, machine: Machine, layout: Layout, *, graph: bool = True,
                 spec: SpecDecode | None = None, tree_impl: str = "gpu", interpolate: bool = True,
                 terms: dict | None = None):
        self.model, self.machine, self.layout = model, machine, layout
        self.graph, self.spec, self.tree_impl, self.interpolate = graph, spec, tree_impl, interpolate
        self.memo: dict = {}  # op terms (step._op_terms), shared by every step priced
        self.terms: dict[tuple, StepTerms] = {} if terms is None else terms
        self.cache: dict[tuple, tuple[float, float]] = {}
        self.assumptions: set[str] = set()

    def exact(self, n_dec: int, ctx: int, prefills: tuple[tuple[int, int, int], ...]) -> tuple[float, float]:
        """(step us, 1σ us) of a step with n_dec decoding sequences at context ctx and the prefill
        chunks (count, tokens, prefix)."""
        key = (n_dec, ctx, prefills)
        hit = self.cache.get(key)
        if hit is not None:
            return hit
        terms = self.terms.get(key)
        if terms is None:
            sp = self.spec
            groups: list = []
            if n_dec:
                groups.append(Verify(n=n_dec, width=sp.width, context=ctx) if sp else Decode(n=n_dec, context=ctx))
            groups += [Prefill(n=n, tokens=t, prefix=p) for n, t, p in prefills]
            terms = self.terms[key] = batch_terms(
                self.model, self.machine, self.layout, Batch(groups=tuple(groups)), graph=self.graph,
                draft=bool(sp and sp.draft and n_dec), tree_budget=sp.tree_budget if sp and n_dec else 0,
                tree_impl=self.tree_impl, memo=self.memo)
        est = terms.with_engine_host(self.machine.overheads)
        self.assumptions.update(est.assumptions)
        out = self.cache[key] = (est.step_us, est.sigma_us)
        return out

    def price(self, n_dec: int, ctx: float, prefills: tuple[tuple[int, int, int], ...] = ()) -> tuple[float, float]:
        """As `exact`, on grids: a decode step's context interpolated linearly between its grid
        points; a step with prefill chunks at its decode context's nearest grid point, one chunk's
        tokens interpolated between their grid points and its prefix at its nearest, several
        chunks each at their nearest grid points."""
        if not self.interpolate:
            return self.exact(n_dec, round(ctx), prefills)
        if not prefills:
            lo, hi = _grid(ctx)
            return self._between(lambda c: self.exact(n_dec, c, ()), ctx, lo, hi)
        c = _nearest(ctx) if n_dec else 0
        if len(prefills) == 1:
            n, T, P = prefills[0]
            lo, hi = _grid(T)
            return self._between(lambda t: self.exact(n_dec, c, ((n, t, _nearest(P)),)), T, max(lo, 1), hi)
        return self.exact(n_dec, c, tuple(sorted((n, max(1, _nearest(T)), _nearest(P)) for n, T, P in prefills)))

    @staticmethod
    def _between(f, x: float, lo: int, hi: int) -> tuple[float, float]:
        t0, s0 = f(lo)
        if x <= lo:
            return t0, s0
        t1, s1 = f(hi)
        w = (x - lo) / (hi - lo)
        return t0 + w * (t1 - t0), s0 + w * (s1 - s0)


# ----------------------------------------------------------------------------- the loop

def _stat(x: np.ndarray, w: np.ndarray | None = None) -> Stat:
    if x.size == 0:
        return Stat(math.nan, math.nan, math.nan, math.nan)
    if w is None:
        return Stat(float(np.mean(x)), float(np.median(x)), float(np.percentile(x, 90)), float(np.percentile(x, 99)))
    order = np.argsort(x)
    xs, ws = x[order], w[order]
    cw = np.cumsum(ws)

    def q(p: float) -> float:
        return float(xs[min(np.searchsorted(cw, p * cw[-1]), xs.size - 1)])

    return Stat(float(np.average(x, weights=w)), q(0.5), q(0.9), q(0.99))


def _interval(v: float, rel: float) -> Interval:
    return Interval(v * math.exp(-Z90 * rel), v * math.exp(Z90 * rel))


@dataclass
class RequestTimes:
    """Every request's times (us) in one simulated benchmark, with their correlated 1σ (`s_*`), and
    what the loop counted: what `figures` takes the serving figures from."""

    engine: str
    concurrency: int | None
    request_rate: float | None
    n_gpus: int
    tau: float
    sched: np.ndarray
    osl: np.ndarray
    arrival: np.ndarray
    first: np.ndarray
    finish: np.ndarray
    s_arrival: np.ndarray
    s_first: np.ndarray
    s_finish: np.ndarray
    itl_ms: Stat  # the gaps between a request's successive steps: no wait moves them
    steps: int
    prefill_steps: int
    dec_seq_steps: int
    dec_steps: int
    max_running: int
    kv_capacity_tokens: int
    kv_limited: bool
    assumptions: list[str]


def simulate(model: ModelSpec, machine: Machine, layout: Layout, workload: Workload, engine: Engine, *,
             graph: bool = True, tree_impl: str = "gpu", kv_tokens: int | None = None, exact: bool = False,
             pricer: StepPricer | None = None) -> ServingPoint:
    """One workload point under one engine on one machine. `kv_tokens`: the engine's KV pool in
    tokens (default `memory.kv_capacity_tokens` of the machine's GPU); `exact`: price every step
    on its own (no stretches, no context grid); `pricer`: a StepPricer shared across points. The
    machine's first-token waits (`Overheads.engine_ttft_steps` and `engine_ttft_ms`, a
    calibration's) move the figures only (`figures`), not the schedule."""
    times = request_times(model, machine, layout, workload, engine, graph=graph, tree_impl=tree_impl,
                          kv_tokens=kv_tokens, exact=exact, pricer=pricer)
    return figures(times, machine.overheads.engine_ttft_steps, machine.overheads.engine_ttft_ms)


def request_times(model: ModelSpec, machine: Machine, layout: Layout, workload: Workload, engine: Engine, *,
                  graph: bool = True, tree_impl: str = "gpu", kv_tokens: int | None = None, exact: bool = False,
                  pricer: StepPricer | None = None) -> RequestTimes:
    """The continuous-batching loop of `simulate`: every request's times."""
    wl, sp = workload, workload.spec
    W = sp.width if sp else 1
    tau = sp.tau if sp else 1.0
    rank_budget = engine.max_batched_tokens  # a whole prompt runs on one rank, within its budget
    engine = engine.over(layout.dp_attn)
    recv = engine.recv_interval  # SGLang's poll interval (1: every step)
    batch_wait = engine.batch_waiting and layout.dp_attn == 1  # TRT-LLM waits only without attention DP [V11]
    balance = engine.adp_balance_iters if layout.dp_attn > 1 else 0  # ... and balances only with it [V13]
    if pricer is None:
        pricer = StepPricer(model, machine, layout, graph=graph, spec=sp, tree_impl=tree_impl, interpolate=not exact)
    if kv_tokens is None:
        kv_tokens = kv_capacity_tokens(model, machine.gpu, layout, drafter=bool(sp and sp.draft))
    R = wl.requests
    rng = random.Random(wl.seed)
    if wl.lengths:
        pairs = [rng.choice(wl.lengths) for _ in range(R)]
    elif wl.min_length_ratio < 1:  # as InferenceX's benchmark_serving.py samples them (SOURCES.md [V10])
        r = wl.min_length_ratio
        pairs = [(rng.randint(max(1, int(wl.isl * r)), wl.isl), rng.randint(max(1, int(wl.osl * r)), wl.osl))
                 for _ in range(R)]
    else:
        pairs = [(wl.isl, wl.osl)] * R
    isl = np.array([p[0] for p in pairs], dtype=np.int64)
    osl = np.array([p[1] for p in pairs], dtype=np.int64)
    need = isl + osl + (W - 1)  # KV tokens a request holds at most
    if int(need.max()) > kv_tokens:
        raise ValueError(f"a request of {int(need.max())} tokens does not fit in the KV cache ({kv_tokens} tokens "
                         f"on {layout.n_gpus} x {machine.gpu.name})")
    hit = np.minimum(np.floor(wl.prefix_hit * isl).astype(np.int64), isl - 1)
    if not engine.chunked and int((isl - hit).max()) > rank_budget:
        raise ValueError(f"{engine.name} without chunked prefill cannot run a prompt of {int((isl - hit).max())} "
                         f"tokens: above its {rank_budget}-token step budget")
    if wl.request_rate:
        gaps = [0.0] + [rng.expovariate(wl.request_rate) * 1e6 for _ in range(R - 1)]  # us
        sched = np.cumsum(gaps)
    else:
        sched = np.zeros(R)
    arrival = np.full(R, math.nan)
    first = np.full(R, math.nan)
    finish = np.full(R, math.nan)
    s_arrival, s_first, s_finish = np.zeros(R), np.zeros(R), np.zeros(R)
    computed = hit.copy()
    gen = np.zeros(R)
    slots = deque([0.0] * wl.concurrency) if wl.concurrency else None  # times client slots freed
    now = snow = 0.0  # clock (us) and its correlated 1σ
    nxt = 0  # next request to send
    waiting: deque[int] = deque()
    inbox: deque[int] = deque()  # sent, not yet received by a scheduler that polls every `recv` steps
    polled = recv  # SGLang's poll counter: the first request is received at once
    held = 0  # steps TRT-LLM's batch waiting has held the context requests
    prefilling: list[int] = []
    dec: list[int] = []
    reserved = 0
    max_running = 0
    kv_limited = False
    steps = prefill_steps = 0
    dec_seq_steps = dec_steps = 0
    itl_v: list[np.ndarray] = []
    itl_w: list[np.ndarray] = []
    last = np.zeros(R)  # time of each request's latest token
    done = 0

    def send() -> None:
        nonlocal nxt
        while nxt < R and sched[nxt] <= now and (slots is None or slots):
            t = max(sched[nxt], slots.popleft()) if slots is not None else sched[nxt]
            arrival[nxt], s_arrival[nxt] = t, snow
            (inbox if recv > 1 else waiting).append(nxt)
            nxt += 1

    def poll() -> None:
        """SGLang's recv skipper: the scheduler receives every request sent so far each time its
        counter reaches the interval (a decode step adds 1; a prefill step or an idle loop reaches
        it at once), and counts from zero again; `polled` counts the decode steps since then."""
        nonlocal polled
        if not (prefilling or dec or waiting):
            polled = recv  # an idle scheduler loops (and receives) at once
        if polled >= recv and polled % recv:  # receives passed during a stretch while none was sent
            polled %= recv
        if polled >= recv:
            waiting.extend(inbox)
            inbox.clear()
            polled = 0

    def next_arrival() -> float:
        if nxt >= R or (slots is not None and not slots):
            return math.inf
        return max(sched[nxt], slots[0]) if slots is not None else sched[nxt]

    def finish_req(r: int) -> None:
        nonlocal reserved, done
        finish[r], s_finish[r] = now, snow
        reserved -= int(need[r])
        done += 1
        if slots is not None:
            slots.append(now)

    def _gaps(t: float, k: int) -> None:
        """ITL samples of k decode steps of t us each, just run: each decode's gap since its
        previous token (prefill-only steps it waited through included), then k - 1 gaps of t."""
        n = len(dec_arr)
        itl_v.append(now - (k - 1) * t - last[dec_arr])
        itl_w.append(np.ones(n))
        if k > 1:
            itl_v.append(np.array([t]))
            itl_w.append(np.array([float(n * (k - 1))]))
        last[dec_arr] = now

    while done < R:
        send()
        if recv > 1:
            poll()
        running = len(prefilling) + len(dec)
        if not running and not waiting:
            now = max(now, next_arrival())
            continue
        # ---- form the step
        n_dec = len(dec)
        budget = engine.max_batched_tokens - (n_dec * W if engine.mixed else 0)
        chunks: list[tuple[int, int]] = []  # (request, tokens)
        admitted: list[int] = []
        for r in prefilling:
            if budget <= 0:
                break
            c = min(int(isl[r] - computed[r]), budget)
            chunks.append((r, c))
            budget -= c
        while waiting and budget > 0:
            r = waiting[0]
            rest = int(isl[r] - computed[r])
            if not engine.chunked and rest > budget:
                break
            if engine.max_seqs is not None and running >= engine.max_seqs:
                break
            if reserved + int(need[r]) > kv_tokens:
                kv_limited = True
                break
            waiting.popleft()
            prefilling.append(r)
            admitted.append(r)
            reserved += int(need[r])
            running += 1
            c = min(rest, budget)
            chunks.append((r, c))
            budget -= c
        hold, checked = False, False
        if batch_wait and chunks and n_dec:
            # TRT-LLM's _waiting_requests: the context requests wait while generation requests run, until
            # the held steps reach batch_wait_timeout_iters or the step's tokens reach the ratio of its budget
            tokens = sum(c for _, c in chunks) + n_dec * W
            checked = True
            hold = not (held >= engine.batch_wait_iters or tokens >= engine.batch_wait_tokens_ratio * engine.max_batched_tokens)
        elif balance and admitted and n_dec:
            # TRT-LLM's _balance_adp_requests: the context requests wait until every rank has one (as many as
            # the ranks admitted at once), at most adp_balance_iters steps
            checked = True
            hold = not (len(admitted) >= layout.dp_attn or held >= balance)
        if hold:
            held += 1
            for r in reversed(admitted):
                waiting.appendleft(r)
                prefilling.remove(r)
                reserved -= int(need[r])
                running -= 1
            chunks = [c for c in chunks if c[0] not in admitted]
        elif checked:  # the wait is over: its count starts again
            held = 0
        max_running = max(max_running, running)
        if not chunks and not n_dec:  # cannot happen with the checks above (every request fits alone)
            raise ValueError(f"{engine.name} can schedule none of the {len(waiting)} waiting requests")
        with_dec = bool(n_dec) and (engine.mixed or not chunks)
        dec_arr = np.array(dec, dtype=np.int64) if with_dec else None
        ctx = float(np.mean(isl[dec_arr] + gen[dec_arr] - 1)) if with_dec else 0.0
        if not chunks:
            # ---- a pure-decode stretch: k steps to the next event
            left = np.ceil((osl[dec_arr] - gen[dec_arr]) / tau - 1e-9)
            k = 1 if exact else int(max(1, min(left.min(), MAX_STRETCH)))
            if hold:  # the held steps end when the wait times out
                k = min(k, 1 + (balance or engine.batch_wait_iters) - held)
            if inbox:  # ... and SGLang receives at its next poll
                k = min(k, max(1, recv - polled))
            t_a = next_arrival()
            if k > 1 and t_a < math.inf:  # end the stretch with the step during which the next request arrives
                t1, _ = pricer.price(n_dec, ctx)
                k = max(1, min(k, math.ceil((t_a - now) / t1)))
            t, s = pricer.price(n_dec, ctx + (k - 1) / 2 * tau)
            if k > 1 and t_a < math.inf and (k - 1) * t >= t_a - now:
                k = max(1, math.ceil((t_a - now) / t))
                t, s = pricer.price(n_dec, ctx + (k - 1) / 2 * tau)
            now += k * t
            snow += k * s
            gen[dec_arr] += k * tau
            _gaps(t, k)
            polled += k
            if hold:
                held += k - 1
            steps += k
            dec_steps += k
            dec_seq_steps += k * n_dec
        else:
            groups: dict[tuple[int, int], int] = {}
            for r, c in chunks:
                key = (c, int(computed[r]))
                groups[key] = groups.get(key, 0) + 1
            prefills = tuple(sorted((n, c, p) for (c, p), n in groups.items()))
            t, s = pricer.price(n_dec if with_dec else 0, ctx, prefills)
            now += t
            snow += s
            polled = recv  # after a prefill batch SGLang receives at once (its weight of an extend step)
            steps += 1
            prefill_steps += 1
            if with_dec:
                gen[dec_arr] += tau
                _gaps(t, 1)
                dec_steps += 1
                dec_seq_steps += n_dec
            for r, c in chunks:
                computed[r] += c
                if computed[r] == isl[r]:
                    prefilling.remove(r)
                    first[r], s_first[r] = now, snow
                    last[r] = now
                    gen[r] = 1.0
                    if osl[r] <= 1:
                        finish_req(r)
                    else:
                        dec.append(r)
        if with_dec:
            over = gen[dec_arr] >= osl[dec_arr] - 1e-9
            if over.any():
                gone = set(dec_arr[over].tolist())
                for r in gone:
                    finish_req(r)
                dec = [r for r in dec if r not in gone]

    return RequestTimes(
        engine=engine.name, concurrency=wl.concurrency, request_rate=wl.request_rate, n_gpus=layout.n_gpus, tau=tau,
        sched=sched, osl=osl, arrival=arrival, first=first, finish=finish, s_arrival=s_arrival, s_first=s_first,
        s_finish=s_finish,
        itl_ms=_stat(np.concatenate(itl_v) / 1e3, np.concatenate(itl_w)) if itl_v else _stat(np.array([])), steps=steps, prefill_steps=prefill_steps,
        dec_seq_steps=dec_seq_steps, dec_steps=dec_steps, max_running=max_running, kv_capacity_tokens=kv_tokens,
        kv_limited=kv_limited,
        assumptions=sorted(pricer.assumptions) + (["speculative decoding: the drafter's own prefill is not priced"]
                                                   if sp and sp.draft else []))


def figures(t: RequestTimes, ttft_steps: float = 0.0, ttft_ms: float = 0.0) -> ServingPoint:
    """The serving figures of a simulated benchmark's request times, as `vllm bench serve` takes
    them (module docstring), with each first token `ttft_steps` of the request's own decode steps
    plus `ttft_ms` later (a calibration's first-token waits; every later token shifted alike, so
    TPOT, ITL and the throughput stay as simulated)."""
    arrival, first, finish, osl, tau = t.arrival, t.first, t.finish, t.osl, t.tau
    s_arrival, s_first, s_finish = t.s_arrival, t.s_first, t.s_finish
    R = osl.size
    ttft = first - arrival
    e2e = finish - arrival
    many = osl > 1
    tpot = (e2e[many] - ttft[many]) / (osl[many] - 1)
    wait = ttft_steps
    if wait > 0:  # a calibration's first-token wait: k of the request's own decode steps, every later token shifted alike
        step = np.full(R, float(np.mean(tpot)) if tpot.size else 0.0) * tau
        step[many] = tpot * tau
        ttft, e2e = ttft + wait * step, e2e + wait * step
    if ttft_ms > 0:
        ttft, e2e = ttft + ttft_ms * 1e3, e2e + ttft_ms * 1e3
    duration = float(np.max(finish) - np.min(t.sched))
    tps = float(osl.sum()) / (duration / 1e6)
    st = _stat(tpot / 1e3)
    per_user = 1e3 / st.mean if st.mean > 0 else math.nan

    def rel(num: np.ndarray, den: np.ndarray) -> float:
        d = float(np.sum(den))
        return float(np.sum(num)) / d if d > 0 else 0.0

    r_ttft = rel(s_first - s_arrival, ttft)
    r_tpot = rel((s_finish - s_first)[many], (e2e - ttft)[many])
    r_e2e = rel(s_finish - s_arrival, e2e)
    r_dur = float(np.max(s_finish)) / duration if duration > 0 else 0.0
    ttft_s, e2e_s = _stat(ttft / 1e3), _stat(e2e / 1e3)
    interval = {"ttft_ms": _interval(ttft_s.median, r_ttft), "tpot_ms": _interval(st.mean, r_tpot),
                "e2e_latency_ms": _interval(e2e_s.median, r_e2e), "tokens_per_s": _interval(tps, r_dur)}
    iv = interval["tokens_per_s"]
    interval["tokens_per_s_per_gpu"] = Interval(iv.lo / t.n_gpus, iv.hi / t.n_gpus)
    ivt = interval["tpot_ms"]
    interval["tokens_per_s_per_user"] = Interval(1e3 / ivt.hi, 1e3 / ivt.lo)
    return ServingPoint(
        engine=t.engine, concurrency=t.concurrency, request_rate=t.request_rate, n_requests=R, n_gpus=t.n_gpus,
        ttft_ms=ttft_s, tpot_ms=st, itl_ms=t.itl_ms, e2e_latency_ms=e2e_s,
        tokens_per_s=tps, tokens_per_s_per_user=per_user, tokens_per_s_per_gpu=tps / t.n_gpus,
        duration_s=duration / 1e6, interval=interval, steps=t.steps, prefill_steps=t.prefill_steps,
        mean_decode_batch=t.dec_seq_steps / t.dec_steps if t.dec_steps else 0.0, max_running=t.max_running,
        kv_capacity_tokens=t.kv_capacity_tokens, kv_limited=t.kv_limited, assumptions=list(t.assumptions))


def project_serving(model: ModelSpec, machine: Machine, layout: Layout, workload: Workload, engine: Engine,
                    concurrencies: list[int], *, graph: bool = True, tree_impl: str = "gpu",
                    kv_tokens: int | None = None) -> list[ServingPoint]:
    """`simulate` at each concurrency (closed loop, `workload.n_requests` or 10 x C requests
    each), sharing one step pricer."""
    pricer = StepPricer(model, machine, layout, graph=graph, spec=workload.spec, tree_impl=tree_impl)
    out = []
    for C in concurrencies:
        wl = workload.model_copy(update={"concurrency": C})
        out.append(simulate(model, machine, layout, wl, engine, graph=graph, tree_impl=tree_impl, kv_tokens=kv_tokens,
                            pricer=pricer))
    return out
