"""validate, the spec-derived profile and the sensitivity ranking, against hand-worked figures."""

import pytest

from perfmodel.api import projector
from perfmodel.model.derived import spec_derived_profile
from perfmodel.model.step import step_estimate
from perfmodel.request import TWO_GPU_PROFILE, shipped_profile_path
from perfmodel.scenario import Request
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
                  concurrency=[r["concurrency"]], context=r["context"], dtypes=r.get("dtypes"))
    pj = projector(req)
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

    from perfmodel.profile import load_profile, save_profile

    path = str(shipped_profile_path(TWO_GPU_PROFILE))  # the 2-GPU one
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
    from perfmodel.explore import sensitivity

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

    from perfmodel.model.e2e import predict_e2e
    from perfmodel.profile import load_profile
    from perfmodel.request import e2e_inputs

    prof = load_profile(str(shipped_profile_path(TWO_GPU_PROFILE)))
    h200 = registry.load_gpu("h200")
    c = registry.load_link(h200.default_interconnect).calibrated
    two = [p for p in prof.e2e if p.n_gpus == 2]
    assert two
    for p, est in predict_e2e(two, prof, h200, registry.load_memory_kinds(), *e2e_inputs(prof, h200)):
        T = p.concurrency * p.q
        want = 2 * p.n_layers * (c.allreduce_latency_us.value + T * 7168 * 2 / (c.allreduce_busbw_GBps.value * 1e3))
        assert est.breakdown_us["collectives"] == pytest.approx(want), p.name
        assert "host" not in est.breakdown_us


# ----------------------------------------------------------------------------- interval flags
def _embedded_path():
    from importlib import resources

    return str(resources.files("perfmodel").joinpath("data", "h200-sxm.json"))


def _one_point_profiles(tmp_path, measured_fns):
    """Copies of the embedded profile, each with one 1-GPU e2e point (the first) measured at
    measured_fns[i](pred, sigma) ms, and no foreign benches."""
    from perfmodel.model.e2e import predict_e2e
    from perfmodel.profile import load_profile, save_profile
    from perfmodel.request import e2e_inputs

    prof = load_profile(_embedded_path())
    p0 = next(p for p in prof.e2e if p.n_gpus == 1)
    benches = {k: v for k, v in prof.benches.items() if k not in ("foreign", "foreign_prefill")}
    (_, est), = predict_e2e([p0], prof, registry.load_gpu(prof.provenance.gpu_spec), registry.load_memory_kinds(),
                             *e2e_inputs(prof, registry.load_gpu(prof.provenance.gpu_spec)))
    pred, sigma = est.step_us / 1e3, est.sigma_us / 1e3
    paths = []
    for i, fn in enumerate(measured_fns):
        path = tmp_path / f"p{i}.json"
        save_profile(prof.model_copy(update={"e2e": [p0.model_copy(update={"step_ms": fn(pred, sigma)})],
                                             "benches": benches}), path)
        paths.append(str(path))
    return paths, pred, sigma


def test_e2e_interval_flag_is_the_90_percent_band(tmp_path):
    """in_interval = |measured - predicted| <= 1.645 sigma (the step's 90% band, ends included):
    a measurement at the prediction, inside by 1%, just outside by 1% on either side, and
    exactly at either end."""
    from perfmodel.model.step import Z90

    fns = [lambda p, s: p, lambda p, s: p + 0.99 * Z90 * s, lambda p, s: p - 0.99 * Z90 * s,
           lambda p, s: p + 1.01 * Z90 * s, lambda p, s: p - 1.01 * Z90 * s,
           lambda p, s: p + Z90 * s, lambda p, s: p - Z90 * s]
    paths, pred, sigma = _one_point_profiles(tmp_path, fns)
    assert 0 < sigma < 0.5 * pred
    res = run_validation(paths, published=False)
    rows = res["rows"]
    assert [r["kind"] for r in rows] == ["e2e-1gpu"] * 7
    assert [r["in_interval"] for r in rows] == [True, True, True, False, False, True, True]
    d = 1.01 * Z90 * sigma  # err = predicted / measured - 1
    assert rows[0]["err"] == 0.0 and rows[3]["err"] == pytest.approx(pred / (pred + d) - 1)
    assert res["summary"]["by_kind"]["e2e-1gpu"]["coverage"] == pytest.approx(5 / 7)
    assert set(res["self_check"]) == {"n_points", "median_abs_err", "max_abs_err"}


