"""Least-squares fits of the profile's laws, on RELATIVE residuals (so a 5 us point and a
5 ms point weigh the same), with the residuals kept as the projection's error bars.

  kernel class  t_us = t0_us + max(bytes / (bw_GBps * 1e3), flops / (tflops * 1e6))
                (a kernel that walks each sequence's prefix on one CTA also has the term
                 wave_bytes / (unit_GBps * 1e3), `fit_unit_law`)
  collective    t_us = latency_us + bytes_per_gpu / (bw_GBps * 1e3)
  tree build    t_us = t0_us + per_node_us * C * B

The kernel-class, collective and tree-build laws are fitted exactly: on relative residuals
each is linear least squares with parameters >= 0 (per split of the points by arithmetic
intensity for the kernel class, `_roofline_fit`), solved by scipy.optimize.lsq_linear (BVLS),
with no start point to guess. The per-unit term is polished with scipy.optimize.least_squares
(rates in log space, so they stay positive). A roof that no point reaches cannot be identified
from the data: then it is set to max(the given default, the highest rate any point achieved)
and the source says so.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy.optimize import least_squares, lsq_linear

from perfmodel.profile import CollectiveFit, KernelFit, TreeBuildFit

B_PER_US_AT_1_GBPS = 1e3  # 1 GB/s moves 1e9 B/s = 1e3 B per us
FLOP_PER_US_AT_1_TFLOPS = 1e6  # 1 TFLOPS is 1e12 FLOP/s = 1e6 FLOP per us
UNMEASURED_ROOF = 1e3  # GB/s or TFLOPS of a roof that no point reaches, with no measured ceiling given and no rate achieved


def kernel_law(t0_us: float, bw_GBps: float, tflops: float, nbytes, nflops):
    nbytes = np.asarray(nbytes, float)
    nflops = np.asarray(nflops, float)
    return t0_us + np.maximum(nbytes / (bw_GBps * B_PER_US_AT_1_GBPS), nflops / (tflops * FLOP_PER_US_AT_1_TFLOPS))


def _rel(pred, t):
    return (pred - t) / t


def _residual_fields(res: np.ndarray) -> dict:
    """The residual fields every fit record carries: points, relative residuals, their rms."""
    return dict(n_points=int(len(res)), residuals_rel=[float(r) for r in res],
                rmse_rel=float(math.sqrt(np.mean(res**2))))


def launcher_of(samples) -> str:
    """"triton" when every sample's provider is a Triton kernel, else "torch" (the eager
    launch cost the model charges per kernel of the law's class)."""
    return "triton" if samples and all(s.provider.startswith("triton") for s in samples) else "torch"


def _points(nbytes, nflops, t_us, *more) -> tuple[np.ndarray, ...]:
    """The points as arrays (FLOPs None -> 0), keeping those with finite values and t > 0."""
    cols = [np.asarray(nbytes, float), np.asarray([0.0 if x is None else x for x in nflops], float),
            np.asarray(t_us, float), *(np.asarray(m, float) for m in more)]
    ok = np.logical_and.reduce([np.isfinite(c) for c in cols]) & (cols[2] > 0)
    return tuple(c[ok] for c in cols)


def _nonneg_lsq(cols: list[np.ndarray], t: np.ndarray) -> np.ndarray:
    """The p >= 0 that minimises sum(((cols @ p) - t) / t)^2: linear least squares on relative
    residuals, solved exactly within its bounds (scipy.optimize.lsq_linear, BVLS), each column
    scaled to unit norm first (bytes and FLOPs differ by orders of magnitude)."""
    a = np.column_stack(cols) / t[:, None]
    norm = np.linalg.norm(a, axis=0)
    # a column of zeros (no FLOPs): BVLS leaves its parameter at its bound, 0
    norm[norm == 0] = 1.0
    return lsq_linear(a / norm, np.ones_like(t), bounds=(0.0, np.inf), method="bvls").x / norm


TIE_REL = 1e-9  # relative difference in the fit's cost (or relative residual, for exact fits) below which
# two laws price the points alike


