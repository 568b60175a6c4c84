"""Measured samples of another kernel set (lookup.SampleTable with providers): an op is priced
from the set's own samples where the set timed its shape, else from the default kernels'."""

import pytest

from perfmodel.model.lookup import Probe, SampleTable
from perfmodel.profile import BenchResult, Profile, Provenance, Sample

SHAPE = {"D": 128, "Hkv": 8, "Hq": 32, "kind": "gqa"}


def _table(torch_hq=32):
    """triton samples of the shape at q = 1 and 4 (10 / 40 us at L = 1024, 20 / 80 at 2048);
    torch.sdpa samples (15 / 30 us at q = 1 only) of a shape with `torch_hq` query heads."""
    s = [Sample(shape=dict(SHAPE, q=q, L=L, C=1), median_ms=t / 1e3, provider="triton")
         for q, L, t in ((1, 1024, 10.0), (1, 2048, 20.0), (4, 1024, 40.0), (4, 2048, 80.0))]
    s += [Sample(shape=dict(SHAPE, Hq=torch_hq, q=1, L=L, C=1), median_ms=t / 1e3, provider="torch.sdpa")
          for L, t in ((1024, 15.0), (2048, 30.0))]
    prof = Profile(provenance=Provenance(kind="measured", gpu_name="g", timestamp="t"),
                   benches={"attention": BenchResult(status="ok", samples=s)})
    return SampleTable(prof, providers={"attention": "torch.sdpa"})


def _probe(q, L, hq=32):
    return Probe("attention", tuple(sorted(dict(SHAPE, Hq=hq, q=q).items())), "L", L, "triton", "C", 1)


def test_the_sets_own_samples_where_it_timed_the_shape():
    tab = _table()
    assert tab.lookup(_probe(1, 1024)) == pytest.approx(15.0)  # torch's, not triton's 10
    assert tab.lookup(_probe(1, 2048)) == pytest.approx(30.0)
    # a verify width the set did not time falls to the law (None), not to triton's 40 us
    assert tab.lookup(_probe(4, 1024)) is None
    assert tab.lookup(_probe(1, 1024)) == pytest.approx(15.0)  # the family's answer is cached alike


def test_a_shape_the_set_never_timed_keeps_the_default_kernels_samples():
    """torch timed only a 16-head shape: the 32-head op is priced by triton's samples."""
    tab = _table(torch_hq=16)
    assert tab.lookup(_probe(1, 1024)) == pytest.approx(10.0)
    assert tab.lookup(_probe(4, 2048)) == pytest.approx(80.0)
    assert tab.lookup(_probe(1, 1024, hq=16)) == pytest.approx(15.0)


def test_the_order_samples_are_stored_in_does_not_matter():
    """Samples at L = 4096, 1024, 2048 (40, 10, 20 us), stored in that order: L = 1448 lies
    halfway between 1024 and 2048 in log2 (2^10.5 = 1448.2), so log-log interpolation gives
    sqrt(10 x 20) = 14.1 us; 3000 lies between 2048 and 4096: 20 x 2^log2(3000/2048)."""
    import math

    s = [Sample(shape=dict(SHAPE, q=1, L=L, C=1), median_ms=t / 1e3, provider="triton")
         for L, t in ((4096, 40.0), (1024, 10.0), (2048, 20.0))]
    tab = SampleTable(Profile(provenance=Provenance(kind="measured", gpu_name="g", timestamp="t"),
                              benches={"attention": BenchResult(status="ok", samples=s)}))
    assert tab.lookup(_probe(1, 2 ** 10.5)) == pytest.approx(math.sqrt(10.0 * 20.0))
    assert tab.lookup(_probe(1, 3000)) == pytest.approx(20.0 * 3000 / 2048)  # time linear in L here
    assert tab.lookup(_probe(1, 4096)) == pytest.approx(40.0) and tab.lookup(_probe(1, 5000)) is None
