"""`perfmodel calibrate`: the fit recovers known factors in both directions, says which
factors the data could not move, carries them to a target, and rejects bad points with one
line naming the point."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from perfmodel.calibrate import (
    CalibrationError,
    CalibrationInput,
    ObservedPoint,
    calibration_pair,
    fit,
    from_bench_file,
    points_from_foreign,
    prepare,
)
from perfmodel.cli import app
from perfmodel.model.calibration import Factors, calibrated, factors_of, group_of, link_family
from perfmodel.request import resolve_profile

FIX = Path(__file__).parent / "fixtures" / "bench"
runner = CliRunner()
PROFILE = resolve_profile(None)


def _pt(**kw) -> ObservedPoint:
    base = dict(target="rtx-pro-6000", gpus=8, model="kimi-k2.6", parallel="tp", concurrency=1, context=4096)
    return ObservedPoint(**(base | kw))


SETUPS = [  # C=1 and large C, TP and EP on PCIe, another machine on NVLink: the regimes that separate factors
    dict(concurrency=1), dict(concurrency=4), dict(concurrency=16), dict(concurrency=1, context=32768),
    dict(parallel="tp-attn-ep-moe", concurrency=1), dict(parallel="tp-attn-ep-moe", concurrency=16),
    dict(target="b200", concurrency=1), dict(target="b200", concurrency=128),
    dict(model="llama-3.1-8b", gpus=1, concurrency=1), dict(model="llama-3.1-8b", gpus=1, concurrency=64),
]
TRUTH = {"floor.gemm": 0.5, "floor.attention": 0.6, "bw.moe": 0.8, "engine_host_us": 400.0}


def _synthetic(truth: dict) -> list[ObservedPoint]:
    """Figures the model itself gives with known factors applied: the fit must find them."""
    f = Factors(values=truth)
    out = []
    for s in SETUPS:
        p = _pt(**s, step_ms=1000.0)
        step = prepare(0, p, PROFILE).predict(f)
        out.append(p.model_copy(update={"step_ms": step}))
    return out


@pytest.fixture(scope="module")
def recovered():
    return fit(CalibrationInput(engine="synthetic", points=_synthetic(TRUTH)), PROFILE, "embedded")


def test_fit_recovers_known_factors_both_directions(recovered):
    """Truth: an engine with faster floors (x0.5, x0.6), slower MoE streaming (x0.8) and 400 us
    of host work per step. Fixed per-step time is shared among floors, launches and the host
    term, which these points cannot tell apart, so what must hold is: the identifiable factor
    is found, the floors move down (two-sided), and held-out machines are predicted as the
    truth would."""
    got = {f.name: f for f in recovered.factors}
    assert got["bw.moe"].value == pytest.approx(0.8, rel=0.1) and got["bw.moe"].determined
    assert all(got[k].value < 1.0 for k in ("floor.gemm", "floor.attention"))
    assert recovered.median_abs_err < 0.01
    assert recovered.loo_median_abs_err is not None and recovered.loo_median_abs_err < 0.03
    truth, fitted = Factors(values=TRUTH), factors_of(recovered)
    for kw in (dict(target="b300", concurrency=1), dict(target="b300", concurrency=64), dict(target="h200", concurrency=32),
               dict(target="b300", parallel="tp-attn-ep-moe", concurrency=8)):
        p = prepare(0, _pt(**kw, step_ms=1000.0), PROFILE)
        assert p.predict(fitted) == pytest.approx(p.predict(truth), rel=0.02), kw
        if kw["concurrency"] == 1:  # and the uncalibrated model was off there
            assert abs(p.predict(Factors()) / p.predict(truth) - 1) > 0.05


def test_undetermined_factors_stay_at_prior(recovered):
    got = {f.name: f for f in recovered.factors}
    # no point is sensitive to elementwise bandwidth: the factor keeps its prior
    assert got["bw.elementwise"].value == pytest.approx(1.0, abs=0.05)
    assert not got["bw.elementwise"].determined
    assert got["bw.elementwise"].sigma_post == pytest.approx(got["bw.elementwise"].sigma_prior, rel=0.1)
    # no spec point: no acceptance factor at all; only the link families that were observed
    assert "tau" not in got and "coll_lat.xgmi" not in got
    assert {"coll_lat.pcie", "coll_lat.nvlink"} <= set(got)


def test_one_point_moves_the_projection_toward_the_figure_both_ways():
    for k in (0.5, 2.0):
        p = _pt(step_ms=1000.0)
        true = prepare(0, p, PROFILE).predict(Factors()) * k
        res = fit(CalibrationInput(engine="e", points=[p.model_copy(update={"step_ms": true})]), PROFILE, "x")
        pt = res.points[0]
        assert abs(pt.predicted / true - 1) < abs(pt.uncalibrated / true - 1) / 4
        assert res.loo_median_abs_err is None  # one point: no leave-one-out


def test_speculative_point_calibrates_tau():
    p = _pt(spec="ddtree", budget=16, tokens_per_s_per_stream=0.001)
    prep = prepare(0, p, PROFILE)
    base = prep.predict(Factors())
    # the same machine, with τ 20% lower: tokens/s per stream 20% lower at the same step
    # plain-decode points on the same machine pin the step's terms, so the gap goes to τ
    plain = [_pt(concurrency=c, step_ms=1000.0) for c in (1, 4, 16)]
    obs = [p.model_copy(update={"tokens_per_s_per_stream": base * 0.8})]
    obs += [q.model_copy(update={"step_ms": prepare(0, q, PROFILE).predict(Factors())}) for q in plain]
    got = {f.name: f for f in fit(CalibrationInput(engine="e", points=obs), PROFILE, "x").factors}
    assert got["tau"].value == pytest.approx(0.8, abs=0.06) and got["tau"].determined
    assert got["floor.gemm"].value == pytest.approx(1.0, abs=0.1)  # not the floors


def test_calibrated_machine_carries_factors_to_a_target():
    from perfmodel.api import projector
    from perfmodel.scenario import Request

    pj = projector(Request(target="b300", gpus=8, concurrency=[1]))
    f = Factors(values={"floor.gemm": 0.5, "bw.moe": 10.0, "coll_lat.pcie": 3.0, "launch": 2.0, "engine_host_us": 250.0},
                sigma={"floor.gemm": 0.05, "coll_lat.pcie": 0.1}, gpus=("rtx-pro-6000-server",))
    m = calibrated(pj.machine, f)
    assert m.laws["gemm_bf16"].t0_us == pytest.approx(0.5 * pj.machine.laws["gemm_bf16"].t0_us)
    # a faster MoE engine cannot stream past the target's roof
    assert m.laws["moe_w4a16"].bw_GBps <= max(pj.machine.laws["moe_w4a16"].bw_GBps, m.roof_GBps) * (1 + 1e-9)
    # PCIe collective factors do not apply on NVLink, but widen its uncertainty
    assert m.all_reduce.latency_us == pj.machine.all_reduce.latency_us
    assert m.all_reduce.rel_unc_lat > pj.machine.all_reduce.rel_unc_lat
    assert m.overheads.graph_node_us == pytest.approx(2 * pj.machine.overheads.graph_node_us)
    assert m.overheads.engine_host_us == 250.0
    # a GPU the calibration never saw keeps the transfer rule's uncertainty on top of the posterior
    assert m.laws["gemm_bf16"].rel_unc_t0 > 0.05
    assert pj.machine.overheads.engine_host_us == 0.0  # the input machine is unchanged


def test_group_and_family_names():
    assert group_of("attention_mla") == "attention" and group_of("attention_gqa.verify") == "attention_verify"
    assert group_of("elementwise.rmsnorm") == "elementwise" and group_of("moe_w4a16") == "moe"
    assert link_family("pcie5") == "pcie" and link_family("nvlink4") == "nvlink" and link_family(None) is None


# ------------------------------------------------------------------------------ bad input
@pytest.mark.parametrize("kw,needle", [
    (dict(tokens_per_s_per_stream=1e6), "faster than physics"),
    (dict(target="nosuchgpu", step_ms=10.0), "nosuchgpu"),
    (dict(model="nosuchmodel", step_ms=10.0), "nosuchmodel"),
    (dict(model="llama-3.1-8b", gpus=1, parallel="ep", step_ms=10.0), "needs an MoE"),
])
def test_bad_points_name_the_point(kw, needle):
    with pytest.raises(CalibrationError, match=needle) as e:
        fit(CalibrationInput(engine="e", points=[_pt(**kw)]), PROFILE, "x")
    assert str(e.value).startswith("point 0 (")


@pytest.mark.parametrize("kw", [
    dict(step_ms=0.0), dict(step_ms=-1.0), dict(step_ms=math.nan), dict(step_ms=math.inf),
    dict(step_ms=1.0, tpot_ms=1.0), dict(), dict(step_ms=1.0, bogus=1), dict(step_ms=1.0, gpus=True),
    dict(step_ms=1.0, spec="ddtree"), dict(tokens_per_s=10.0, isl=128),
])
def test_schema_rejects(kw):
    with pytest.raises(ValueError):
        _pt(**kw)


def _cli(tmp_path, doc) -> tuple[int, str]:
    f = tmp_path / "obs.yaml"
    f.write_text(doc if isinstance(doc, str) else yaml.safe_dump(doc))
    r = runner.invoke(app, ["calibrate", str(f), "--out", str(tmp_path / "c.json")])
    return r.exit_code, r.output


@pytest.mark.parametrize("doc,needle", [
    ({"engine": "e", "points": [{"target": "h200", "model": "kimi-k2.6", "gpus": 8, "concurrency": 1, "step_ms": 0}]},
     "points.0.step_ms"),
    ({"engine": "e", "points": [{"target": "h200", "model": "kimi-k2.6", "gpus": 8, "concurrency": 1}]}, "exactly one of"),
    ({"engine": "e", "points": [{"target": "h200", "model": "kimi-k2.6", "gpus": 8, "concurrency": 1, "step_ms": 1,
                                 "colour": "red"}]}, "colour"),
    ({"engine": "e", "points": []}, "points"),
    ({"points": [{"target": "h200", "model": "kimi-k2.6", "concurrency": 1, "step_ms": 1}]}, "engine"),
    ({"engine": "e", "points": [{"target": "h200", "model": "kimi-k2.6", "gpus": 8, "concurrency": 1,
                                 "tokens_per_s_per_stream": 1e7}]}, "faster than physics"),
    ("engine: [unclosed", "malformed YAML"),
])
def test_cli_bad_input_one_line_exit_2(tmp_path, doc, needle):
    code, out = _cli(tmp_path, doc)
    assert code == 2 and "Traceback" not in out
    lines = [ln for ln in out.splitlines() if ln.strip()]
    assert len(lines) == 1 and needle in lines[0], out
    assert not (tmp_path / "c.json").exists()


def test_cli_duplicates_warn_and_keep_both(tmp_path):
    p = {"target": "h200", "model": "kimi-k2.6", "gpus": 8, "concurrency": 1, "context": 4096}
    code, out = _cli(tmp_path, {"engine": "e", "points": [p | {"step_ms": 20.0}, p | {"step_ms": 24.0}]})
    assert code == 0, out
    res = json.loads((tmp_path / "c.json").read_text())
    assert len(res["points"]) == 2 and any("both are kept" in w for w in res["warnings"])
    code, out = _cli(tmp_path, {"engine": "e", "points": [p | {"step_ms": 20.0}, p | {"step_ms": 20.0}]})
    warnings = json.loads((tmp_path / "c.json").read_text())["warnings"]
    assert code == 0 and not any("both are kept" in w for w in warnings)  # the same figure twice: no conflict


def test_calibration_json_feeds_project(tmp_path):
    pts = [{"target": "rtx-pro-6000", "model": "kimi-k2.6", "gpus": 8, "concurrency": c, "context": 8192,
            "tokens_per_s_per_stream": v} for c, v in ((1, 90.0), (8, 60.0))]
    code, out = _cli(tmp_path, {"engine": "my engine", "points": pts})
    assert code == 0, out
    cal = str(tmp_path / "c.json")
    plain = runner.invoke(app, ["project", "--target", "b300", "-c", "1", "-f", "json"])
    r = runner.invoke(app, ["project", "--target", "b300", "-c", "1", "-f", "json", "--calibration", cal])
    a, b = json.loads(plain.output), json.loads(r.output)
    assert b["describes"].startswith("calibrated to my engine from 2 points on 8x rtx-pro-6000")
    assert a["describes"].startswith("perfmodel kernels measured on NVIDIA H200")
    assert a["points"][0]["tokens_per_s_per_stream"] != b["points"][0]["tokens_per_s_per_stream"]
    assert set(b["calibration"]["factors"]) >= {"floor.gemm", "engine_host_us"}
    bad = runner.invoke(app, ["project", "--calibration", str(tmp_path / "nope.json")])
    assert bad.exit_code == 2 and "nope.json" in bad.output


def test_calibrated_tau_carries_its_posterior_sigma(tmp_path):
    """A calibration that pins τ down gives τ its posterior σ, not the preset's."""
    pts = [{"target": "rtx-pro-6000", "model": "kimi-k2.6", "gpus": 8, "concurrency": c, "context": 8192,
            "tokens_per_s_per_stream": v} for c, v in ((1, 98.0), (8, 60.0))]
    pts.append({"target": "rtx-pro-6000", "model": "kimi-k2.6", "gpus": 8, "concurrency": 1, "context": 8192,
                "spec": "ddtree", "budget": 16, "tokens_per_s_per_stream": 190.0})
    code, out = _cli(tmp_path, {"engine": "e", "points": pts})
    assert code == 0, out
    cal = json.loads((tmp_path / "c.json").read_text())
    tau = next(f for f in cal["factors"] if f["name"] == "tau")
    assert tau["determined"], tau
    args = ["project", "--target", "b300", "--spec", "ddtree", "--budget", "16", "-c", "1", "-f", "json"]
    plain = json.loads(runner.invoke(app, args).output)["points"][0]
    got = json.loads(runner.invoke(app, args + ["--calibration", str(tmp_path / "c.json")]).output)["points"][0]
    assert not plain["tau_measured"] and got["tau_measured"]
    assert got["tau_sigma"] == pytest.approx(got["tau"] * tau["sigma_post"], rel=1e-9)
    assert got["tau_sigma"] != pytest.approx(plain["tau_sigma"])


