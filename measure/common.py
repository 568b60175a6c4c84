"""What every bench shares: its context (quick mode, time budget, measured ceilings, the
log), its output (a BenchResult plus whatever profile sections it fills), sample helpers,
and random test data (never zeros)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from perfmodel.profile import BenchResult, Ceilings, CollectiveFit, E2EPoint, KernelFit, Overheads, Sample, TreeBuildFit

from .timing import ClockSettle, Timing, settle_clock


@dataclass
class BenchContext:
    quick: bool = False
    budget_s: float = 30.0  # soft wall-clock budget of this bench; sweeps stop adding points past it
    source: str = "measured"  # "measured: <profile timestamp>", put on every fit
    ceilings: Ceilings = field(default_factory=Ceilings)  # measured so far (this or an earlier run)
    log: Callable[[str], None] = print
    started: float = field(default_factory=time.perf_counter)

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def over_budget(self, fraction: float = 1.0) -> bool:
        return self.elapsed() > self.budget_s * fraction

    def settle_clock(self, what: str, **kw: Any) -> ClockSettle:
        """Before latency-bound (decode-size) points: wait, idle, for the SM clock to come back
        after heavy work (measure/timing.py `settle_clock`; keywords go to it). The wait does
        not count against the bench's budget; a wait is logged."""
        r = settle_clock(**kw)
        self.started += r.waited_s
        if r.waited_s:
            state = "back" if r.settled else "still low"
            self.log(f"{what}: waited {r.waited_s:.1f} s for the SM clock ({r.clock_MHz} MHz, {state})")
        return r


@dataclass
class BenchOutput:
    result: BenchResult
    ceilings: Ceilings | None = None
    fits: dict[str, KernelFit] = field(default_factory=dict)
    collectives: list[CollectiveFit] = field(default_factory=list)
    overheads: Overheads | None = None
    treebuild: dict[str, TreeBuildFit] = field(default_factory=dict)
    e2e: list[E2EPoint] = field(default_factory=list)
    # results this bench's run also produced under other bench names (foreign: its prefill and
    # mixed steps, kept apart from the decode points), written into the profile beside its own
    more: dict[str, BenchResult] = field(default_factory=dict)


def make_sample(
    shape: dict[str, Any],
    timing: Timing,
    *,
    nbytes: float | None = None,
    nflops: float | None = None,
    provider: str = "triton",
    **extra: Any,
) -> Sample:
    t_s = timing.median_ms * 1e-3
    gbps = nbytes / t_s / 1e9 if nbytes and t_s > 0 else None
    tflops = nflops / t_s / 1e12 if nflops and t_s > 0 else None
    return Sample(
        shape=shape,
        bytes=float(nbytes) if nbytes is not None else None,
        flops=float(nflops) if nflops is not None else None,
        times_ms=[round(x, 6) for x in timing.times_ms],
        median_ms=timing.median_ms,
        p10_ms=timing.p10_ms,
        p90_ms=timing.p90_ms,
        achieved_GBps=gbps,
        achieved_TFLOPS=tflops,
        provider=provider,
        mode=timing.mode,
        cold_l2=timing.cold_l2,
        **{k: v for k, v in timing.extra.items() if k == "sm_clock_MHz"},
        **extra,
    )


def randn(*shape, dtype=None, scale: float = 1.0, device: str = "cuda"):
    import torch

    dtype = dtype or torch.bfloat16
    return (torch.randn(*shape, device=device, dtype=torch.float32 if dtype.itemsize < 2 else dtype) * scale).to(dtype)


def uniform_topk(T: int, E: int, k: int, device: str = "cuda", generator=None):
    """Uniform random routing: k distinct experts per token, softmax-normalised weights."""
    import torch

    ids = torch.rand(T, E, device=device, generator=generator).topk(k, dim=1).indices.to(torch.int32)
    w = torch.softmax(torch.randn(T, k, device=device, generator=generator), dim=1)
    return ids, w


def log_spaced(lo: int, hi: int, n: int) -> list[int]:
    import numpy as np

    return sorted({int(round(x)) for x in np.geomspace(lo, hi, n)})


def pct(x: float | None, ref: float | None) -> float | None:
    return 100.0 * x / ref if x and ref else None
