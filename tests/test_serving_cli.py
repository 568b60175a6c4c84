"""`perfmodel step` (any batch) and `project --isl/--osl` (whole requests) from the command line
and the Python API: options, outputs and one-line errors."""

import json

import pytest
from typer.testing import CliRunner

import perfmodel
from perfmodel.cli import app
from perfmodel.errors import ProjectionError


def _run(*args):
    return CliRunner().invoke(app, list(args))


def test_step_prices_a_mixed_batch_as_its_parts_add_up():
    dec = perfmodel.step(target="b300", gpus=8, decode=["64@8192"])
    pre = perfmodel.step(target="b300", gpus=8, prefill=["1x2048@0"])
    mix = perfmodel.step(target="b300", gpus=8, decode=["64@8192"], prefill=["1x2048@0"])
    # one pass reads the weights once: the mixed step costs less than the two apart, more than either
    assert max(dec.step_ms, pre.step_ms) < mix.step_ms < dec.step_ms + pre.step_ms
    assert mix.tokens == 64 + 2048 and mix.interval["step_ms"][0] < mix.step_ms < mix.interval["step_ms"][1]
    assert not any("no measured prefill law" in a for a in pre.assumptions)  # the embedded profile measured them
    bare = perfmodel.step(target="b300", gpus=8, prefill=["1x2048@0"], profile="spec")
    assert any("no measured prefill law" in a for a in bare.assumptions)  # a profile without them says so


