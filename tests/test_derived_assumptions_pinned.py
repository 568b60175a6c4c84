"""A change detector, not a physics test: the spec-derived profile's unsourced assumptions
(perfmodel/model/derived.py), pinned so that a change to one is made on purpose, with its
reason. No measurement or source can check an assumption, so tests/mutation/mutate.py leaves
this file out of the mutation score (as it does the README-anchors and example-report tests)."""

import pytest

from perfmodel.model.derived import spec_derived_profile
from perfmodel.specs import registry


@pytest.fixture(scope="module")
def h200():
    g = registry.load_gpu("h200")
    mk = registry.load_memory_kinds()
    return g, None, spec_derived_profile(g, mk)


def test_unsourced_assumptions_pinned(h200):
    """No source gives these; they are the assumptions derived.py states (per-call floors, the
    graph launch, the host step, the tree builders and the error bars). Pinned here so that a
    change to one is made on purpose, with its reason."""
    p = h200[2]
    assert {cls: f.t0_us for cls, f in p.fits.items()} == {
        "moe_w4a16": 10.0, "moe_bf16": 8.0, "gemm_bf16": 4.0, "attention_mla": 6.0, "attention_gqa": 6.0, "elementwise": 3.0}
    assert {f.rmse_rel for f in p.fits.values()} == {0.15}
    assert (p.overheads.graph_launch_us, p.overheads.host_step_us) == (10.0, 150.0)
    cpu, gpu = p.treebuild["cpu"], p.treebuild["gpu"]
    assert (cpu.t0_us, cpu.per_node_us, cpu.rmse_rel) == (100.0, 2.0, 0.5)
    assert (gpu.t0_us, gpu.per_node_us, gpu.rmse_rel) == (150.0, 0.02, 0.5)
    assert p.provenance.kind == "spec-derived" and "no measurement" in p.provenance.note