def _published_stub(monkeypatch, rows):
    import perfmodel.validate as v

    monkeypatch.setattr(v, "published_rows", lambda: rows)


LLAMA8B_H100 = dict(model="llama-3.1-8b", gpu="h100-sxm", gpus=1, parallel="tp", concurrency=1, context=1200,
                    engine="SGLang", source="test row")


def test_published_row_that_does_not_fit(monkeypatch):
    """Llama 3.1 8B on one H100 (80 GB) at C = 1000, 128k context: KV 128 KiB x 131072 x 1000
    = 17 TB: projected not to fit, no prediction, not in the interval, not counted."""
    from perfmodel.validate import _published

    _published_stub(monkeypatch, [dict(LLAMA8B_H100, id="huge", concurrency=1000, context=131072, figure=10.0,
                                       unit="tok/s per stream")])
    rows = _published(None)
    assert len(rows) == 1
    r = rows[0]
    assert (r["predicted"], r["err"], r["in_interval"]) == (None, None, False)
    assert r["source"].endswith("projected not to fit")


def test_published_per_stream_rows_ignore_isl_osl(monkeypatch):
    """isl / osl price prefill only for whole-request ('tok/s total') figures: a per-stream
    row with them is the decode point's tok/s per stream; the total row is C x osl over
    prefill + osl steps, below C x the per-stream rate."""
    from perfmodel.validate import _published

    base = dict(LLAMA8B_H100, concurrency=8, isl=1024, osl=128)
    _published_stub(monkeypatch, [dict(base, id="s", figure=100.0, unit="tok/s per stream"),
                                  dict(base, id="t", figure=800.0, unit="tok/s total"),
                                  dict(base, id="n", figure=800.0, unit="tok/s total", osl=None)])
    s, t, n = _published(None)
    pt = projector(Request(target="h100-sxm", gpus=1, model="llama-3.1-8b", concurrency=[8],
                           context=1200)).run()["points"][0]
    assert s["predicted"] == pytest.approx(pt["tokens_per_s_per_stream"], rel=1e-12)
    assert s["in_interval"] == (pt["interval"]["tokens_per_s_per_stream"][0] <= 100.0
                                <= pt["interval"]["tokens_per_s_per_stream"][1])
    assert n["predicted"] == pytest.approx(pt["tokens_per_s"], rel=1e-12)  # no osl: the decode rate
    assert t["predicted"] < 0.9 * pt["tokens_per_s"]  # 1024 prefill tokens a request cost time
    assert t["err"] == pytest.approx(t["predicted"] / 800.0 - 1)


def test_request_throughput_by_hand_limits(monkeypatch):
    """C x osl / (t_prefill + osl x t_step): with the prefill a single token (isl 1) the
    request rate approaches the decode rate from below, within the prefill's share."""
    from perfmodel.validate import _published

    _published_stub(monkeypatch, [dict(LLAMA8B_H100, id="t", concurrency=8, isl=1, osl=1000, figure=800.0,
                                       unit="tok/s total")])
    (t,) = _published(None)
    pt = projector(Request(target="h100-sxm", gpus=1, model="llama-3.1-8b", concurrency=[8],
                           context=1200)).run()["points"][0]
    # one extra step-like forward over 1000 decode steps: at most ~0.2% slower
    assert pt["tokens_per_s"] * 0.995 < t["predicted"] < pt["tokens_per_s"]


