"""measure/fits.py: every fitting path recovers a known law from noisy synthetic samples, and
the residuals it keeps are the relative errors of that law, worked out here."""

import math

import numpy as np
import pytest

pytest.importorskip("scipy")

from perfmodel.measure.fits import fit_collective_law, fit_kernel_law, fit_treebuild_law, fit_unit_law, kernel_law


def test_kernel_law_by_hand():
    # 10 us + max(3e6 B / 1500 GB/s = 2 us, 1e9 FLOP / 200 TF = 5 us) = 15 us
    # (to the float's precision: 1 GB/s is exactly 1e3 B/us, 1 TFLOPS exactly 1e6 FLOP/us)
    assert kernel_law(10.0, 1500.0, 200.0, [3e6], [1e9])[0] == pytest.approx(15.0, rel=1e-12)
    assert kernel_law(10.0, 1500.0, 200.0, [3e7], [1e9])[0] == pytest.approx(30.0, rel=1e-12)


def test_compute_only_points_set_bw_to_the_best_achieved_or_default():
    """Every point compute-bound: the bandwidth roof is not identifiable, so it is set to
    max(default, highest achieved bytes / time) and the source says so."""
    f = np.geomspace(1e9, 1e12, 10)
    b = np.full_like(f, 1.0)  # a byte per point: every point compute-bound
    # noise-free: with scatter the optimiser may park the unidentifiable roof where it just
    # touches one point, which is the other branch (the roof then counts as reached)
    t = kernel_law(5.0, 1e9, 400.0, b, f)
    fit = fit_kernel_law(b, f, t, default_bw_GBps=4000.0)
    assert fit.tflops == pytest.approx(400.0, rel=1e-3)
    assert fit.t0_us == pytest.approx(5.0, rel=1e-3)
    assert fit.bw_GBps == pytest.approx(4000.0)
    assert "bw not reached" in fit.source
    achieved = float(np.max(b / (t * 1e3)))
    assert fit_kernel_law(b, f, t).bw_GBps == pytest.approx(achieved)  # no default: the best achieved


def test_residuals_are_relative_and_rms():
    """A point 10% above the law and one 10% below: residuals -1/1.1 + 1 and +1/0.9 - 1 about the
    fitted law; relative residuals make a 5 us and a 5 ms point weigh the same."""
    b = np.array([1e3, 1e4, 1e5, 1e6, 1e7, 1e8])
    true = kernel_law(5.0, 2000.0, 1e9, b, np.zeros_like(b))
    noise = np.array([1.1, 0.9, 1.1, 0.9, 1.1, 0.9])
    fit = fit_kernel_law(b, [None] * 6, true * noise, default_tflops=500.0)
    pred = kernel_law(fit.t0_us, fit.bw_GBps, fit.tflops, b, np.zeros_like(b))
    res = (pred - true * noise) / (true * noise)
    assert fit.residuals_rel == pytest.approx(list(res), abs=1e-9)
    assert fit.rmse_rel == pytest.approx(math.sqrt(float(np.mean(res**2))))
    assert 0.05 < fit.rmse_rel < 0.11  # about the 10% scatter
    assert fit.bw_GBps == pytest.approx(2000.0, rel=0.1) and fit.t0_us == pytest.approx(5.0, rel=0.15)


def test_bad_points_are_dropped_and_too_few_raise():
    b = [1e6, 2e6, 4e6, float("nan"), 8e6]
    t = [10.0, 11.0, 13.0, 14.0, -1.0]
    fit = fit_kernel_law(b, [None] * 5, t, default_tflops=100.0)
    assert fit.n_points == 3
    with pytest.raises(ValueError, match="need >= 2 points"):
        fit_kernel_law([1e6, 2e6], [None, None], [10.0, 0.0], bench="x")
    with pytest.raises(ValueError, match="need >= 2 points"):
        fit_collective_law([1e3], [5.0], op="all_reduce", n_gpus=2, graph=True)
    with pytest.raises(ValueError, match="need >= 2 points"):
        fit_treebuild_law([1], [16], [40.0], impl="cpu")