def test_schema_commands():
    for kind, key in (("calibration-input", "points"), ("calibration", "factors")):
        r = runner.invoke(app, ["schema", kind])
        assert r.exit_code == 0 and key in json.loads(r.output)["properties"]


# ------------------------------------------------------------------------------ benchmark files
def test_from_vllm_reads_median_tpot_and_concurrency():
    inp = from_bench_file(str(FIX / "vllm_bench_serve.json"), "vllm",
                          dict(target="h200", gpus=8, model="kimi-k2.6", parallel="tp"))
    p = inp.points[0]
    raw = json.loads((FIX / "vllm_bench_serve.json").read_text())
    assert p.tpot_ms == raw["median_tpot_ms"] and p.concurrency == raw["max_concurrency"]
    assert p.context == round((raw["total_input_tokens"] + raw["total_output_tokens"] / 2) / raw["completed"])


def test_from_sglang_reads_every_json_line():
    inp = from_bench_file(str(FIX / "sglang_bench_serving.jsonl"), "sglang",
                          dict(target="h200", gpus=8, model="kimi-k2.6", parallel="tp", concurrency=None))
    lines = [json.loads(x) for x in (FIX / "sglang_bench_serving.jsonl").read_text().splitlines() if x.strip()]
    assert len(inp.points) == len(lines) == 2
    for p, rec in zip(inp.points, lines):
        assert p.tpot_ms == rec["median_tpot_ms"] and p.concurrency == rec["max_concurrency"]


