"""`perfmodel.published_serving`: the shipped published serving points parse under the strict input
layer, every point names a source that hwspecs/SOURCES.md lists, each is expressed as a serving
request by the stated rules or refused with its reason, and a three-point fixture (copied from the
shipped file) prices through the serving simulation, from the API and from the CLI."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from perfmodel import published_serving as ps
from perfmodel.cli import app
from perfmodel.inputs import InputError
from perfmodel.silicon import NotExpressible

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "fixtures" / "published_serving" / "three_points.yaml"


@pytest.fixture(scope="module")
def shipped():
    return ps.load()


def test_shipped_points_parse_and_each_has_a_cited_source(shipped):
    sources_md = (ROOT / "hwspecs" / "SOURCES.md").read_text()
    assert len(shipped) >= 60
    for p in shipped:
        assert p.source.url.startswith("https://") and p.run_url.startswith(ps.RUN_URL)
        sid = p.source.cite.rsplit("[", 1)[1].rstrip("]")
        assert f"- {sid} " in sources_md, f"{p.id}: {sid} is not in hwspecs/SOURCES.md's list"
        row = p.source.cite.split("row ", 1)[1].split()[0]
        assert f"\n| {row} |" in sources_md, f"{p.id}: Part 3 row {row} missing"
    assert len({p.id for p in shipped}) == len(shipped)


def test_shipped_points_span_engines_and_gpus_and_refusals_have_reasons(shipped):
    ok, refused = ps.express_all(shipped)
    assert {o.engine for _, o in ok} >= {"trtllm", "sglang"}
    assert len({o.target for _, o in ok}) >= 4
    assert {o.parallel for _, o in ok} >= {"tp", "tp-attn-ep-moe"}
    assert all(why for _, why in refused)
    assert len(ok) + len(refused) == len(shipped)


def test_fixture_points_are_copies_of_shipped_ones(shipped):
    index = {(p.setup, p.point) for p in shipped}
    for p in ps.load(str(FIXTURE)):
        assert (p.setup, p.point) in index, f"{p.id} differs from the shipped record"


def _one(**setup) -> ps.Published:
    base = dict(source="s", framework="trt", hardware="h200", model="dsr1", precision="fp8", tp=8, ep=1, dp_attention=False,
                run="1/attempts/1")
    src = ps.Source(cite="c", url="https://x", what="w")
    pt = ps.Point(isl=8192, osl=1024, conc=32, mean_ttft_s=1.0, mean_tpot_s=0.02)
    return ps.Published(id="p", setup=ps.Setup(**(base | setup)), point=pt, source=src)


def test_express_layouts_dtypes_and_trtllm_budget():
    o = ps.express(_one())
    assert (o.target, o.gpus, o.model, o.parallel, o.engine, o.concurrency) == ("h200-sxm", 8, "deepseek-v3", "tp", "trtllm", 32)
    assert o.dtypes == {"kv_cache": "fp8"} and (o.ttft_ms, o.tpot_ms) == (1000.0, 20.0)
    assert o.max_batched_tokens == 8192 + 32  # no script known: the smallest budget that serves it (silicon's rule)
    # an InferenceX run: its script's (32 + 8192 + 64) rounded up to 64, above its floor of 8192 from 2026-01-21
    assert ps.express(_one(source="inferencex", date="2026-02-03")).max_batched_tokens == 8320
    assert ps.express(_one(ep=8)).parallel == "tp-attn-ep-moe"
    assert ps.express(_one(ep=8, dp_attention=True)).parallel == "ep"
    assert ps.express(_one(ep=4)).parallel == "tp8+tp2xep4"  # built as the silicon rows' layouts
    o = ps.express(_one(framework="sglang", hardware="b300", precision="fp4", tp=4, ep=4))
    assert (o.gpus, o.engine, o.max_batched_tokens, o.dtypes["routed_experts"]) == (4, "sglang", None, "nvfp4")
    assert ps.express(_one(framework="sglang", hardware="mi355x", precision="fp4")).dtypes["routed_experts"] == "mxfp4"


@pytest.mark.parametrize("setup,words", [
    (dict(disagg=True), "disaggregated"), (dict(is_multinode=True), "multi-node"), (dict(spec_method="mtp"), "mtp"),
    (dict(framework="atom"), "framework atom"), (dict(hardware="tpu7"), "hardware tpu7"), (dict(model="qwen3.5"), "qwen3.5"),
    (dict(ep=3), "layout tp8 ep3")])
def test_not_expressible_says_why(setup, words):
    with pytest.raises(NotExpressible, match=words):
        ps.express(_one(**setup))


def test_a_source_must_be_declared_and_every_point_needs_a_run(tmp_path):
    import yaml

    doc = yaml.safe_load(FIXTURE.read_text())
    doc["groups"][0]["setup"]["source"] = "elsewhere"
    p = tmp_path / "bad.yaml"
    p.write_text(yaml.safe_dump(doc))
    with pytest.raises(InputError, match="elsewhere"):
        ps.load(str(p))
    doc = yaml.safe_load(FIXTURE.read_text())
    del doc["groups"][0]["points"][0]["run"]
    p.write_text(yaml.safe_dump(doc))
    with pytest.raises(InputError, match="no run"):
        ps.load(str(p))


def test_fixture_prices_through_the_serving_simulation():
    res = ps.run_published_serving(path=str(FIXTURE))
    assert res["counts"] == {"points": 3, "expressed": 2, "priced": 2}
    assert list(res["not_expressed"]) == ["disaggregated: perfmodel simulates aggregated serving only"]
    for p in res["points"]:
        q, m = p["predicted"]["local"], p["measured"]
        assert all(math.isfinite(q[k]) and q[k] > 0 for k in ("ttft_ms", "tpot_ms"))
        assert m["tpot_ms"] in (0.020394357973332444 * 1e3, 0.008210824423650533 * 1e3)
    overall = next(s for s in res["summary"] if s["by"] == "overall")
    errs = sorted(abs(p["predicted"]["local"]["tpot_ms"] / p["measured"]["tpot_ms"] - 1) for p in res["points"])
    assert overall["tpot"]["n"] == 2 and overall["tpot"]["median_abs"] == pytest.approx(sum(errs) / 2)
    assert {s["group"] for s in res["summary"] if s["by"] == "engine"} == {"trtllm", "sglang"}


def test_cli_prints_each_point_and_filters():
    r = CliRunner().invoke(app, ["validate", "--published-serving", "--serving-file", str(FIXTURE), "--tolerance", "10"])
    assert r.exit_code == 0, r.output
    assert "inferencex-h200-trt-dsr1-fp8-tp8ep1-1024x1024-c16" in r.stdout and "not expressed: 1 disaggregated" in r.stdout
    r = CliRunner().invoke(app, ["validate", "--published-serving", "--serving-file", str(FIXTURE), "--engine", "sglang",
                                 "--tolerance", "10", "-f", "json"])
    assert r.exit_code == 0, r.output
    assert [p["engine"] for p in json.loads(r.stdout)["points"]] == ["sglang"]


@pytest.mark.parametrize("argv,words", [
    (["--serving-file", "x.yaml"], "--serving-file goes with --published-serving"),
    (["--published-serving", "--silicon"], "choose one of"),
    (["--published-serving", "--calibration", "c.json"], "uncalibrated"),
    (["--model", "dsr1"], "--model goes with"),
])
def test_cli_option_misuse_is_one_line(argv, words):
    r = CliRunner().invoke(app, ["validate", *argv])
    assert r.exit_code == 2 and words in r.stderr and len(r.stderr.strip().splitlines()) == 1