@pytest.mark.parametrize("lat,bw", [(10.6, 269.0), (60.0, 361.0), (3.0, 800.0)])
def test_collective_fit_recovers_latency_and_algbw(lat, bw):
    rng = np.random.default_rng(int(lat))
    x = np.geomspace(1e3, 6.4e7, 16)
    t = (lat + x / (bw * 1e3)) * (1 + rng.normal(0, 0.03, x.size))
    f = fit_collective_law(x, t, op="all_to_all", n_gpus=4, graph=False, link="nvlink4", source="synthetic")
    assert f.latency_us == pytest.approx(lat, rel=0.08)
    assert f.bw_GBps == pytest.approx(bw, rel=0.08)
    assert (f.op, f.n_gpus, f.graph, f.link, f.source) == ("all_to_all", 4, False, "nvlink4", "synthetic")
    assert f.n_points == 16 and 0.01 < f.rmse_rel < 0.06


def test_treebuild_fit_with_noise():
    """CPU build ~159 us + 2.58 us per node (the embedded profile's fit), 20% scatter."""
    rng = np.random.default_rng(7)
    C = np.repeat([1, 4, 16, 64], 6)
    B = np.tile([8, 16, 32, 64, 128, 256], 4)
    t = (159.0 + 2.58 * C * B) * (1 + rng.normal(0, 0.05, C.size))
    f = fit_treebuild_law(C, B, t, impl="cpu", source="synthetic")
    assert f.per_node_us == pytest.approx(2.58, rel=0.05)
    assert f.t0_us == pytest.approx(159.0, rel=0.2)
    assert f.impl == "cpu" and f.n_points == 24


# Points on both sides of the ridge: arithmetic intensity from 1/20 to 20x the ridge point
# (flops/bytes = F/bw), in a fixed shuffled order, bytes from 10 kB to 1 GB.
_MIX = np.geomspace(0.05, 20, 10)[[3, 7, 0, 9, 1, 5, 8, 2, 6, 4]]


@pytest.mark.parametrize("t0, bw, tf", [
    (10.56, 4128.0, 19.4),  # a slow compute roof: the ridge at 4.7 FLOP/B
    (5.0, 3000.0, 400.0),  # H100-like streaming, a 133 FLOP/B ridge
    (2.0, 300.0, 50.0),  # a small GPU
    (30.0, 1000.0, 800.0),  # a high floor
    (1.2, 150.0, 12.0),
])
def test_kernel_law_recovers_both_roofs_and_the_floor(t0, bw, tf):
    """Noise-free points, half memory-bound and half compute-bound: the fit finds the law
    that made them (each parameter within 1%)."""
    b = np.geomspace(1e4, 1e9, 10)
    f = b * (tf * 1e6) / (bw * 1e3) * _MIX
    t = kernel_law(t0, bw, tf, b, f)
    fit = fit_kernel_law(b, f, t)
    assert (fit.t0_us, fit.bw_GBps, fit.tflops) == pytest.approx((t0, bw, tf), rel=0.01)
    assert fit.rmse_rel < 1e-3 and "not reached" not in fit.source


def test_kernel_law_recovery_with_scatter():
    """The same mix with 3% scatter: within 10%, over 5 seeds."""
    b = np.geomspace(1e4, 1e9, 20)
    mix = np.tile(_MIX, 2)
    for seed in range(5):
        rng = np.random.default_rng(seed)
        f = b * (400.0 * 1e6) / (3000.0 * 1e3) * mix
        t = kernel_law(5.0, 3000.0, 400.0, b, f) * (1 + rng.normal(0, 0.03, b.size))
        fit = fit_kernel_law(b, f, t)
        assert (fit.t0_us, fit.bw_GBps, fit.tflops) == pytest.approx((5.0, 3000.0, 400.0), rel=0.1), seed


def test_two_points_suffice():
    """Two points fix a line: t0 + bytes / bw through 12 and 102 us (1e6 and 1e8 B at 1100 GB/s
    and 11.09 us of floor), and the collective and tree-build lines through two points."""
    b = np.array([1e6, 1e8])
    t = 11.0909 + b / 1100e3
    fit = fit_kernel_law(b, [None, None], t, default_tflops=500.0)
    assert (fit.t0_us, fit.bw_GBps) == pytest.approx((11.0909, 1100.0), rel=1e-4) and fit.n_points == 2
    c = fit_collective_law([1e3, 1e7], [10.0 + 1e3 / 300e3, 10.0 + 1e7 / 300e3], op="all_reduce", n_gpus=2, graph=True)
    assert (c.latency_us, c.bw_GBps) == pytest.approx((10.0, 300.0), rel=1e-4)
    tb = fit_treebuild_law([1, 64], [8, 256], [50.0 + 0.02 * 8, 50.0 + 0.02 * 64 * 256], impl="gpu")
    assert (tb.t0_us, tb.per_node_us) == pytest.approx((50.0, 0.02), rel=1e-4)