def test_a_vllm_sweep_gives_every_record_and_its_model():
    """`vllm bench serve --append-result` writes one JSON object per run: every run is a point,
    the model comes from model_id, and a run the memory model says cannot fit is fitted, with a
    warning saying by how much the memory model is off."""
    recs = [json.loads(x) for x in (FIX / "vllm_sweep.jsonl").read_text().splitlines() if x.strip()]
    inp = from_bench_file(str(FIX / "vllm_sweep.jsonl"), "vllm", dict(target="rtx-pro-6000", gpus=8))
    assert [p.concurrency for p in inp.points] == [r["max_concurrency"] for r in recs] == [1, 8, 32]
    assert {p.model for p in inp.points} == {"kimi-k2.6"}
    assert [p.tpot_ms for p in inp.points] == [r["median_tpot_ms"] for r in recs]
    res = fit(inp, PROFILE, "embedded")
    assert len(res.points) == 3
    mem = [w for w in res.warnings if "memory model" in w]
    assert len(mem) == 1 and "C=32" in mem[0] and "off by at least" in mem[0]
    over = float(mem[0].split("off by at least ")[1].split(" GB")[0])
    from perfmodel.model.layers import Layout
    from perfmodel.model.memory import memory_use
    from perfmodel.specs import registry

    m = memory_use(registry.load_model("kimi-k2.6"), registry.load_gpu("rtx-pro-6000"), Layout("tp", 8), inp.points[2].context)
    assert over == pytest.approx(m.weights_GB + m.kv_GB(32) - m.usable_GB, abs=0.05) and over > 0


