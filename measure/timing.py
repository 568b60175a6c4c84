"""One timing function for every bench (the ideas of triton's `do_bench` and flashinfer's
`bench_gpu_time`): warm-up, CUDA events around each sample, many samples bounded by a count
and a wall-clock budget, median and p10/p90, and a cold L2 between samples.

Cold L2, two ways:
  * "flush"  (default): before every sample a buffer of >= 2x L2 is overwritten; that write
    runs before the start event, so it is not timed. It also gives the host a head start,
    so a short kernel is not timed waiting for its own launch.
  * "rotate": the caller passes `args_list`, copies of the inputs whose total size exceeds
    2x L2 (see `rotation_copies`); sample i uses copy i % n.
  * "none": hot L2 (collectives, host-side loops).

SM clock: a GPU that has just run heavy work (a large-GEMM or large-T sweep) lowers its SM
clock for seconds, and a latency-bound decode kernel timed then is slow by the clock ratio:
on an H200 the Kimi TP8 MoE layer at T=1 took 19.5 us at 1725 MHz right after the moe bench's
I=2048 sweep, 17.5 us at 1980 MHz fresh or after 10 s idle
(evidence/sm-clock-settle/moe_order_effect_65f127b.log). `settle_clock` waits for the clock under load to
come back before such points; `time_fn` records the clock after its samples (`Timing.extra`), which
`make_sample` puts on the sample (`sm_clock_MHz`).

Graph mode captures `calls_per_graph` calls (rotating through `args_list` if given) into
one CUDA graph and times a replay; per-call time = replay / calls. Eager per-call time minus
graph per-call time is then the launch overhead, as a difference of two measurements.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

ColdL2 = Literal["flush", "rotate", "none"]

_FLUSH: dict[int, Any] = {}


@dataclass
class Timing:
    times_ms: list[float]  # per call (graph mode: replay time / calls_per_graph)
    median_ms: float
    p10_ms: float
    p90_ms: float
    mode: str  # "eager" | "graph"
    calls_per_sample: int = 1
    cold_l2: str = "flush"
    extra: dict = field(default_factory=dict)


def summarize(times_ms: Sequence[float], mode: str = "eager", calls: int = 1, cold: str = "none") -> Timing:
    a = np.asarray(times_ms, dtype=float)
    return Timing(
        times_ms=[float(x) for x in a],
        median_ms=float(np.median(a)),
        p10_ms=float(np.percentile(a, 10)),
        p90_ms=float(np.percentile(a, 90)),
        mode=mode,
        calls_per_sample=calls,
        cold_l2=cold,
    )


def l2_bytes(device=None) -> int:
    import torch

    props = torch.cuda.get_device_properties(device if device is not None else torch.cuda.current_device())
    # 50 MB is the H100/H200 L2; used only if this torch does not expose the size.
    return int(getattr(props, "L2_cache_size", 0) or 50 * 2**20)


def rotation_copies(bytes_per_call: float, device=None, max_copies: int = 64) -> int:
    """How many input copies make the rotation exceed 2x L2 (at least 2, at most max_copies)."""
    if bytes_per_call <= 0:
        return 2
    return int(min(max_copies, max(2, math.ceil(2 * l2_bytes(device) / bytes_per_call) + 1)))


def _flush_buffer():
    import torch

    dev = torch.cuda.current_device()
    buf = _FLUSH.get(dev)
    if buf is None:
        n = max(2 * l2_bytes(dev), 64 * 2**20)
        buf = torch.empty(n // 4, dtype=torch.int32, device="cuda")
        _FLUSH[dev] = buf
    return buf


def flush_l2(i: int = 0) -> None:
    _flush_buffer().fill_(i & 0x7FFF)


_NVML: dict = {}


def _nvml_handle(device: int):
    """(pynvml, handle) of CUDA device `device` (torch's own mapping, which honours
    CUDA_VISIBLE_DEVICES, where it has one), or None: no pynvml, no driver, no permission."""
    if device not in _NVML:
        try:
            import pynvml
            import torch

            get = getattr(torch.cuda, "_get_pynvml_handler", None)
            if get is not None:
                handle = get(device)
            else:
                pynvml.nvmlInit()
                handle = pynvml.nvmlDeviceGetHandleByIndex(device)
            _NVML[device] = (pynvml, handle)
        except Exception:  # noqa: BLE001 - any failure means: no clock readings
            _NVML[device] = None
    return _NVML[device]


def _nvml_clock(device: int, query: str) -> int | None:
    """The SM clock by NVML's `query` (nvmlDeviceGetClockInfo, nvmlDeviceGetMaxClockInfo), or None."""
    h = _nvml_handle(device)
    if h is None:
        return None
    nv, handle = h
    try:
        return int(getattr(nv, query)(handle, nv.NVML_CLOCK_SM))
    except Exception:  # noqa: BLE001
        return None


def sm_clock_MHz(device: int = 0) -> int | None:
    """The SM clock now (NVML), or None where it cannot be read."""
    return _nvml_clock(device, "nvmlDeviceGetClockInfo")


