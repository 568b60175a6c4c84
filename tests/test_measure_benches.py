"""CPU checks of the bench helpers; the benches themselves run on a GPU (marked `gpu`)."""

import importlib

import pytest

torch = pytest.importorskip("torch")

from perfmodel.measure.runner import BENCH_ORDER, default_registry

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def test_every_bench_module_imports_and_has_run():
    for name in BENCH_ORDER:
        mod = importlib.import_module(f"perfmodel.measure.{name}")
        assert callable(mod.run), name
    assert list(default_registry()) == list(BENCH_ORDER)


def test_measure_never_imports_model():
    import pathlib
    import re

    root = pathlib.Path(importlib.import_module("perfmodel.measure").__file__).parent
    files = list(root.rglob("*.py"))
    assert files
    for f in files:
        assert not re.search(r"^\s*(from|import)\s+perfmodel\.model", f.read_text(), re.M), f


def test_random_tree_mask_is_ancestor_closed():
    from perfmodel.measure.attention import random_tree_mask

    m = random_tree_mask(3, 17, seed=1, device="cpu")
    assert m.shape == (3, 17, 17) and m.dtype == torch.bool
    assert bool(m.diagonal(dim1=1, dim2=2).all()) and bool(m[:, :, 0].all())  # self and root
    assert not bool(torch.triu(m, 1).any())  # parents come before children
    # ancestor-closed: if j is an ancestor of i, every ancestor of j is an ancestor of i
    for c in range(3):
        for i in range(17):
            for j in torch.nonzero(m[c, i]).flatten().tolist():
                assert bool((m[c, i] | ~m[c, j]).all())


def test_multi_gpu_e2e_points():
    from perfmodel.measure.e2e import points_tp

    two, eight = points_tp(2, quick=False), points_tp(8, quick=False)
    assert {(p.C, p.q) for p in two} == {(C, q) for C in (1, 8, 32) for q in (1, 9)}
    assert {(p.C, p.q) for p in eight} == {(C, q) for C in (1, 8, 32, 128) for q in (1, 9)}  # the e2e bench's set


def test_peak_lookup_h200():
    from perfmodel.measure.peaks import find_peak

    p = find_peak("NVIDIA H200")
    assert p is not None and p.bw_GBps > 1000 and p.bf16_TFLOPS > 100 and p.source
    assert find_peak("NVIDIA H100 PCIe").spec != find_peak("NVIDIA H100 80GB HBM3").spec


def test_kimi_gemm_shapes():
    from perfmodel.measure.shapes import kimi_gemm_shapes

    s = dict((n, (N, K)) for n, N, K in kimi_gemm_shapes(8))
    assert s["q_b"] == (64 * 192 // 8, 1536) and s["o_proj"] == (7168, 64 * 128 // 8)
    assert s["lm_head"] == (163840 // 8, 7168) and s["kv_a"] == (576, 7168)


@needs_cuda
@pytest.mark.gpu
@pytest.mark.parametrize("name", [n for n in BENCH_ORDER if n not in ("collectives",)])
def test_bench_quick_on_gpu(name):
    from perfmodel.measure.common import BenchContext

    mod = importlib.import_module(f"perfmodel.measure.{name}")
    out = mod.run(BenchContext(quick=True, budget_s=5, log=lambda *a, **k: None))
    assert out.result.status in ("ok", "skipped") and (out.result.samples or out.result.status == "skipped")


@needs_cuda
@pytest.mark.gpu
def test_time_fn_graph_and_eager():
    from perfmodel.measure.timing import time_fn

    x = torch.randn(1 << 20, device="cuda")
    e = time_fn(lambda: x.mul_(1.0001), max_samples=10)
    g = time_fn(lambda: x.mul_(1.0001), graph=True, calls_per_graph=10, max_samples=10)
    assert e.median_ms > 0 and g.median_ms > 0 and g.calls_per_sample == 10 and len(g.times_ms) == 10