def test_bench_files_several_and_with_a_yaml(tmp_path):
    obs = tmp_path / "obs.yaml"
    obs.write_text(yaml.safe_dump({"engine": "my engine", "points": [
        {"target": "rtx-pro-6000", "gpus": 8, "model": "kimi-k2.6", "parallel": "tp+ep", "concurrency": 1, "context": 8192,
         "tokens_per_s_per_stream": 65}]}))
    out = tmp_path / "c.json"
    second = tmp_path / "second.json"  # a --save-result file: one record
    second.write_text((FIX / "vllm_sweep.jsonl").read_text().splitlines()[1])
    r = runner.invoke(app, ["calibrate", str(obs), "--from-vllm", str(FIX / "vllm_sweep.jsonl"), "--from-vllm",
                            str(second), "--from-sglang", str(FIX / "sglang_bench_serving.jsonl"),
                            "--target", "rtx-pro-6000", "--gpus", "8", "--model", "kimi-k2.6", "--out", str(out), "-f", "json"])
    assert r.exit_code == 0, r.output
    res = json.loads(out.read_text())
    assert len(res["points"]) == 1 + 3 + 1 + 2 and res["engine"] == "my engine"
    labels = [p["label"] for p in res["points"]]
    assert sum("vllm_sweep.jsonl line" in x for x in labels) == 3 and sum("sglang_bench_serving" in x for x in labels) == 2
    assert sum(x.startswith("second.json") for x in labels) == 1


