"""Measured-sample lookup: price an op from the profile's own samples where they cover it.

A fitted law smooths a kernel's behaviour (residuals of 10-20% per point are common for
attention and MoE kernels whose efficiency depends on tiling). Where the profile holds samples
of the very same kernel and shape, the op is priced from them instead (interpolated in
log-log along one or two swept dimensions, like aiconfigurator's collected tables). This is
done on the profile's own GPU only: another GPU is priced by the transferred laws
(`machine.py`), because a sample carried by the law ratio moves with the op's boundness on
each GPU and would make a larger step cheaper than a smaller one. Outside the measured range
(below the smallest or above the largest sampled value of either swept field) the nearest
sampled point (`SampleTable.anchor`) is carried by the law's ratio, sample x law(op) /
law(op at that point), never below the sample for a larger op nor above it for a smaller one,
so the price is continuous and monotone at the edge (`step._from_anchor`); a switch to the law
alone there jumped by the law's error (a decode step at 1024 tokens of context cheaper than at
900 on the H200).
Along the swept dimension a curve is made non-decreasing (each point is the running
maximum of the samples up to it): a kernel given more work never takes less time, so a
noisy dip between two samples does not make a larger step cheaper than a smaller one.
Pure python: no torch, no scipy.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, replace

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
    # Optional second swept field (e.g. the concurrency C of an attention sample): between two
    # sampled values the two curves are interpolated in log-log; above the largest, that
    # curve's time is a lower bound (more sequences never take less time: `edge`).
    y_name: str | None = None
    y: float = 0.0
    # bytes per call per unit of the swept field (attention: the cache read per context position),
    # for pricing the same call at another value of it (`layers.at_probe_x`); 0 where the op's
    # own builder rule does
    x_bytes: float = 0.0


def _loglog(x: float, x0: float, x1: float, t0: float, t1: float) -> float:
    w = (math.log(x) - math.log(x0)) / (math.log(x1) - math.log(x0))
    return math.exp(math.log(t0) + w * (math.log(t1) - math.log(t0)))


class SampleTable:
    """`providers` (bench -> provider) is a kernel set's (profile.KERNEL_SETS): a probe of such a
    bench is priced from that provider's samples wherever the provider timed the probe's
    shape family, and from the probe's own provider where it did not (a class the set does
    not re-measure)."""

    def __init__(self, profile: Profile, providers: dict[str, str] | None = None):
        self._samples: dict[tuple, float] = {}  # (bench, provider, shape items) -> median µs
        self._curves: dict[tuple, list[tuple[float, float]]] = {}  # per probe: sorted (x, µs)
        self._providers = providers or {}
        self._yss: dict[tuple, list[float]] = {}  # per probe family: the sampled values of its second field
        self._families: dict[tuple, bool] = {}  # (bench, provider, shape family) -> timed by that provider
        for bench, res in profile.benches.items():
            if res.status != "ok":
                continue
            for s in res.samples:
                self._samples[(bench, s.provider, tuple(sorted(s.shape.items())))] = s.median_ms * 1e3

    def _in_set(self, probe: Probe) -> Probe:
        alt = self._providers.get(probe.bench)
        if alt is None or alt == probe.provider:
            return probe
        # the shape family: the probe's fixed fields but the verify width, which the set's
        # grid sweeps on its own values (a width it did not time falls to the law, not to
        # another provider's samples)
        family = (probe.bench, alt, tuple(kv for kv in probe.match if kv[0] != "q"))
        timed = self._families.get(family)
        if timed is None:
            want = dict(family[2])
            timed = self._families[family] = any(
                bench == probe.bench and provider == alt and all(dict(shape).get(k) == v for k, v in want.items())
                for (bench, provider, shape) in self._samples)
        return replace(probe, provider=alt) if timed else probe

    def lookup(self, probe: Probe | None) -> float | None:
        """Measured µs per call, or None when the samples do not bracket the op."""
        if probe is None:
            return None
        probe = self._in_set(probe)
        if probe.y_name is None:
            return self._on_curve(probe)
        ys = self._ys(probe)
        if not ys or probe.y < ys[0] or probe.y > ys[-1]:
            return None
        i = bisect.bisect_left(ys, probe.y)
        if ys[i] == probe.y:
            return self._on_curve(self._at_y(probe, ys[i]))
        t0, t1 = self._on_curve(self._at_y(probe, ys[i - 1])), self._on_curve(self._at_y(probe, ys[i]))
        if t0 is None or t1 is None:
            return None
        return _loglog(probe.y, ys[i - 1], ys[i], t0, max(t0, t1))

    def edge(self, probe: Probe | None) -> tuple[float, float] | None:
        """For a probe whose second field lies above every sampled value: that field's largest
        sampled value and the time there (a lower bound: the op does at least that work), else
        None."""
        if probe is None or probe.y_name is None:
            return None
        probe = self._in_set(probe)
        ys = self._ys(probe)
        if not ys or probe.y <= ys[-1]:
            return None
        t = self._on_curve(self._at_y(probe, ys[-1]))
        return None if t is None else (ys[-1], t)

    def x_edge(self, probe: Probe | None) -> tuple[float, float] | None:
        """For a probe of one swept field whose value lies above every sampled value: the largest
        sampled value and the time there (a lower bound: the op does at least that work), else None."""
        if probe is None or probe.y_name is not None:
            return None
        probe = self._in_set(probe)
        pts = self._points(probe)
        if not pts or probe.x <= pts[-1][0]:
            return None
        return pts[-1]

    def _on_curve(self, probe: Probe) -> float | None:
        pts = self._points(probe)
        if not pts:
            return None
        xs = [p[0] for p in pts]
        if probe.x < xs[0] or probe.x > xs[-1]:
            return None
        i = bisect.bisect_left(xs, probe.x)
        if xs[i] == probe.x:
            return pts[i][1]
        return _loglog(probe.x, pts[i - 1][0], pts[i][0], pts[i - 1][1], pts[i][1])

    @staticmethod
    def _at_y(probe: Probe, y: float) -> Probe:
        return Probe(probe.bench, probe.match + ((probe.y_name, y),), probe.x_name, probe.x, probe.provider)

    def anchor(self, probe: Probe | None) -> tuple[float, float | None, float] | None:
        """For a probe outside the sampled range (its swept field below the smallest or above the
        largest sampled value, or its second field so): the nearest point the samples do cover,
        as (x, y, time there), each field clamped into its sampled range (y None for a probe of
        one field); None where the probe is covered (`lookup`) or no samples of its shape exist.
        The step prices such an op by that sample carried by its law's ratio (`step._from_anchor`),
        so the price is continuous where the samples end."""
        if probe is None:
            return None
        probe = self._in_set(probe)
        y = None
        if probe.y_name is not None:
            ys = self._ys(probe)
            if not ys:
                return None
            y = min(max(probe.y, ys[0]), ys[-1])
            i = bisect.bisect_left(ys, y)
            rows = [ys[i]] if ys[i] == y else [ys[i - 1], ys[i]]
            curves = [self._points(self._at_y(probe, v)) for v in rows]
        else:
            curves = [self._points(probe)]
        if not all(curves):
            return None
        lo, hi = max(c[0][0] for c in curves), min(c[-1][0] for c in curves)
        if lo > hi:
            return None
        x = min(max(probe.x, lo), hi)
        if x == probe.x and (y is None or y == probe.y):
            return None
        t = self.lookup(replace(probe, x=x, y=probe.y if y is None else y))
        return None if t is None else (x, y, t)

    def _ys(self, probe: Probe) -> list[float]:
        key = (probe.bench, probe.provider, probe.match, probe.x_name, probe.y_name)
        if key not in self._yss:
            self._yss[key] = self._scan_ys(probe)
        return self._yss[key]

    def _scan_ys(self, probe: Probe) -> list[float]:
        want = dict(probe.match)
        ys = set()
        for (bench, provider, shape) in self._samples:
            if bench != probe.bench or (probe.provider and provider != probe.provider):
                continue
            sh = dict(shape)
            if probe.y_name in sh and probe.x_name in sh and all(sh.get(k) == v for k, v in want.items()) \
                    and not set(sh) - set(want) - {probe.x_name, probe.y_name} - LABELS:
                ys.add(float(sh[probe.y_name]))
        return sorted(ys)

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
        run = 0.0
        for i, (x, t) in enumerate(pts):
            run = max(run, t)
            pts[i] = (x, run)
        self._curves[cache_key] = pts
        return pts