def test_no_flops_and_no_default_leaves_the_compute_roof_out_of_reach():
    """Memory-only points and no measured GEMM ceiling: the compute roof cannot be identified,
    and it must not bind: pricing the points with the fitted law gives their own times."""
    b = np.geomspace(1e4, 1e9, 8)
    t = kernel_law(4.0, 2500.0, 1e9, b, np.zeros_like(b))
    fit = fit_kernel_law(b, [None] * 8, t)
    assert fit.tflops >= 100.0 and "tflops not reached" in fit.source
    assert (fit.t0_us, fit.bw_GBps) == pytest.approx((4.0, 2500.0), rel=0.01)
    # a GEMM-sized call (1e12 FLOP) would still be priced by some roof: finite, positive
    assert 0 < kernel_law(fit.t0_us, fit.bw_GBps, fit.tflops, [1e6], [1e12])[0] < 1e5


@pytest.mark.parametrize("lat, bw", [(104.1, 1 / 4.247e-5 / 1e3), (12.1, 1 / 1.5e-4 / 1e3), (0.5, 2000.0),
                                     (300.0, 50.0)])
def test_affine_fits_recover_latency_and_rate_noise_free(lat, bw):
    """Noise-free collective lines from 1 B to 100 MB: latency and bandwidth within 0.5%."""
    x = np.geomspace(1.0, 1e8, 6)
    c = fit_collective_law(x, lat + x / (bw * 1e3), op="all_reduce", n_gpus=8, graph=True)
    assert (c.latency_us, c.bw_GBps) == pytest.approx((lat, bw), rel=0.005)


@pytest.mark.parametrize("law, span, scatter, bw_identified", [
    ((5.8, 272.0, 721.0), (3.384, 7.6018), [0.0569, 0.0598, 0.0014, 0.0342, -0.0295, 0.0165, -0.0384, 0.0292,
                                            -0.0495, -0.0386, -0.0003, 0.0223, -0.0575, -0.0215, 0.0054, 0.0092], False),
    ((9.2, 382.5, 33.4), (3.1431, 7.6358), [0.0704, 0.0297, 0.0547, -0.0431, -0.0077, -0.0326, 0.0602, 0.0263,
                                            -0.0122, -0.0181, 0.0194, -0.0281, -0.0372, 0.0193, 0.0985, -0.0098], True),
])
def test_kernel_law_near_the_ridge_with_scatter(law, span, scatter, bw_identified):
    """16 points whose arithmetic intensity runs from 0.3x to 3x the ridge (so both roofs bind
    close to where they meet), with ~4% scatter (a fixed draw, written out). Least squares: the
    fit prices the points at least as well as the law that made them. The floor and the compute
    roof are recovered within 10%; so is the bandwidth in the second case. In the first, the
    scatter hides it: a law with ~500 GB/s fits these points better (rms 3.3%) than the true
    272 GB/s (rms 3.5%), so no least-squares fit can return 272."""
    t0, bw, tf = law
    b = np.geomspace(10 ** span[0], 10 ** span[1], 16)
    f = b * (tf * 1e6) / (bw * 1e3) * np.geomspace(0.3, 3, 16)
    t = kernel_law(t0, bw, tf, b, f) * (1 + np.array(scatter))
    fit = fit_kernel_law(b, f, t)
    true_rms = math.sqrt(float(np.mean((1 / (1 + np.array(scatter)) - 1) ** 2)))
    assert fit.rmse_rel <= true_rms
    assert (fit.t0_us, fit.tflops) == pytest.approx((t0, tf), rel=0.1)
    assert (fit.bw_GBps == pytest.approx(bw, rel=0.1)) == bw_identified


# ----------------------------------------------------------------------------- the per-unit term
def _unit_case():
    """An SDPA-like kernel: an 8 us (or a 0.5 us) floor, 3000 GB/s, and one CTA per work unit streaming its share
    at 20 GB/s. Points with one or two units are bound by that one CTA (w = all the bytes), points
    with hundreds of units by the GPU's bandwidth."""
    b = np.geomspace(1e5, 1e8, 12)
    units = np.array([1, 64, 1, 256, 2, 128, 1, 512, 4, 132, 1, 1000])
    return b, b / units


