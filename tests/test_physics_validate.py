"""validate, the spec-derived profile and the sensitivity ranking, against hand-worked figures."""

import pytest

from perfmodel.model.derived import spec_derived_profile
from perfmodel.model.project import Projector, Request
from perfmodel.model.step import step_estimate
from perfmodel.specs import registry
from perfmodel.validate import published_rows, run_validation


@pytest.fixture(scope="module")
def published():
    rows = run_validation(published=True)["rows"]
    return {r["point"].split(" (")[0]: r for r in rows if r["kind"] == "published"}


def test_published_rows_error_and_interval(published):
    rows = published_rows()
    assert len(published) == len(rows)
    for r in rows:
        v = published[r["id"]]
        assert v["measured"] == r["figure"] and v["unit"] == r["unit"]
        if v["err"] is not None:
            assert v["err"] == pytest.approx(v["predicted"] / r["figure"] - 1)


def test_request_throughput_includes_prefill(published):
    """Rows with isl/osl: C requests prefill isl tokens in one forward, then decode osl tokens:
    C x osl / (t_prefill + osl x t_step). Llama 3.1 405B FP8 on 8 MI300X, C=8, 128 in / 128 out."""
    r = next(x for x in published_rows() if x["id"] == "llama405b-mi300x-bs8")
    req = Request(target=r["gpu"], gpus=r["gpus"], model=r["model"], parallel=r["parallel"],
                  concurrency=[r["concurrency"]], context=r["context"], dtype_overrides=r.get("dtypes"))
    pj = Projector(req)
    pt = pj.run()["points"][0]
    pre_ms = step_estimate(pj.model, pj.machine, pj.layout, 8, 128, 0).step_us / 1e3
    want = 8 * 128 / ((pre_ms + 128 * pt["step_ms"]) / 1e3)
    assert published[r["id"]]["predicted"] == pytest.approx(want, rel=1e-9)
    assert want < pt["tokens_per_s"]  # prefill time lowers the request throughput


def test_summary_counts_median_and_coverage():
    from perfmodel.validate import _summary

    rows = [{"kind": "a", "err": 0.1, "in_interval": True}, {"kind": "a", "err": -0.3, "in_interval": False},
            {"kind": "a", "err": 0.2, "in_interval": True}, {"kind": "b", "err": None, "in_interval": None}]
    s = _summary(rows)
    assert s["by_kind"]["a"] == {"n": 3, "median_abs_err": pytest.approx(0.2), "max_abs_err": pytest.approx(0.3),
                                 "coverage": pytest.approx(2 / 3)}
    assert s["by_kind"]["b"]["n"] == 0 and s["by_kind"]["b"]["median_abs_err"] is None
    assert s["median_abs_err"] == pytest.approx(0.2)


def test_e2e_rows_predict_multi_gpu_from_the_link_spec():
    """Multi-GPU e2e points are predicted without the measured collectives (the link spec's
    calibrated numbers instead): the same profile with its collective fits removed predicts
    them identically."""
    from importlib import resources

    from perfmodel.profile import load_profile, save_profile

    path = str(resources.files("perfmodel").joinpath("data", "h200-sxm.json"))
    rows = [r for r in run_validation([path], published=False)["rows"] if r["kind"].startswith("e2e-2gpu")]
    assert rows
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "nc.json"
        save_profile(load_profile(path).model_copy(update={"collectives": []}), p)
        rows_nc = [r for r in run_validation([str(p)], published=False)["rows"] if r["kind"].startswith("e2e-2gpu")]
    assert [r["predicted"] for r in rows] == pytest.approx([r["predicted"] for r in rows_nc], rel=1e-12)


def test_spec_derived_profile_by_hand():
    """Datasheet peak x achievable streaming fraction x assumed class efficiency (derived.py):
    H200 4800 GB/s x 0.90 (HBM3e) x 0.80 for the W4A16 MoE class; 989 TF bf16 x 0.45."""
    h200 = registry.load_gpu("h200")
    p = spec_derived_profile(h200, registry.load_memory_kinds())
    f = p.fits["moe_w4a16"]
    frac = h200.memory.streaming_fraction(registry.load_memory_kinds())
    assert f.bw_GBps == pytest.approx(4800 * frac * 0.80) and f.t0_us == 10.0
    assert f.tflops == pytest.approx(h200.compute.bf16_dense_TFLOPS.value * 0.45)
    assert p.fits["elementwise"].bw_GBps == pytest.approx(4800 * frac * 0.70)
    assert p.provenance.kind == "spec-derived" and p.overheads.graph_node_us == 1.0
    assert p.treebuild["gpu"].per_node_us == 0.02


def test_sensitivity_signs():
    """+20% bandwidth or acceptance speeds a decode step; +20% floors, host overhead or collective
    latency slows it; the table is ranked by the larger swing."""
    from perfmodel.model.sensitivity import sensitivity

    rows = {r["input"]: r for r in sensitivity(Request(target="b300", gpus=8, spec="ddtree", concurrency=[1]))}
    assert rows["memory bandwidth (all kernels)"]["plus"] > 0 > rows["memory bandwidth (all kernels)"]["minus"]
    assert rows["acceptance (τ − 1)"]["plus"] > 0 > rows["acceptance (τ − 1)"]["minus"]
    for k in ("per-kernel latency floor", "host overhead (per step, per launch)", "collective latency",
              "graph node cost"):
        assert rows[k]["plus"] < 0 < rows[k]["minus"], k
    assert rows["collective bandwidth"]["plus"] >= 0
    swing = [max(abs(r["plus"]), abs(r["minus"])) for r in rows.values()]
    assert swing == sorted(swing, reverse=True)
    plain = {r["input"] for r in sensitivity(Request(target="b300", gpus=8, concurrency=[1]))}
    assert "acceptance (τ − 1)" not in plain
    assert sensitivity(Request(target="b300", gpus=8, concurrency=[100000])) == []


def test_e2e_two_gpu_points_by_hand():
    """The stored 2-GPU e2e points are Kimi stacks of n_layers over NVLink4 without lm_head:
    predicted without the host loop, with 2 all-reduces of T x 7168 x 2 B per layer priced
    from the link spec (bus factor 2(2-1)/2 = 1)."""
    from importlib import resources

    from perfmodel.model.e2e import predict_e2e
    from perfmodel.profile import load_profile

    prof = load_profile(str(resources.files("perfmodel").joinpath("data", "h200-sxm.json")))
    h200 = registry.load_gpu("h200")
    c = registry.load_link(h200.default_interconnect).calibrated
    two = [p for p in prof.e2e if p.n_gpus == 2]
    assert two
    for p, est in predict_e2e(two, prof, h200, registry.load_memory_kinds()):
        T = p.concurrency * p.q
        want = 2 * p.n_layers * (c.allreduce_latency_us.value + T * 7168 * 2 / (c.allreduce_busbw_GBps.value * 1e3))
        assert est.breakdown_us["collectives"] == pytest.approx(want), p.name
        assert "host" not in est.breakdown_us
