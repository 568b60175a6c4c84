"""Measured-sample lookup: price an op from the profile's own samples where they cover it.

A fitted law smooths a kernel's behaviour (residuals of 10-20% per point are common for
attention and MoE kernels whose efficiency depends on tiling). Where the profile holds samples
of the very same kernel and shape, the op is priced from them instead (interpolated in
log-log along one swept dimension, like aiconfigurator's collected tables), and carried to
another GPU by the ratio of the fitted laws there and here:

    t_target = t_sample(source) × law_target(op) / law_source(op)

so the transfer rules stay those of `machine.py`. Outside the measured range the law alone
is used. Pure python: no torch, no scipy.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

from perfmodel.profile import Profile

LABELS = {"shape", "name"}  # sample labels, not shape fields


@dataclass(frozen=True)
class Probe:
    """Which samples describe an op: the bench, exact-match shape fields, the swept field
    and its value for this op."""

    bench: str
    match: tuple[tuple[str, object], ...]
    x_name: str
    x: float
    provider: str | None = None


class SampleTable:
    def __init__(self, profile: Profile):
        self._samples: dict[tuple, float] = {}  # (bench, provider, shape items) -> median µs
        self._curves: dict[tuple, list[tuple[float, float]]] = {}  # per probe: sorted (x, µs)
        for bench, res in profile.benches.items():
            if res.status != "ok":
                continue
            for s in res.samples:
                self._samples[(bench, s.provider, tuple(sorted(s.shape.items())))] = s.median_ms * 1e3

    def lookup(self, probe: Probe | None) -> float | None:
        """Measured µs per call, or None when the samples do not bracket the op."""
        if probe is None:
            return None
        pts = self._points(probe)
        if not pts:
            return None
        xs = [p[0] for p in pts]
        if probe.x < xs[0] or probe.x > xs[-1]:
            return None
        i = bisect.bisect_left(xs, probe.x)
        if xs[i] == probe.x:
            return pts[i][1]
        (x0, t0), (x1, t1) = pts[i - 1], pts[i]
        w = (math.log(probe.x) - math.log(x0)) / (math.log(x1) - math.log(x0))
        return math.exp(math.log(t0) + w * (math.log(t1) - math.log(t0)))

    def _points(self, probe: Probe) -> list[tuple[float, float]]:
        cache_key = (probe.bench, probe.provider, probe.match, probe.x_name)
        cached = self._curves.get(cache_key)
        if cached is not None:
            return cached
        want = dict(probe.match)
        pts = []
        for (bench, provider, shape), t_us in self._samples.items():
            if bench != probe.bench or (probe.provider and provider != probe.provider):
                continue
            sh = dict(shape)
            if probe.x_name not in sh or any(sh.get(k) != v for k, v in want.items()):
                continue
            if set(sh) - set(want) - {probe.x_name} - LABELS:
                continue  # the sample varies in a field the probe does not pin
            pts.append((float(sh[probe.x_name]), t_us))
        pts.sort()
        self._curves[cache_key] = pts
        return pts