@pytest.mark.parametrize("t0", [8.0, 0.5])
def test_unit_law_recovers_the_per_unit_rate(t0):
    """Noise-free: t = t0 + max(b / 3000e3, w / 20e3) us. The fit finds t0, 3000 GB/s and
    20 GB/s (each within 1%), and its residuals are those of that law priced by hand; the plain
    law (no unit term) misses the one-CTA points by far more."""
    b, w = _unit_case()
    t = t0 + np.maximum(b / 3000e3, w / 20e3)
    fit = fit_unit_law(b, [None] * b.size, w, t, default_tflops=500.0)
    assert (fit.t0_us, fit.bw_GBps, fit.unit_GBps) == pytest.approx((t0, 3000.0, 20.0), rel=0.01)
    pred = fit.t0_us + np.maximum(b / (fit.bw_GBps * 1e3), w / (fit.unit_GBps * 1e3))
    assert fit.residuals_rel == pytest.approx(list((pred - t) / t), abs=1e-9)
    assert fit.rmse_rel < 1e-6 and fit.n_points == 12
    assert fit_kernel_law(b, [None] * b.size, t, default_tflops=500.0).rmse_rel > 0.3


def test_unit_law_with_a_compute_roof_too():
    """The same kernel doing 2 FLOP per byte, far below the ridge of 3000 GB/s and 400 TF (133
    FLOP/B): the compute roof binds nowhere and stays (within 1%: nothing pulls on it) the
    ceiling given; the unit rate and the bandwidth are recovered."""
    b, w = _unit_case()
    t = 8.0 + np.maximum(b / 3000e3, w / 20e3)
    fit = fit_unit_law(b, 2 * b, w, t, default_tflops=400.0)
    assert (fit.t0_us, fit.bw_GBps, fit.unit_GBps) == pytest.approx((8.0, 3000.0, 20.0), rel=0.01)
    assert fit.tflops == pytest.approx(400.0, rel=0.01)


def test_unit_law_left_out_where_it_never_binds():
    """Wave bytes a millionth of the bytes: w / u would need u < 1 GB/s to matter, and the
    data (a plain 5 us + b / 2500 GB/s law with 3% scatter) do not want it: the plain fit comes
    back unchanged, with no unit rate."""
    b = np.geomspace(1e4, 1e9, 10)
    rng = np.random.default_rng(11)
    t = kernel_law(5.0, 2500.0, 1e9, b, np.zeros_like(b)) * (1 + rng.normal(0, 0.03, b.size))
    fit = fit_unit_law(b, [None] * b.size, b / 1e6, t, default_tflops=500.0)
    plain = fit_kernel_law(b, [None] * b.size, t, default_tflops=500.0)
    assert fit.unit_GBps is None and fit == plain


def test_unit_law_with_no_wave_bytes_is_the_plain_law():
    b = np.geomspace(1e4, 1e9, 6)
    t = kernel_law(5.0, 2500.0, 1e9, b, np.zeros_like(b))
    assert fit_unit_law(b, [None] * 6, np.zeros(6), t, default_tflops=500.0) == fit_kernel_law(b, [None] * 6, t, default_tflops=500.0)


# ----------------------------------------------------------------------------- unreached roofs
def test_unreached_compute_roof_is_the_ceiling_or_the_best_achieved():
    """Memory-bound points (5 us + b / 2000 GB/s) that also do 0.1 FLOP per byte: the compute
    roof binds nowhere, so it is max(the GEMM ceiling given, the best FLOP rate achieved). The
    best achieved is at the largest point: 1e8 FLOP over 5 + 1e9 / 2e6 = 505 us, 0.198 TFLOPS."""
    b = np.geomspace(1e4, 1e9, 8)
    t = kernel_law(5.0, 2000.0, 1e9, b, 0.1 * b)
    achieved = 1e8 / (505.0 * 1e6)
    assert fit_kernel_law(b, 0.1 * b, t, default_tflops=0.05).tflops == pytest.approx(achieved, rel=1e-6)
    fit = fit_kernel_law(b, 0.1 * b, t, default_tflops=700.0)
    assert fit.tflops == 700.0 and "tflops not reached" in fit.source
    assert (fit.t0_us, fit.bw_GBps) == pytest.approx((5.0, 2000.0), rel=1e-6)
    assert fit_kernel_law(b, 0.1 * b, t).tflops == pytest.approx(achieved, rel=1e-6)  # no ceiling: the best achieved