def max_sm_clock_MHz(device: int = 0) -> int | None:
    """The SM clock's maximum (NVML), or None where it cannot be read."""
    return _nvml_clock(device, "nvmlDeviceGetMaxClockInfo")


def clock_under_load(device: int = 0, wait_ms: float = 10.0) -> int | None:
    """The SM clock read while the GPU works (64 queued 4096^2 bf16 matmuls, about 13 ms on an
    H200): an idle GPU parks its clock (345 MHz on an H200) and raises it at once under load,
    so an idle reading says nothing about throttling. None where the clock cannot be read."""
    if sm_clock_MHz(device) is None:
        return None
    import torch

    try:
        a = torch.ones((4096, 4096), device=f"cuda:{device}", dtype=torch.bfloat16)
        for _ in range(64):
            a @ a
    except RuntimeError:  # e.g. out of memory: an idle reading is all there is
        return sm_clock_MHz(device)
    time.sleep(wait_ms / 1e3)
    mhz = sm_clock_MHz(device)
    torch.cuda.synchronize(device)
    return mhz


@dataclass
class ClockSettle:
    clock_MHz: int | None  # the SM clock when the wait ended (None: unreadable)
    waited_s: float
    settled: bool  # reached frac x the maximum (True also when the clock cannot be read)


def settle_clock(frac: float = 0.95, max_wait_s: float = 10.0, poll_s: float = 0.25, *, device: int = 0,
                 clock: Callable[[], int | None] | None = None, peak: int | None = None,
                 sleep: Callable[[float], None] = time.sleep) -> ClockSettle:
    """Wait (idle between readings) until the SM clock under load (`clock_under_load`) is at
    least frac x its maximum, at most max_wait_s; see the module docstring. Returns at once
    where the clock or its maximum cannot be read."""
    clock = clock or (lambda: clock_under_load(device))
    peak = peak if peak is not None else max_sm_clock_MHz(device)
    now = clock()
    if now is None or not peak:
        return ClockSettle(now, 0.0, True)
    waited = 0.0
    while now < frac * peak and waited < max_wait_s:
        sleep(poll_s)
        waited += poll_s
        now = clock()
        if now is None:
            return ClockSettle(None, waited, True)
    return ClockSettle(now, waited, now >= frac * peak)


def time_fn(
    fn: Callable[..., Any],
    *,
    args_list: Sequence[tuple] | None = None,
    cold_l2: ColdL2 = "flush",
    graph: bool = False,
    calls_per_graph: int = 10,
    warmup: int = 3,
    min_samples: int = 5,
    max_samples: int = 50,
    max_seconds: float = 0.25,
    batch: int = 10,
) -> Timing:
    """Time `fn(*args)` on the current CUDA stream; see the module docstring.

    Sampling stops after `max_samples` or once `max_seconds` of wall time have passed with at
    least `min_samples` taken (checked every `batch` samples). For collectives every rank
    must take the same number of samples: pass max_seconds=math.inf.
    """
    import torch

    if cold_l2 == "rotate" and not args_list:
        raise ValueError("cold_l2='rotate' needs args_list (copies of the inputs)")
    args_list = list(args_list) if args_list else [()]
    n_args = len(args_list)
    flush = cold_l2 == "flush"
    if flush:
        _flush_buffer()

    # Warm-up (also triggers Triton compilation and cuBLAS heuristics) on a side stream, as
    # graph capture requires, then join.
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for i in range(max(1, warmup)):
            fn(*args_list[i % n_args])
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()

    calls = 1
    if graph:
        calls = max(1, calls_per_graph)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for j in range(calls):
                fn(*args_list[j % n_args])
        g.replay()
        torch.cuda.synchronize()
        run = lambda i: g.replay()  # noqa: E731
    else:
        run = lambda i: fn(*args_list[i % n_args])  # noqa: E731

    times: list[float] = []
    t_start = time.perf_counter()
    i = 0
    while len(times) < max_samples:
        n = min(batch, max_samples - len(times))
        evs = []
        for _ in range(n):
            if flush:
                flush_l2(i)
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            run(i)
            e.record()
            evs.append((s, e))
            i += 1
        torch.cuda.synchronize()
        times.extend(s.elapsed_time(e) / calls for s, e in evs)
        if len(times) >= min_samples and time.perf_counter() - t_start > max_seconds:
            break
    if graph:
        del g
    t = summarize(times, "graph" if graph else "eager", calls, cold_l2)
    mhz = sm_clock_MHz(torch.cuda.current_device())
    if mhz is not None:
        t.extra["sm_clock_MHz"] = mhz
    return t


def host_time(fn: Callable[[], Any], *, repeats: int = 5, min_seconds: float = 0.0, max_seconds: float = 1.0) -> Timing:
    """Host wall time of `fn()` (which must itself synchronize if it wants GPU time counted)."""
    fn()
    times: list[float] = []
    t_start = time.perf_counter()
    while True:
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e3)
        el = time.perf_counter() - t_start
        if len(times) >= repeats and el >= min_seconds:
            break
        if el > max_seconds and len(times) >= 2:
            break
    return summarize(times, "host", 1, "none")
