"""Least-squares fits of the profile's laws, on RELATIVE residuals (so a 5 us point and a
5 ms point weigh the same), with the residuals kept as the projection's error bars.

  kernel class  t_us = t0_us + max(bytes / (bw_GBps * 1e3), flops / (tflops * 1e6))
                (a kernel that walks each sequence's prefix on one CTA also has the term
                 wave_bytes / (unit_GBps * 1e3), `fit_unit_law`)
  collective    t_us = latency_us + bytes_per_gpu / (bw_GBps * 1e3)
  tree build    t_us = t0_us + per_node_us * C * B

Parameters are fitted in log space (so they stay positive) with scipy.optimize.least_squares.
A roof that no point reaches cannot be identified from the data: then it is set to
max(the given default, the highest rate any point achieved) and the source says so.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy.optimize import least_squares

from perfmodel.profile import CollectiveFit, KernelFit, TreeBuildFit


def kernel_law(t0_us: float, bw_GBps: float, tflops: float, nbytes, nflops):
    nbytes = np.asarray(nbytes, float)
    nflops = np.asarray(nflops, float)
    return t0_us + np.maximum(nbytes / (bw_GBps * 1e3), nflops / (tflops * 1e6))


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
    b = np.asarray(nbytes, float)
    f = np.asarray([0.0 if x is None else x for x in nflops], float)
    t = np.asarray(t_us, float)
    ok = np.isfinite(b) & np.isfinite(f) & np.isfinite(t) & (t > 0)
    b, f, t = b[ok], f[ok], t[ok]
    if len(t) < 2:
        raise ValueError(f"fit_kernel_law({bench}): need >= 2 points, got {len(t)}")
    has_flops = bool(np.any(f > 0))

    # Initial guesses from the data: t0 near the smallest time, roofs from the largest points.
    t0_guess = max(float(np.min(t)) * 0.5, 1e-3)
    dt = np.maximum(t - t0_guess, 1e-3)
    bw_guess = float(np.max(b / (dt * 1e3))) if np.any(b > 0) else 1e3
    fl_guess = float(np.max(f / (dt * 1e6))) if has_flops else 1e3

    def resid(p):
        t0, bw, fl = np.exp(p)
        return _rel(kernel_law(t0, bw, fl, b, f), t)

    best = None
    for t0s in (t0_guess, t0_guess * 0.2, float(np.min(t)) * 0.9):
        for scale in (1.0, 0.5):
            p0 = np.log([max(t0s, 1e-4), max(bw_guess * scale, 1e-3), max(fl_guess * scale, 1e-3)])
            r = least_squares(resid, p0, method="trf", x_scale=1.0, max_nfev=2000)
            if best is None or r.cost < best.cost:
                best = r
    t0, bw, fl = (float(x) for x in np.exp(best.x))
    notes = []

    # Identifiability: which roof binds at the fitted parameters?
    mem_t = b / (bw * 1e3)
    cmp_t = f / (fl * 1e6)
    if not np.any(cmp_t > mem_t):
        # over the whole time: (t - t0) of a floor-bound point is ~0 and made this unbounded
        achieved = float(np.max(f / (t * 1e6))) if has_flops else 0.0
        fl = max(default_tflops or 0.0, achieved, 1e-3) if (default_tflops or achieved) else fl
        notes.append("tflops not reached by any point: set to max(measured GEMM ceiling, achieved)")
    if not np.any(mem_t >= cmp_t) and np.any(b > 0):
        achieved = float(np.max(b / (t * 1e3)))
        bw = max(default_bw_GBps or 0.0, achieved)
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
    b = np.asarray(nbytes, float)
    f = np.asarray([0.0 if x is None else x for x in nflops], float)
    w = np.asarray(wave_bytes, float)
    t = np.asarray(t_us, float)

    def model(p):
        t0, bw, fl, u = np.exp(p)
        return np.maximum(kernel_law(t0, bw, fl, b, f), t0 + w / (u * 1e3))

    u0 = float(np.max(w / (t * 1e3)))
    best = None
    for scale in (1.0, 0.5, 2.0):
        p0 = np.log([max(base.t0_us, 1e-4), base.bw_GBps, base.tflops, max(u0 * scale, 1e-3)])
        r = least_squares(lambda p: _rel(model(p), t), p0, method="trf", max_nfev=4000)
        if best is None or r.cost < best.cost:
            best = r
    t0, bw, fl, u = (float(x) for x in np.exp(best.x))
    res = _rel(model(best.x), t)
    binds = np.any(w / (u * 1e3) > kernel_law(0.0, bw, fl, b, f))
    if not binds or float(np.sqrt(np.mean(res**2))) >= base.rmse_rel:
        return base
    return base.model_copy(update=dict(t0_us=t0, bw_GBps=bw, tflops=fl, unit_GBps=u, **_residual_fields(res)))


def _fit_affine(x: np.ndarray, t: np.ndarray) -> tuple[float, float, np.ndarray]:
    """t = a + s*x with a >= 0, s > 0, on relative residuals. Returns (a, s, residuals)."""
    a0 = max(float(np.min(t)) * 0.5, 1e-6)
    s0 = max(float(np.max((t - a0) / np.maximum(x, 1e-30))), 1e-12)

    def resid(p):
        a, s = np.exp(p)
        return _rel(a + s * x, t)

    best = None
    for a_try in (a0, float(np.min(t)) * 0.95, a0 * 0.1):
        r = least_squares(resid, np.log([max(a_try, 1e-9), s0]), method="trf", max_nfev=2000)
        if best is None or r.cost < best.cost:
            best = r
    a, s = (float(v) for v in np.exp(best.x))
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
    return CollectiveFit(
        op=op,
        n_gpus=n_gpus,
        graph=graph,
        latency_us=lat,
        bw_GBps=1.0 / (s * 1e3),
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