def test_step_cli_json_and_errors():
    r = _run("step", "--target", "h200", "--gpus", "8", "--decode", "8@4096", "--verify", "8x9@4096", "--spec", "ddtree",
             "--format", "json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert {"step_ms", "breakdown_ms", "interval"} <= set(d) and d["breakdown_ms"]["draft"] > 0  # the drafter ran
    for args, word in ((("--decode", "8x@1"), "--decode"), (("--prefill", "0x10@0"), "--prefill"), ((), "--decode"),
                       (("--decode", "1@1", "--logits", "some"), "--logits")):
        r = _run("step", *args)
        assert r.exit_code == 2 and word in r.output and "Traceback" not in r.output, (args, r.output)


def test_project_serves_whole_requests():
    proj = perfmodel.project(target="b300", gpus=8, isl=1024, osl=1024, concurrency=[1, 32])
    a, b = (p.serving for p in proj.points)
    assert proj.context == 1024 + 512  # the mean decode context of a request
    assert b.tpot_ms["mean"] > a.tpot_ms["mean"] and b.tokens_per_s_per_gpu > a.tokens_per_s_per_gpu
    for s in (a, b):
        assert s.interval["ttft_ms"][0] < s.ttft_ms["median"] < s.interval["ttft_ms"][1]
        assert s.tokens_per_s_per_user == pytest.approx(1000 / s.tpot_ms["mean"])
    longer = perfmodel.project(target="b300", gpus=8, isl=8192, osl=1024, concurrency=[1]).points[0].serving
    assert longer.ttft_ms["median"] > a.ttft_ms["median"]


def test_project_serving_options_and_errors(tmp_path):
    lengths = tmp_path / "lengths.json"
    lengths.write_text(json.dumps([[512, 128], [2048, 256]]))
    r = _run("project", "--target", "b300", "--lengths-file", str(lengths), "--engine", "sglang", "--concurrency", "4",
             "--format", "json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["points"][0]["serving"]["engine"] == "sglang"
    bad = tmp_path / "bad.json"
    bad.write_text("[[1, 0]]")
    for args, word in ((("--isl", "1024"), "--osl"), (("--max-batched-tokens", "512"), "--isl"),
                       (("--lengths-file", str(bad)), "--lengths-file"), (("--isl", "8", "--osl", "8", "--engine", "tgi"), "--engine"),
                       (("--isl", "8", "--osl", "8", "--prefix-hit", "1"), "--prefix-hit"),
                       (("--min-length-ratio", "0.8"), "--min-length-ratio"),
                       (("--isl", "8", "--osl", "8", "--min-length-ratio", "1.5"), "--min-length-ratio")):
        r = _run("project", "--concurrency", "1", *args)
        assert r.exit_code == 2 and word in r.output and "Traceback" not in r.output, (args, r.output)
    with pytest.raises(ProjectionError):
        perfmodel.step(target="b300")


@pytest.mark.parametrize("dtype, word", [("kv_cache=fp3", "'fp8'"), ("kv=fp8", "not a dtype"), ("kv_cache", "name=dtype")])
def test_dtype_option_errors_are_one_line(dtype, word):
    r = _run("project", "--model", "deepseek-v3", "--target", "b200", "--dtype", dtype, "--concurrency", "1")
    assert r.exit_code == 2 and word in r.output and r.output.strip().count("\n") == 0, r.output


def test_fp8_kv_and_fp4_experts_move_the_step_the_right_way():
    base = perfmodel.project(target="b200", gpus=8, model="deepseek-v3", concurrency=[64]).points[0]
    kv8 = perfmodel.project(target="b200", gpus=8, model="deepseek-v3", concurrency=[64], dtypes={"kv_cache": "fp8"}).points[0]
    fp4 = perfmodel.project(target="b200", gpus=8, model="deepseek-v3", concurrency=[64],
                            dtypes={"routed_experts": "nvfp4"}).points[0]
    assert kv8.breakdown_ms["attention"] < base.breakdown_ms["attention"] and kv8.memory_GB.kv < base.memory_GB.kv
    assert fp4.memory_GB.weights < base.memory_GB.weights and fp4.step_ms < base.step_ms


def test_compare_serves_and_plots_the_pareto(tmp_path):
    pytest.importorskip("matplotlib")
    plot = tmp_path / "pareto.png"
    r = _run("compare", "--target", "h200,b300", "--gpus", "8", "--isl", "1024", "--osl", "256", "--concurrency", "1,32",
             "--format", "json", "--plot", str(plot))
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["workload"] == "ISL/OSL 1024/256" and all(row["ttft_ms"] > 0 and row["tokens_per_s_per_user"] > 0 for row in d["rows"])
    assert plot.stat().st_size > 10_000


def test_kv_that_does_not_fit_at_once_is_queued_as_an_engine_queues_it():
    """Whole requests whose KV at C does not fit beside the weights are served as the engines serve
    them (the pool's worth admitted, the rest queued: KV-limited), with a warning; a decode point
    at C still does not fit."""
    kw = dict(target="h200", gpus=8, model="deepseek-v3", parallel="tp", concurrency=[256])
    pt = perfmodel.project(**kw, isl=8192, osl=64, engine="sglang").points[0]
    assert not pt.fits_in_memory and pt.serving is not None and pt.serving.kv_limited
    assert "queues the rest" in pt.note and pt.serving.tpot_ms["mean"] > 0
    dec = perfmodel.project(**kw, context=8192).points[0]
    assert not dec.fits_in_memory and dec.step_ms is None and dec.serving is None


def test_weights_above_the_default_memory_share_load_with_a_smaller_reserve():
    """DeepSeek-V3 FP8 on 4 B200s (168 GB of weights per GPU, above 90% of 180 GB) ran in the
    silicon sample: priced with a 5% reserve, the rest beside the weights its KV pool; weights
    above that still refuse, in one line."""
    from perfmodel.model.layers import Layout
    from perfmodel.model.memory import MIN_RESERVE_FRACTION, memory_use
    from perfmodel.specs import registry
    from perfmodel.specs.schema import ModelDtypes

    gpu = registry.load_gpu("b200")
    m = registry.load_model("deepseek-v3")
    fp8 = m.model_copy(update={"dtypes": ModelDtypes(attention="fp8", routed_experts="fp8", shared_experts="fp8",
                                                     dense_mlp="fp8", kv_cache="fp8")})
    mem = memory_use(fp8, gpu, Layout("tp", 4), 8192)
    assert mem.usable_GB == pytest.approx(gpu.memory.usable_GB.value * (1 - MIN_RESERVE_FRACTION))
    assert 0.9 * gpu.memory.usable_GB.value < mem.weights_GB < mem.usable_GB and mem.max_concurrency >= 1
    with pytest.raises(ProjectionError, match="does not fit"):
        perfmodel.project(target="b200", gpus=2, model="deepseek-v3", concurrency=[1])