def test_a_model_id_that_is_no_preset_is_named(tmp_path):
    r = runner.invoke(app, ["calibrate", "--from-vllm", str(FIX / "vllm_bench_serve.json"), "--target", "h200", "--gpus", "8",
                            "--out", str(tmp_path / "c.json")])
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1
    assert "moonshotai/Kimi-K2-Instruct" in r.output and "--model" in r.output
    assert "does not say" not in r.output


def test_points_all_at_one_concurrency_warn_what_is_not_determined():
    """The reference user's two figures (TP8 and TP8 + EP8 at C=1, one machine): the output says
    every point is at C=1, one machine, more factors than points, and names the floor and
    bandwidth factors it cannot separate; no factor counts as pinned."""
    pts = [_pt(context=8192, tokens_per_s_per_stream=98.0), _pt(context=8192, parallel="tp+ep", tokens_per_s_per_stream=65.0)]
    res = fit(CalibrationInput(engine="e", points=pts), PROFILE, "embedded")
    text = " ".join(res.warnings)
    assert "1 token per step (C=1)" in text and "one machine" in text and f"{len(res.factors)} factors from 2 points" in text
    assert "no factor is pinned" in text
    groups = [set(u.factors) for u in res.undetermined]
    assert {"floor.moe", "bw.moe"} in groups
    assert not any(f.determined for f in res.factors)
    moe = next(f for f in res.factors if f.name == "bw.moe")
    assert moe.sigma_post < 0.7 * moe.sigma_prior  # narrow only as a combination with its floor
    # one layout and one point: the layout warning too
    one = fit(CalibrationInput(engine="e", points=pts[:1]), PROFILE, "embedded")
    assert any("one layout (8x tp)" in w for w in one.warnings)