def _roofline_fit(b: np.ndarray, f: np.ndarray, t: np.ndarray) -> tuple[float, float, float]:
    """(t0, u, v) >= 0 minimising the relative residuals of t0 + max(b * u, f * v), where u is
    us per byte and v us per FLOP, exactly (no start point, no iterations).

    Sort the points by arithmetic intensity f/b. Any (u, v) makes the points below the ridge
    u/v memory-bound and the rest compute-bound, and on each such split the law is linear, so
    its cost is a convex quadratic there. The optimum is therefore either the exact linear
    fit of its split (when that fit keeps the split) or on the split's edge, where the ridge
    sits at a point's intensity rho (u = rho * v, again linear). Every split's fit and every
    edge's fit is computed, and the one the law prices best is kept."""
    with np.errstate(divide="ignore", invalid="ignore"):
        intensity = f / b  # inf for a point that moves no bytes (nan if it does nothing): sorted last
    order = np.argsort(intensity, kind="stable")
    one = np.ones_like(t)
    cands = []
    for k in range(len(t) + 1):
        mem = np.zeros(len(t), bool)
        mem[order[:k]] = True
        cands.append(_nonneg_lsq([one, np.where(mem, b, 0.0), np.where(mem, 0.0, f)], t))
    for rho in intensity[np.isfinite(intensity)]:
        t0, v = _nonneg_lsq([one, np.maximum(b * rho, f)], t)
        cands.append(np.array([t0, rho * v, v]))
    cost = [float(np.sum(_rel(p[0] + np.maximum(b * p[1], f * p[2]), t) ** 2)) for p in cands]
    # Ties (points all at one intensity price a memory and a compute roof alike): the law with
    # the most points strictly memory-bound, so that an unidentifiable split does not hang on rounding
    # and a decode-size op that no point shows compute-bound stays memory-bound.
    low = min(cost) * (1.0 + TIE_REL) + len(t) * TIE_REL ** 2  # an exact fit's cost is rounding (~1e-30)
    best = max((p for p, c in zip(cands, cost) if c <= low),
               key=lambda p: int(np.sum(b * p[1] > f * p[2] * (1.0 + 1e-6))))  # a roof on a point is a tie
    return float(best[0]), float(best[1]), float(best[2])


def fit_kernel_law(
    nbytes: Sequence[float],
    nflops: Sequence[float | None],
    t_us: Sequence[float],
    *,
    bench: str = "",
    source: str = "",
    default_bw_GBps: float | None = None,
    default_tflops: float | None = None,
    launcher: str = "torch",
) -> KernelFit:
    b, f, t = _points(nbytes, nflops, t_us)
    if len(t) < 2:
        raise ValueError(f"fit_kernel_law({bench}): need >= 2 points, got {len(t)}")
    t0, u, v = _roofline_fit(b, f, t)
    notes = []

    # Identifiability: a roof that binds at no point is not fitted but set (module docstring).
    mem_t, cmp_t = b * u, f * v
    if np.any(cmp_t > mem_t):
        fl = 1.0 / (v * FLOP_PER_US_AT_1_TFLOPS)
    else:
        # over the whole time: (t - t0) of a floor-bound point is ~0 and made this unbounded
        achieved = float(np.max(f / (t * FLOP_PER_US_AT_1_TFLOPS)))
        fl = max(default_tflops or 0.0, achieved) or UNMEASURED_ROOF
        notes.append("tflops not reached by any point: set to max(measured GEMM ceiling, achieved)")
    if u > 0 and np.any(mem_t >= cmp_t):
        bw = 1.0 / (u * B_PER_US_AT_1_GBPS)
    else:
        achieved = float(np.max(b / (t * B_PER_US_AT_1_GBPS)))
        bw = max(default_bw_GBps or 0.0, achieved) or UNMEASURED_ROOF
        notes.append("bw not reached by any point: set to max(measured read bandwidth, achieved)")

    res = _rel(kernel_law(t0, bw, fl, b, f), t)
    src = source + (("; " + "; ".join(notes)) if notes else "")
    return KernelFit(
        t0_us=t0,
        bw_GBps=bw,
        tflops=fl,
        **_residual_fields(res),
        bench=bench,
        launcher=launcher,
        bytes_range=(float(np.min(b)), float(np.max(b))),
        source=src,
    )