def test_unreached_bandwidth_roof_is_the_ceiling_or_the_best_achieved():
    """Compute-bound points (3 us + f / 300 TF) that each move 100 B: the best bandwidth achieved
    is at the smallest point, 100 B over 3 + 1e8 / 3e8 = 3.33 us, 0.03 GB/s."""
    f = np.geomspace(1e8, 1e12, 8)
    b = np.full_like(f, 100.0)
    t = kernel_law(3.0, 1e9, 300.0, b, f)
    achieved = 100.0 / ((3.0 + 1e8 / 3e8) * 1e3)
    assert fit_kernel_law(b, f, t, default_bw_GBps=0.01).bw_GBps == pytest.approx(achieved, rel=1e-6)
    assert fit_kernel_law(b, f, t).bw_GBps == pytest.approx(achieved, rel=1e-6)  # no ceiling: the best achieved
    fit = fit_kernel_law(b, f, t, default_bw_GBps=4000.0)
    assert fit.bw_GBps == 4000.0 and "bw not reached" in fit.source and "tflops not reached" not in fit.source
    assert (fit.t0_us, fit.tflops) == pytest.approx((3.0, 300.0), rel=1e-6)


def test_both_roofs_reached_keep_their_fitted_values():
    """Half the points memory-bound and half compute-bound (noise-free): neither roof is reset,
    however high the given ceilings."""
    b = np.geomspace(1e4, 1e9, 10)
    f = b * (400.0 * 1e6) / (3000.0 * 1e3) * _MIX
    fit = fit_kernel_law(b, f, kernel_law(5.0, 3000.0, 400.0, b, f), default_bw_GBps=9e9, default_tflops=9e9)
    assert (fit.t0_us, fit.bw_GBps, fit.tflops) == pytest.approx((5.0, 3000.0, 400.0), rel=1e-6)
    assert fit.source == ""


def test_a_point_at_the_ridge_counts_as_reaching_the_bandwidth_roof():
    """Every point exactly at the ridge (1 FLOP per byte, 1000 GB/s and 1 TF): both roofs price
    each point the same, so the bandwidth roof counts as reached and only one roof (the
    compute one) is reset to its ceiling."""
    b = np.geomspace(1e6, 1e9, 6)
    t = kernel_law(2.0, 1000.0, 1.0, b, b)
    fit = fit_kernel_law(b, b, t, default_bw_GBps=5000.0, default_tflops=700.0)
    assert fit.rmse_rel < 1e-9
    assert ("bw not reached" in fit.source) != ("tflops not reached" in fit.source)


# ----------------------------------------------------------------------------- affine laws
def test_affine_latency_bounded_at_zero():
    """Times proportional to size (no latency) with a point below the line: the unbounded line
    through them would have a negative intercept; the fit keeps latency at 0 (a time cannot
    be negative) and the slope of the bounded least squares, worked out: with a = 0,
    s = sum(x/t) / sum((x/t)^2)."""
    x = np.array([1e3, 1e4, 1e5, 1e6])
    t = np.array([0.5, 10.0, 100.0, 1000.0])
    c = fit_collective_law(x, t, op="all_reduce", n_gpus=2, graph=True)
    s = np.sum(x / t) / np.sum((x / t) ** 2)
    assert c.latency_us == 0.0
    assert c.bw_GBps == pytest.approx(1 / (s * 1e3), rel=1e-9)


def test_collective_times_that_do_not_grow_are_refused():
    """Flat (or falling) times: no bandwidth term; the fit says so instead of an infinite rate."""
    with pytest.raises(ValueError, match="do not grow"):
        fit_collective_law([1e3, 1e6, 1e8], [30.0, 29.0, 28.0], op="all_reduce", n_gpus=2, graph=False)
    tb = fit_treebuild_law([1, 8, 64], [16, 16, 16], [40.0, 40.0, 40.0], impl="cpu")
    assert (tb.t0_us, tb.per_node_us) == pytest.approx((40.0, 0.0))  # a constant build time: 0 per node


def _grid_best_cost(b, f, t):
    """The lowest sum of squared relative residuals of t0 + max(b / bw, f / F) over a 400 x 400
    log grid of (bw 10 GB/s-100 TB/s, F 0.01-10^4 TFLOPS), each with its best floor t0 >= 0
    (for fixed roofs the floor is a weighted mean, worked out in closed form)."""
    bw = np.geomspace(10, 1e5, 400)[:, None, None]
    tf = np.geomspace(0.01, 1e4, 400)[None, :, None]
    m = np.maximum(b / (bw * 1e3), f / (tf * 1e6))
    t0 = np.maximum(0.0, np.sum((t - m) / t**2, axis=-1, keepdims=True) / np.sum(1 / t**2))
    return float(np.min(np.sum(((t0 + m - t) / t) ** 2, axis=-1)))