def test_foreign_rows_calibrate_on_two_and_predict_the_rest(tmp_path):
    """The foreign stack: 2 points calibrate (the smallest and largest 1-GPU step), the rest
    are predicted; 3 points give one prediction (calibrated and uncalibrated rows), 2 none."""
    from perfmodel.profile import load_profile, save_profile

    prof = load_profile(_embedded_path())
    fb = prof.benches["foreign"]
    one = [s for s in fb.samples if s.shape["n_gpus"] == 1 and s.shape["model"] == "llama-3.1-8b"]
    by_step = sorted(one, key=lambda s: s.median_ms)
    three = [by_step[0], by_step[len(by_step) // 2], by_step[-1]]
    out = {}
    for n in (2, 3):
        path = tmp_path / f"f{n}.json"
        keep = three if n == 3 else [three[0], three[2]]
        save_profile(prof.model_copy(update={"e2e": [], "benches": {
            "foreign": fb.model_copy(update={"samples": keep})}}), path)
        try:
            rows = run_validation([str(path)], published=False, base=_embedded_path())["rows"]
        except Exception as e:  # nothing checked: no e2e and no foreign rows
            rows = str(e)
        out[n] = rows
    assert isinstance(out[2], str) and "nothing was checked" in out[2]
    rows = out[3]
    assert rows and all(r["kind"].startswith("foreign-") for r in rows)
    assert any(r["kind"].startswith("foreign-calibrated") for r in rows)
    mid = three[1]
    for r in rows:
        assert r["measured"] == mid.median_ms
        assert f"C={mid.shape['C']} q={mid.shape['q']} L={mid.shape['L']}" in r["point"]
        assert r["err"] == pytest.approx(r["predicted"] / mid.median_ms - 1)


def test_published_leave_one_gpu_out_needs_two_gpus(monkeypatch):
    """An engine with points on two GPUs: calibrate on each, predict the other (2 rows); an
    engine on one GPU gives none."""
    from perfmodel.validate import _published_logo

    rows = [dict(LLAMA8B_H100, id="a", figure=150.0, unit="tok/s per stream"),
            dict(LLAMA8B_H100, id="b", gpu="h200", figure=170.0, unit="tok/s per stream"),
            dict(LLAMA8B_H100, id="c", engine="vLLM", figure=140.0, unit="tok/s per stream")]
    _published_stub(monkeypatch, rows)
    out = _published_logo(None)
    assert sorted(r["point"] for r in out) == ["a (SGLang) from h200", "b (SGLang) from h100-sxm"]
    a, b = sorted(out, key=lambda r: r["point"])
    assert (a["measured"], b["measured"]) == (150.0, 170.0)
    assert a["err"] == pytest.approx(a["predicted"] / 150.0 - 1) and a["in_interval"] is None


def test_spec_derived_assumptions_within_physical_limits():
    """No kernel class streams faster than the memory's achievable rate or computes faster than
    the datasheet peak (every assumed efficiency is a fraction <= 1), and each call's floor
    holds at least its own graph nodes (the machine takes them out of t0): on every GPU spec.
    Cited figures: graph node ~0.9 us per node [S33], eager launch 4-6 us [S36]
    (hwspecs/SOURCES.md 2d)."""
    from perfmodel.model.ops import KERNELS_PER_CALL

    mk = registry.load_memory_kinds()
    for name in ("h200", "b300", "h100-sxm", "mi300x", "a100-sxm"):
        g = registry.load_gpu(name)
        p = spec_derived_profile(g, mk)
        roof = g.memory.bandwidth_GBps.value * g.memory.streaming_fraction(mk)
        for cls, f in p.fits.items():
            assert 0 < f.bw_GBps <= roof, (name, cls)
            assert 0 < f.tflops <= g.compute.bf16_dense_TFLOPS.value, (name, cls)
            assert f.t0_us >= KERNELS_PER_CALL[cls] * p.overheads.graph_node_us, (name, cls)
        assert 0.8 <= p.overheads.graph_node_us <= 1.0 and 4.0 <= p.overheads.launch_eager_us <= 6.0


def test_published_interval_flag_includes_its_ends(monkeypatch):
    """A published figure equal to the projection is inside its interval, and so are figures
    exactly at either end; 1% beyond an end is outside."""
    from perfmodel.validate import _published

    pt = projector(Request(target="h100-sxm", gpus=1, model="llama-3.1-8b", concurrency=[8],
                           context=1200)).run()["points"][0]
    lo, hi = pt["interval"]["tokens_per_s_per_stream"]
    mid = pt["tokens_per_s_per_stream"]
    figs = [mid, lo, hi, lo * 0.99, hi * 1.01]
    _published_stub(monkeypatch, [dict(LLAMA8B_H100, id=f"r{i}", concurrency=8, figure=x, unit="tok/s per stream")
                                  for i, x in enumerate(figs)])
    rows = _published(None)
    assert [r["in_interval"] for r in rows] == [True, True, True, False, False]
    assert rows[0]["err"] == pytest.approx(0.0, abs=1e-12)


def test_validation_by_default_checks_the_published_figures_and_leaves_one_gpu_out(monkeypatch, tmp_path):
    """run_validation's defaults: the published table is checked, with its leave-one-GPU-out
    rows (one engine on two GPUs: two rows)."""
    paths, _, _ = _one_point_profiles(tmp_path, [lambda p, s: p])
    _published_stub(monkeypatch, [dict(LLAMA8B_H100, id="a", figure=150.0, unit="tok/s per stream"),
                                  dict(LLAMA8B_H100, id="b", gpu="h200", figure=170.0, unit="tok/s per stream")])
    kinds = [r["kind"] for r in run_validation(paths)["rows"]]
    assert kinds.count("published") == 2 and kinds.count("published-logo") == 2 and kinds.count("e2e-1gpu") == 1


def test_leave_one_gpu_out_reads_per_stream_figures_per_stream(monkeypatch):
    """Per-stream figures at C = 8 set to the model's own projection on each GPU: calibrated on
    one GPU, the other is predicted within a few percent (a per-stream figure read as a total
    would be 8x off)."""
    from perfmodel.validate import _published_logo

    rows = []
    for gpu in ("h100-sxm", "h200"):
        pt = projector(Request(target=gpu, gpus=1, model="llama-3.1-8b", concurrency=[8],
                               context=1200)).run()["points"][0]
        rows.append(dict(LLAMA8B_H100, id=gpu, gpu=gpu, concurrency=8, figure=pt["tokens_per_s_per_stream"],
                         unit="tok/s per stream"))
    _published_stub(monkeypatch, rows)
    out = _published_logo(None)
    assert len(out) == 2 and all(abs(r["err"]) < 0.05 for r in out)


def test_a_profile_is_validated_against_its_own_benches(tmp_path):
    """With no base named, each profile predicts its own end-to-end points from its own fits:
    halve every fitted bandwidth and the points are predicted slower (the raw samples left out,
    so that the laws price every op)."""
    from perfmodel.profile import load_profile, save_profile

    prof = load_profile(_embedded_path())
    p0 = [p for p in prof.e2e if p.n_gpus == 1][:3]
    benches = {}
    slow_fits = {c: f.model_copy(update={"bw_GBps": f.bw_GBps / 2}) for c, f in prof.fits.items()}
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    save_profile(prof.model_copy(update={"e2e": p0, "benches": benches}), a)
    save_profile(prof.model_copy(update={"e2e": p0, "benches": benches, "fits": slow_fits}), b)
    ra = run_validation([str(a)], published=False)["rows"]
    rb = run_validation([str(b)], published=False)["rows"]
    assert len(ra) == len(rb) == 3
    for x, y in zip(ra, rb):
        assert y["predicted"] > 1.05 * x["predicted"]
    # naming the base predicts from it instead: the halved profile's points as the full one's
    rc = run_validation([str(b)], published=False, base=str(a))["rows"]
    assert [r["predicted"] for r in rc] == pytest.approx([r["predicted"] for r in ra], rel=1e-12)


def test_foreign_points_are_predicted_on_the_gpu_they_ran_on(tmp_path):
    """The same foreign samples labelled as run on an H100 (3,350 GB/s) instead of the H200
    (4,800 GB/s): predicted from the H200 base, each uncalibrated step is slower, by at most
    the bandwidth ratio (floors and host do not scale), and within 3x of what was measured.
    (The base gets a torch kernel set, a copy of its elementwise law, so that the
    uncalibrated rows exist.)"""
    from perfmodel.profile import load_profile, save_profile

    prof = load_profile(_embedded_path())
    base = tmp_path / "base.json"
    save_profile(prof.model_copy(update={"fits": prof.fits | {"elementwise@torch": prof.fits["elementwise"]}}), base)
    fb = prof.benches["foreign"]
    one = sorted((s for s in fb.samples if s.shape["n_gpus"] == 1 and s.shape["model"] == "llama-3.1-8b"),
                 key=lambda s: s.median_ms)
    keep = [one[0], one[len(one) // 2], one[-1]]
    unc = {}
    for gpu in ("h200-sxm", "h100-sxm"):
        path = tmp_path / f"{gpu}.json"
        prov = prof.provenance.model_copy(update={"gpu_spec": gpu})
        save_profile(prof.model_copy(update={"e2e": [], "provenance": prov, "benches": {
            "foreign": fb.model_copy(update={"samples": keep})}}), path)
        rows = run_validation([str(path)], published=False, base=str(base))["rows"]
        unc[gpu] = next(r for r in rows if r["kind"] == "foreign-uncalibrated")["predicted"]
    assert 1.0 < unc["h100-sxm"] / unc["h200-sxm"] <= 4800 / 3350
    assert 1 / 3 < unc["h200-sxm"] / keep[1].median_ms < 3