def test_from_vllm_cli(tmp_path):
    r = runner.invoke(app, ["calibrate", "--from-vllm", str(FIX / "vllm_bench_serve.json"), "--target", "h200",
                            "--gpus", "8", "--model", "kimi-k2.6", "--out", str(tmp_path / "c.json"), "-f", "json"])
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "c.json").read_text())["engine"].startswith("vllm")
    missing = runner.invoke(app, ["calibrate", "--from-vllm", str(FIX / "vllm_bench_serve.json")])
    assert missing.exit_code == 2 and "--target" in missing.output and len(missing.output.strip().splitlines()) == 1


def test_bench_file_without_tpot_is_rejected(tmp_path):
    f = tmp_path / "r.json"
    f.write_text(json.dumps({"max_concurrency": 4}))
    with pytest.raises(CalibrationError, match="median_tpot_ms"):
        from_bench_file(str(f), "vllm", dict(target="h200", model="kimi-k2.6"))


# ------------------------------------------------------------------------------ the foreign stack
def test_foreign_points_and_the_calibration_pair():
    pts = points_from_foreign(PROFILE, "h200")
    assert len(pts) >= 24 and {p.model for p in pts} == {"llama-3.1-8b", "qwen3-30b-a3b"}
    a, b = calibration_pair(pts)
    one = [p.step_ms for p in pts if p.gpus == 1]
    assert pts[a].step_ms == min(one) and pts[b].step_ms == max(one)
    assert all(not p.host and p.lm_head for p in pts)


def test_load_input_example_from_readme():
    """The README's calibration example is valid input."""
    text = (Path(__file__).parents[1] / "README.md").read_text()
    block = "# OBSERVED.yaml" + text.split("```yaml\n# OBSERVED.yaml")[1].split("```")[0]
    inp = CalibrationInput.model_validate(yaml.safe_load(block))
    assert len(inp.points) == 4 and {p.parallel for p in inp.points} == {"tp", "tp-attn-ep-moe"}
    assert any(p.spec == "ddtree" for p in inp.points)


