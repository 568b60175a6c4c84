"""The fits recover known parameters from noisy synthetic data and keep their residuals."""

import numpy as np
import pytest

pytest.importorskip("scipy")

from perfmodel.measure.fits import fit_collective_law, fit_kernel_law, fit_treebuild_law, kernel_law, launcher_of


def test_kernel_law_recovers_t0_bw_tflops():
    rng = np.random.default_rng(0)
    t0, bw, tf = 6.0, 3800.0, 600.0
    T = np.geomspace(1, 4096, 25)
    nbytes = 40e6 + 30e3 * T  # weights + activations
    nflops = 2 * 7168 * 2048 * 3 * T * 8
    t = kernel_law(t0, bw, tf, nbytes, nflops) * (1 + rng.normal(0, 0.02, T.size))
    f = fit_kernel_law(nbytes, nflops, t, bench="synthetic", source="measured: test")
    assert f.t0_us == pytest.approx(t0, rel=0.25)
    assert f.bw_GBps == pytest.approx(bw, rel=0.05)
    assert f.tflops == pytest.approx(tf, rel=0.05)
    assert f.n_points == T.size and len(f.residuals_rel) == T.size
    assert 0 < f.rmse_rel < 0.05
    assert f.bytes_range == (pytest.approx(nbytes.min()), pytest.approx(nbytes.max()))
    assert f.bench == "synthetic" and f.source.startswith("measured: test")


def test_kernel_law_memory_only_uses_default_tflops():
    b = np.geomspace(1e4, 1e9, 12)
    t = kernel_law(3.0, 4000.0, 1e9, b, np.zeros_like(b))
    f = fit_kernel_law(b, [None] * len(b), t, default_tflops=700.0)
    assert f.bw_GBps == pytest.approx(4000.0, rel=0.02)
    assert f.t0_us == pytest.approx(3.0, rel=0.05)
    assert f.tflops == pytest.approx(700.0)
    assert "tflops not reached" in f.source


def test_launcher_of_samples():
    """A law is Triton-launched only when every sample's kernel is (eager launch pricing)."""
    from types import SimpleNamespace as S

    assert launcher_of([S(provider="triton"), S(provider="triton_w4a16")]) == "triton"
    assert launcher_of([S(provider="triton"), S(provider="torch")]) == "torch"
    assert launcher_of([]) == "torch"
    b = np.geomspace(1e4, 1e9, 8)
    fit = fit_kernel_law(b, [None] * len(b), kernel_law(3.0, 4000.0, 1e9, b, np.zeros_like(b)), launcher="triton")
    assert fit.launcher == "triton"


def test_collective_law():
    rng = np.random.default_rng(1)
    x = np.geomspace(1e3, 4e6, 13)
    t = (8.0 + x / (150.0 * 1e3)) * (1 + rng.normal(0, 0.02, x.size))
    f = fit_collective_law(x, t, op="all_reduce", n_gpus=2, graph=True, link="nvlink4", source="s")
    assert f.latency_us == pytest.approx(8.0, rel=0.1)
    assert f.bw_GBps == pytest.approx(150.0, rel=0.1)
    assert len(f.residuals_rel) == x.size and f.rmse_rel < 0.05


def test_treebuild_law():
    C = np.repeat([1, 8, 32, 128], 5)
    B = np.tile([16, 32, 64, 128, 256], 4)
    t = 40.0 + 0.05 * C * B
    f = fit_treebuild_law(C, B, t, impl="gpu")
    assert f.t0_us == pytest.approx(40.0, rel=0.02)
    assert f.per_node_us == pytest.approx(0.05, rel=0.02)
    assert f.n_points == 20 and f.rmse_rel < 1e-3