def test_kernel_fit_is_the_least_squares_optimum_on_the_profiles_own_samples():
    """Least squares: no law on a fine grid prices the points better than the fit. On the
    committed H200 profile's rmsnorm and add_rmsnorm samples (5 sizes each, both roofs binding
    near one another) and on the near-ridge synthetic set above."""
    from importlib import resources

    from perfmodel.profile import load_profile

    prof = load_profile(str(resources.files("perfmodel").joinpath("data", "h200-sxm.json")))
    cases = []
    for op in ("rmsnorm", "add_rmsnorm"):
        for prov in ("triton", "torch"):
            pts = [s for s in prof.benches["elementwise"].samples if s.shape["op"] == op and s.provider.startswith(prov)]
            cases.append((np.array([s.bytes for s in pts]), np.array([s.flops for s in pts]),
                          np.array([s.median_ms * 1e3 for s in pts])))
    b = np.geomspace(10 ** 3.384, 10 ** 7.6018, 16)
    f = b * (721.0 * 1e6) / (272.0 * 1e3) * np.geomspace(0.3, 3, 16)
    scatter = [0.0569, 0.0598, 0.0014, 0.0342, -0.0295, 0.0165, -0.0384, 0.0292,
               -0.0495, -0.0386, -0.0003, 0.0223, -0.0575, -0.0215, 0.0054, 0.0092]
    cases.append((b, f, kernel_law(5.8, 272.0, 721.0, b, f) * (1 + np.array(scatter))))
    for b, f, t in cases:
        fit = fit_kernel_law(b, f, t)
        assert "not reached" not in fit.source
        assert fit.rmse_rel**2 * len(t) <= _grid_best_cost(b, f, t) * (1 + 1e-9)


def test_sub_microsecond_memory_terms_still_count_as_reached():
    """Small kernels (1-100 kB at 3000 GB/s: 0.0003-0.03 us of streaming over a 2 us floor) and
    big ones compute-bound: the bandwidth roof binds at the small ones and is fitted, not reset."""
    b = np.array([1e3, 1e4, 1e5, 1e5, 1e5])
    f = np.array([0.0, 0.0, 0.0, 1e9, 1e10])
    t = kernel_law(2.0, 3000.0, 100.0, b, f)
    fit = fit_kernel_law(b, f, t, default_bw_GBps=9000.0)
    assert "bw not reached" not in fit.source
    assert fit.rmse_rel < 1e-9


def test_an_empty_call_faster_than_the_floor_leaves_bandwidth_unreached():
    """Compute-bound points (3 us + f / 300 TF, 100 B each) and one empty call (no FLOPs) timed
    at 2.5 us, under the floor: any memory term would only push that point further off, so
    the least-squares bandwidth term is exactly 0 and the roof is set from the ceiling, a
    finite 4000 GB/s (not 1 / 0)."""
    f = np.append(np.geomspace(1e8, 1e12, 8), 0.0)
    b = np.full_like(f, 100.0)
    t = np.append(kernel_law(3.0, 1e9, 300.0, b[:-1], f[:-1]), 2.5)
    fit = fit_kernel_law(b, f, t, default_bw_GBps=4000.0)
    assert fit.bw_GBps == 4000.0 and "bw not reached" in fit.source


def test_points_at_one_intensity_give_the_memory_bound_law():
    """All points at one arithmetic intensity price a memory roof and a compute roof alike; the
    fit then keeps the memory-bound law (a decode-size op that no point shows compute-bound),
    whatever the rounding. Hand-worked: t = 2 us + bytes / 1000 GB/s at 0.5 FLOP per byte."""
    b = np.array([1e6, 2e6, 4e6])
    t = 2.0 + b / (1000.0 * 1e3)  # 1 GB/s moves 1e3 bytes per us
    fit = fit_kernel_law(b, 0.5 * b, t, default_bw_GBps=4000.0, default_tflops=500.0)
    assert fit.bw_GBps == pytest.approx(1000.0, rel=1e-6)
    assert fit.t0_us == pytest.approx(2.0, rel=1e-6)
    assert fit.tflops == 500.0 and "tflops not reached" in fit.source