def test_validate_and_report_take_a_calibration(tmp_path):
    pts = [{"target": "h200", "model": "kimi-k2.6", "gpus": 8, "concurrency": 1, "context": 8192, "step_ms": 30.0}]
    code, out = _cli(tmp_path, {"engine": "slow engine", "points": pts})
    assert code == 0, out
    cal = str(tmp_path / "c.json")
    plain = runner.invoke(app, ["validate", "--tolerance", "10", "-f", "json"])
    r = runner.invoke(app, ["validate", "--calibration", cal, "--tolerance", "10", "-f", "json"])
    assert r.exit_code == 0, r.output
    a = {x["point"]: x["predicted"] for x in json.loads(plain.output)["rows"] if x["kind"] == "published"}
    b = {x["point"]: x["predicted"] for x in json.loads(r.output)["rows"] if x["kind"] == "published"}
    assert a.keys() == b.keys() and all(b[k] < a[k] for k in a)  # a slower engine: every figure lower
    rep = runner.invoke(app, ["report", "--target", "b300", "--gpus", "8", "--calibration", cal, "--out", str(tmp_path / "rep")])
    assert rep.exit_code == 0, rep.output
    md = next((tmp_path / "rep").glob("*_NOTES.md")).read_text()
    assert "Your figures (slow engine)" in md and "calibrated to slow engine from 1 point" in md.lower()


def test_projections_say_which_unpinned_factors_they_rest_on_and_widen(tmp_path):
    """Under the reference user's two C=1 figures, a projection to large C rests on MoE
    bandwidth, which those points do not pin: each point lists the unpinned factors its step
    depends on, and the interval is wider than if the same values had been pinned; the unpinned
    engine host term (fitted at 0 µs) widens the slow side only."""
    from perfmodel.api import project
    from perfmodel.calibrate import write_result
    from perfmodel.scenario import Request

    pts = [_pt(context=8192, tokens_per_s_per_stream=98.0), _pt(context=8192, parallel="tp+ep", tokens_per_s_per_stream=65.0)]
    res = fit(CalibrationInput(engine="e", points=pts), PROFILE, "embedded")
    write_result(res, tmp_path / "c.json")
    pinned = res.model_copy(update={"factors": [f.model_copy(update={"determined": True}) for f in res.factors]})
    write_result(pinned, tmp_path / "pinned.json")
    req = dict(target="b300", gpus=8, concurrency=[1, 128])
    loose = project(Request(**req, calibration=str(tmp_path / "c.json")))
    tight = project(Request(**req, calibration=str(tmp_path / "pinned.json")))
    c1, c128 = loose.points
    assert c1.unpinned_factors and c128.unpinned_factors
    assert abs(c128.unpinned_factors["bw.moe"]) > abs(c1.unpinned_factors.get("bw.moe", 0.0))
    assert abs(c128.unpinned_factors["bw.moe"]) > 0.3  # the large-C step rides on MoE bandwidth
    assert tight.points[1].unpinned_factors is None or not tight.points[1].unpinned_factors
    for a, b in zip(loose.points, tight.points):
        assert a.tokens_per_s_per_stream == pytest.approx(b.tokens_per_s_per_stream)  # same values, other σ
        lo_a, hi_a = a.interval.tokens_per_s_per_stream
        lo_b, hi_b = b.interval.tokens_per_s_per_stream
        assert hi_a / lo_a > hi_b / lo_b
        s_lo, s_hi = a.interval.step_ms
        assert s_hi - a.step_ms > a.step_ms - s_lo  # the host term can only add time
    assert loose.calibration["undetermined"] and any("1 token per step" in w for w in loose.calibration["warnings"])