def fit_unit_law(nbytes: Sequence[float], nflops: Sequence[float | None], wave_bytes: Sequence[float],
                 t_us: Sequence[float], **kw) -> KernelFit:
    """The kernel-class law plus a per-work-unit streaming rate (KernelFit.unit_GBps):
    t = t0 + max(bytes / bw, flops / F, wave_bytes / unit_GBps), where wave_bytes is what one
    work unit reads times the waves of units (profile.wave_bytes). Starts from the plain law;
    the unit rate is kept only where it binds at some point and improves the fit."""
    base = fit_kernel_law(nbytes, nflops, t_us, **kw)
    b, f, t, w = _points(nbytes, nflops, t_us, wave_bytes)

    ub = 1.0 / (base.bw_GBps * B_PER_US_AT_1_GBPS)  # us per byte
    vb = 1.0 / (base.tflops * FLOP_PER_US_AT_1_TFLOPS)  # us per FLOP

    def model(p):  # p = (t0, ln u, ln v, ln z): the rates stay positive
        u, v, z = np.exp(p[1:])
        return p[0] + np.maximum(np.maximum(b * u, f * v), w * z)

    # starts: the plain law, with the unit term through each point in turn
    best = None
    for z0 in (t - base.t0_us)[w > 0] / w[w > 0]:
        if z0 > 0:
            r = least_squares(lambda p: _rel(model(p), t), [base.t0_us, *np.log([ub, vb, z0])],
                              bounds=([0.0, -np.inf, -np.inf, -np.inf], np.inf))
            if best is None or r.cost < best.cost:
                best = r
    if best is None:
        return base
    t0, u, v, z = best.x[0], *(float(x) for x in np.exp(best.x[1:]))
    fields = _residual_fields(_rel(model(best.x), t))
    binds = np.any(w * z > np.maximum(b * u, f * v))
    if not binds or fields["rmse_rel"] >= base.rmse_rel:
        return base
    return base.model_copy(update=dict(t0_us=t0, bw_GBps=1.0 / (u * B_PER_US_AT_1_GBPS), tflops=1.0 / (v * FLOP_PER_US_AT_1_TFLOPS),
                                       unit_GBps=1.0 / (z * B_PER_US_AT_1_GBPS), **fields))


def _fit_affine(x: np.ndarray, t: np.ndarray) -> tuple[float, float, np.ndarray]:
    """t = a + s*x with a >= 0, s >= 0, on relative residuals. Returns (a, s, residuals).

    On relative residuals it is linear least squares in (a, s), solved exactly within its
    bounds (`_nonneg_lsq`): no start point, no iterations."""
    a, s = (float(v) for v in _nonneg_lsq([np.ones_like(t), x], t))
    return a, s, _rel(a + s * x, t)


def fit_collective_law(
    bytes_per_gpu: Sequence[float],
    t_us: Sequence[float],
    *,
    op: str,
    n_gpus: int,
    graph: bool,
    link: str = "",
    source: str = "",
) -> CollectiveFit:
    x = np.asarray(bytes_per_gpu, float)
    t = np.asarray(t_us, float)
    if len(t) < 2:
        raise ValueError(f"fit_collective_law({op}): need >= 2 points")
    lat, s, res = _fit_affine(x, t)
    if s <= 0:
        raise ValueError(f"fit_collective_law({op}): the times do not grow with the bytes, so no bandwidth can be fitted")
    return CollectiveFit(
        op=op,
        n_gpus=n_gpus,
        graph=graph,
        latency_us=lat,
        bw_GBps=1.0 / (s * B_PER_US_AT_1_GBPS),
        **_residual_fields(res),
        link=link,
        source=source,
    )


def fit_treebuild_law(C: Sequence[int], B: Sequence[int], t_us: Sequence[float], *, impl: str, source: str = "") -> TreeBuildFit:
    x = np.asarray(C, float) * np.asarray(B, float)
    t = np.asarray(t_us, float)
    if len(t) < 2:
        raise ValueError(f"fit_treebuild_law({impl}): need >= 2 points")
    t0, per_node, res = _fit_affine(x, t)
    return TreeBuildFit(
        impl=impl,
        t0_us=t0,
        per_node_us=per_node,
        **_residual_fields(res),
        source=source,
    )