def test_soft_l1_keeps_one_far_off_point_from_pulling_the_fit():
    """Six points made with 400 µs of host time per step, one of them then read 3x slower (a
    mechanism the model lacks): least squares moves the host time far to meet it (about 8x), soft_l1
    stays within 25% of the truth and leaves the outlier missed; the loss is written to calib.json only
    when it is not the default."""
    truth = Factors(values={"engine_host_us": 400.0})
    pts = []
    for c in (1, 2, 4, 8, 16, 32):
        p = _pt(model="llama-3.1-8b", gpus=1, concurrency=c, step_ms=1000.0)
        pts.append(p.model_copy(update={"step_ms": prepare(0, p, PROFILE).predict(truth) * (3.0 if c == 8 else 1.0)}))
    got = {}
    for loss in ("squares", "soft_l1"):
        res = fit(CalibrationInput(engine="e", points=pts, factors=["engine_host_us"], loss=loss), PROFILE, "x")
        got[loss] = res
    host = {k: r.factors[0].value for k, r in got.items()}
    assert host["soft_l1"] == pytest.approx(400.0, rel=0.25)
    assert abs(host["squares"] - 400.0) > 4 * abs(host["soft_l1"] - 400.0)
    assert got["soft_l1"].loss == "soft_l1" and json.loads(got["soft_l1"].model_dump_json())["loss"] == "soft_l1"
    assert "loss" not in json.loads(got["squares"].model_dump_json())


def test_cauchy_keeps_a_far_off_group_from_setting_the_fit():
    """Eight points made with 400 µs of host time per step, two of them then read 4x slower (a
    group the model misses by far, as a stalled system's rows): soft_l1 still moves the host time
    toward them, cauchy stays within 20% of the truth and at most half as far from it as soft_l1; the loss is written
    to calib.json."""
    truth = Factors(values={"engine_host_us": 400.0})
    pts = []
    for c in (1, 2, 4, 8, 16, 32, 64, 128):
        p = _pt(model="llama-3.1-8b", gpus=1, concurrency=c, step_ms=1000.0)
        pts.append(p.model_copy(update={"step_ms": prepare(0, p, PROFILE).predict(truth) * (4.0 if c in (2, 32) else 1.0)}))
    got = {loss: fit(CalibrationInput(engine="e", points=pts, factors=["engine_host_us"], loss=loss), PROFILE, "x")
           for loss in ("soft_l1", "cauchy")}
    host = {k: r.factors[0].value for k, r in got.items()}
    assert host["cauchy"] == pytest.approx(400.0, rel=0.2)
    assert abs(host["soft_l1"] - 400.0) > 2 * abs(host["cauchy"] - 400.0)
    assert json.loads(got["cauchy"].model_dump_json())["loss"] == "cauchy"


def test_a_held_out_error_is_that_of_the_fit_without_the_point():
    """Leave-one-out is what a user holding only the other points gets: each held-out error equals
    the error of `fit` run on the rest alone (same loss, same start, same restart at a bound), with
    cauchy's several minima too. Eight points: three with 400 µs of host time per step, five with
    2500; the whole fit lands near 400, and leaving out one of the three (at 4 or 16) hands the fit
    to the other group's minimum."""
    pts = []
    cs = (1, 2, 4, 8, 16, 32, 64, 128)
    for c in cs:
        p = _pt(model="llama-3.1-8b", gpus=1, concurrency=c, step_ms=1000.0)
        host = Factors(values={"engine_host_us": 2500.0 if c in (1, 2, 8, 32, 128) else 400.0})
        pts.append(p.model_copy(update={"step_ms": prepare(0, p, PROFILE).predict(host)}))
    whole = fit(CalibrationInput(engine="e", points=pts, factors=["engine_host_us"], loss="cauchy"), PROFILE, "x")
    assert whole.factors[0].value < 1000
    moved = False
    for i in (0, 2, 4):
        rest = fit(CalibrationInput(engine="e", points=pts[:i] + pts[i + 1:], factors=["engine_host_us"], loss="cauchy"),
                   PROFILE, "x")
        moved |= rest.factors[0].value > 2000
        f = Factors(values={"engine_host_us": rest.factors[0].value})
        alone = prepare(0, pts[i], PROFILE).predict(f) / pts[i].step_ms - 1
        assert whole.points[i].loo_err == pytest.approx(alone, abs=1e-3), i
    assert moved  # the case has more than one minimum
