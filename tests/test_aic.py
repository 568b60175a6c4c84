"""aiconfigurator's per-op database as profiles (perfmodel.aic) and the transfer check (perfmodel.transfer),
on the rows copied into tests/fixtures/aic/ (README.md there): neither the package nor the network is needed.
The last tests read the installed package and skip without it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from perfmodel import aic
from perfmodel.cli import app
from perfmodel.collective_math import bus_factor
from perfmodel.model.layers import gemm_op, mla_attention_op
from perfmodel.model.machine import build_machine
from perfmodel.model.step import price_op
from perfmodel.profile import load_profile, save_profile
from perfmodel.request import resolve_profile
from perfmodel.specs import registry

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "aic"
ROWS = FIXTURE / "systems" / "data"


@pytest.fixture(scope="module")
def db() -> aic.Database:
    return aic.Database(FIXTURE / "systems", (FIXTURE / "VERSION").read_text().strip())


@pytest.fixture(scope="module")
def local():
    return resolve_profile(None)


@pytest.fixture(scope="module")
def b300_sglang(db, local):
    return aic.import_profile(db, "b300_sxm", "sglang@0.5.14", local)


def _csv(path: Path) -> list[dict]:
    return aic._read_table(path)


def test_the_fixture_reads_like_the_package(db):
    assert db.systems() == ["b300_sxm", "h200_sxm"]
    assert db.versions("b300_sxm", "sglang") == ["0.5.14"] and db.versions("b300_sxm", "vllm") == []
    assert db.current("b300_sxm", "sglang") == "0.5.14"  # query_versions.yaml's maintained version
    # a newer version without its own table is served by the newest older one (the package's backward fill)
    path, version = db.table("b300_sxm", "sglang", "0.5.16", "gemm")
    assert version == "0.5.14" and path.name == "gemm_perf.csv"
    assert db.table("b300_sxm", "sglang", "0.5.10", "gemm") is None  # never forward
    assert db.nccl_table("b300_sxm").parent.name == "2.27"  # the system's NCCL version


def test_every_mapped_system_has_a_gpu_spec():
    for gpu in aic.SYSTEM_GPUS.values():
        registry.load_gpu(gpu)


@pytest.mark.parametrize("system, engine, says", [
    ("b301", "sglang", "--system 'b301'"), ("b300_sxm", "foo", "unknown engine 'foo'"),
    ("b300_sxm", "sglang@0.5.9", "not 0.5.9"), ("b300_sxm", "vllm", "no vllm tables")])
def test_bad_system_or_engine_is_one_line(db, system, engine, says):
    with pytest.raises(aic.AicError) as e:
        aic.resolve(db, system, engine)
    assert says in str(e.value) and "\n" not in str(e.value)


def test_balanced_routing_counts_the_experts_it_reads():
    # the database's rule: token t's i-th pick is expert (t + i*ceil(E/k)) mod E, spread out below that stride
    assert aic.balanced_experts(1, 8, 2) == 2  # experts 0 and 4
    assert aic.balanced_experts(2, 8, 2) == 4  # 0, 4 and 2, 6
    assert aic.balanced_experts(4, 8, 2) == 8  # T >= stride: t + {0, 4} covers all 8
    assert aic.balanced_experts(3, 384, 8) == 24  # 3 tokens x 8 distinct picks, far apart


def test_points_are_the_steps_ops_with_the_rows_times(db):
    pts, tables = aic.points(db, "b300_sxm", "sglang", "0.5.14")
    row = next(r for r in _csv(ROWS / "b300_sxm/gemm/sglang/0.5.14/gemm_perf.csv") if r["gemm_dtype"] == "bfloat16")
    p = next(p for p in pts["gemm"] if p.shape == {"name": f"N{row['n']}_K{row['k']}", "M": row["m"], "N": row["n"], "K": row["k"]}
             and p.dtype == "bfloat16")
    assert p.t_us == pytest.approx(row["latency"] * 1e3)
    assert p.op.bytes == gemm_op(row["m"], row["k"], row["n"], "bf16").bytes == 2.0 * (row["n"] * row["k"] + row["m"] * (row["k"] + row["n"]))
    mla = next(p for p in pts["mla_decode"] if p.shape["C"] == 8 and p.shape["L"] == 4095 and p.dtype == "bfloat16")
    assert mla.op.bytes == mla_attention_op(8, 1, 4095, 8, 512, 64, 2.0).bytes
    assert tables["gemm"] == "aiconfigurator_core/systems/data/b300_sxm/gemm/sglang/0.5.14/gemm_perf.csv"
    assert tables["device"] == "NVIDIA B300 SXM6 AC"
    # the eager and graph-captured custom all-reduce apart, messages in bf16 elements
    ar = [p for p in pts["custom_allreduce"] if p.n_gpus == 8]
    assert {p.graph for p in ar} == {True, False} and all(p.bytes_per_gpu == 2 * p.shape["elements"] for p in ar)


def test_import_records_where_every_law_came_from(b300_sglang, local):
    prof = b300_sglang
    pv, im = prof.provenance, prof.provenance.imported
    assert (pv.kind, pv.gpu_spec, pv.gpu_name) == ("measured", "b300-sxm", "NVIDIA B300 SXM6 AC")
    assert (im.database, im.database_version, im.licence, im.system, im.engine, im.engine_version) == \
        ("aiconfigurator-core", "0.12.0", "Apache-2.0", "b300_sxm", "sglang", "0.5.14")
    classes = {"gemm_bf16": "bfloat16", "gemm_fp8": "fp8+fp8_block", "moe_bf16": "bfloat16", "moe_w4a16": "int4_wo",
               "moe_fp8": "fp8_block", "attention_gqa": "bfloat16", "attention_mla": "bfloat16"}
    prefill = {f"{c}.prefill": d for c, d in classes.items() if not c.startswith("gemm")}  # the prefill rows' laws
    assert set(prof.fits) == set(classes) | set(prefill)
    assert im.dtypes == classes | prefill
    assert im.tables["attention_mla.prefill"].endswith("b300_sxm/mla/sglang/0.5.14/context_mla_perf.csv")
    assert im.tables["moe_w4a16"].endswith("b300_sxm/moe/sglang/0.5.14/moe_perf.csv") and "all_reduce" in im.tables
    assert im.lacks == ["elementwise"]
    # the fallback: the local profile's elementwise laws only, and its provenance
    assert prof.fallback.provenance == local.provenance and prof.fallback.benches == {}
    assert prof.fallback.fits and all(k.startswith("elementwise") for k in prof.fallback.fits)
    assert prof.fallback.fits["elementwise"] == local.fits["elementwise"]
    assert prof.overheads.graph_node_us == local.overheads.graph_node_us and "fallback profile" in prof.overheads.source
    assert {(c.n_gpus, c.graph, c.link) for c in prof.collectives} == {(2, True, "nvlink5"), (2, False, "nvlink5"),
                                                                       (8, True, "nvlink5"), (8, False, "nvlink5")}
    # samples under the step's probes' bench and provider, the engine's kernel beside
    gemm = prof.benches["gemm"].samples
    assert len(gemm) == 3 * 11 and {s.provider for s in gemm} == {"torch.matmul"}
    assert {s.model_extra["kernel_source"] for s in gemm} == {"sglang_torch_linear"}
    assert prof.ceilings.bf16_TFLOPS and prof.ceilings.fp8_TFLOPS > prof.ceilings.bf16_TFLOPS


def test_an_imported_profile_prices_its_own_rows_on_its_gpu(b300_sglang):
    """On the system's GPU an op the database timed is priced from its row (lookup.py: along M the
    running maximum, so that more rows never take less time), graph nodes included."""
    b300, h200, mk = registry.load_gpu("b300-sxm"), registry.load_gpu("h200-sxm"), registry.load_memory_kinds()
    m = build_machine(b300, 1, None, b300_sglang, b300, mk, fallback_gpu=h200)
    rows = sorted((r for r in _csv(ROWS / "b300_sxm/gemm/sglang/0.5.14/gemm_perf.csv") if r["gemm_dtype"] == "bfloat16"),
                  key=lambda r: (r["n"], r["k"], r["m"]))
    for r in rows:
        curve = max(x["latency"] for x in rows if (x["n"], x["k"]) == (r["n"], r["k"]) and x["m"] <= r["m"])
        assert price_op(m, gemm_op(r["m"], r["k"], r["n"], "bf16")) == pytest.approx(curve * 1e3, rel=1e-9)
        if r["m"] == 1024:  # the streaming end of each curve is its own row
            assert curve == r["latency"]
    r = next(r for r in _csv(ROWS / "b300_sxm/mla/sglang/0.5.14/generation_mla_perf.csv")
             if (r["batch_size"], r["step"], r["kv_cache_dtype"]) == (8, 4095, "bfloat16"))
    assert price_op(m, mla_attention_op(8, 1, 4095, 8, 512, 64, 2.0)) == pytest.approx(r["latency"] * 1e3, rel=1e-9)


def test_classes_the_database_lacks_take_the_local_profiles_transferred_law(b300_sglang, local):
    b300, h200, mk = registry.load_gpu("b300-sxm"), registry.load_gpu("h200-sxm"), registry.load_memory_kinds()
    imp = build_machine(b300, 1, None, b300_sglang, b300, mk, fallback_gpu=h200)
    ref = build_machine(b300, 1, None, local, h200, mk)
    for key in ("elementwise", "elementwise.rmsnorm", "elementwise.router_topk"):
        a, b = imp.laws[key], ref.laws[key]
        assert (a.t0_us, a.bw_GBps, a.tflops, a.bw_l2_GBps, a.graph_nodes) == (b.t0_us, b.bw_GBps, b.tflops, b.bw_l2_GBps, b.graph_nodes)
        assert a.rule.startswith("transferred from the fallback profile (measured on NVIDIA H200")
    assert imp.laws["gemm_bf16"].rule.startswith("imported (aiconfigurator-core 0.12.0: b300_sxm, sglang 0.5.14")
    # without the fallback's GPU, a lacking class is spec-derived, and its rule says so
    bare = build_machine(b300, 1, None, b300_sglang, b300, mk)
    assert bare.laws["elementwise"].rule.startswith("spec-derived") and "elementwise.rmsnorm" not in bare.laws


def test_project_prices_with_the_imported_profile(b300_sglang, tmp_path):
    from perfmodel.api import project
    from perfmodel.scenario import Request

    path = tmp_path / "b300-sglang.json"
    save_profile(b300_sglang.model_dump(mode="json", exclude_none=True), path)
    assert load_profile(path).provenance.imported == b300_sglang.provenance.imported
    kw = dict(target="b300", gpus=8, model="kimi-k2.6", concurrency=[1, 8])
    res = project(Request(profile=str(path), **kw))
    assert "imported from aiconfigurator-core 0.12.0" in res.describes and "elementwise from the fallback profile" in res.describes
    assert res.rules["moe_w4a16"].startswith("imported (") and res.rules["elementwise"].startswith("transferred from the fallback")
    assert "8 GPUs over nvlink5 (aiconfigurator-core 0.12.0" in res.rules["all_reduce"]
    assert res.points[0].step_ms != project(Request(**kw)).points[0].step_ms  # the database's numbers are used


def test_transfer_check_on_the_fixture(db):
    from perfmodel.transfer import _Machines, run_transfer

    res = run_transfer(db=db)
    by = {(r["system"], r["op"], r["dtype"]): r for r in res["rows"]}
    assert {r["system"] for r in res["rows"]} == {"b300_sxm", "h200_sxm"}
    # on the H200 itself the imported H200 rows price their ops from their own samples: exact where a
    # curve rises (MLA, GQA), never below a row where it dips (the GEMMs at small M: lookup's running maximum)
    for op in ("mla_decode", "attention_decode"):
        assert by[("h200_sxm", op, "bfloat16")]["aic-h200"]["max_abs_err"] < 1e-9
    assert by[("h200_sxm", "gemm", "bfloat16")]["aic-h200"]["bias"] >= 0
    assert by[("b300_sxm", "gemm", "bfloat16")]["local"]["n"] == 33
    # the expert-parallel MoE rows are samples only, not rows the check prices: the fp8_block group
    # holds the TP rows alone
    moe = [p for p in aic.points(db, "b300_sxm", "sglang", "0.5.14", kinds={"moe"})[0]["moe"] if p.dtype == "fp8_block"]
    assert any("ep" in p.shape for p in moe)
    assert by[("b300_sxm", "moe", "fp8_block")]["local"]["n"] == sum("ep" not in p.shape for p in moe)
    # an all-reduce on 8 B300s: the local profile has no collectives, so the nvlink5 spec's law
    link = registry.load_link("nvlink5-nvswitch")
    pts, _ = aic.points(db, "b300_sxm", "sglang", "0.5.14", kinds={"custom_allreduce"})
    p = max((p for p in pts["custom_allreduce"] if p.n_gpus == 8 and p.graph), key=lambda p: p.bytes_per_gpu)
    want = link.calibrated.allreduce_latency_us.value + p.bytes_per_gpu * bus_factor("all_reduce", 8) / (
        link.calibrated.allreduce_busbw_GBps.value * 1e3)
    m = _Machines(resolve_profile(None), registry.load_gpu("b300-sxm"), registry.load_memory_kinds())
    assert m.price(p)[0] == pytest.approx(want, rel=1e-12)
    bf16 = next(e for e in res["summary"] if (e["op"], e["dtype"], e["memory"]) == ("gemm", "bfloat16", "HBM"))
    assert bf16["systems"] == ["b300_sxm", "h200_sxm"]
    assert bf16["local"]["rows"] == sum(r["n"] for r in res["rows"] if (r["op"], r["dtype"]) == ("gemm", "bfloat16"))


# ------------------------------------------------------------------------------ the command line
runner = CliRunner()


@pytest.fixture
def cli_db(monkeypatch, db):
    monkeypatch.setattr(aic.Database, "installed", classmethod(lambda cls: db))


def test_cli_list_and_import(cli_db, tmp_path):
    r = runner.invoke(app, ["profile", "import-aic", "--list", "--format", "csv"])
    assert r.exit_code == 0, r.output
    assert "b300_sxm,b300-sxm,sglang,0.5.14" in r.output
    out = tmp_path / "b300-sglang.json"
    r = runner.invoke(app, ["profile", "import-aic", "--system", "b300_sxm", "--engine", "sglang@0.5.14", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "elementwise           not in the database" in r.output and load_profile(out).provenance.gpu_spec == "b300-sxm"
    assert "attention_mla.prefill imported: bfloat16 rows of aiconfigurator_core/systems/data/b300_sxm/mla/sglang/0.5.14/" \
           "context_mla_perf.csv (trtllm_mla)" in r.output
    moe = load_profile(out).benches["moe"].samples
    ep = sum("ep" in s.shape for s in moe)
    assert ep and f"{len(moe)} moe samples kept for lookup ({ep} of them expert-parallel: the busiest GPU under " \
                  f"{aic.EP_DISTRIBUTION} routing" in r.output
    r = runner.invoke(app, ["project", "--profile", str(out), "--target", "b300", "--gpus", "8", "--concurrency", "1"])
    assert r.exit_code == 0, r.output
    assert "imported from aiconfigurator-core" in r.output


@pytest.mark.parametrize("args, says", [
    (["--system", "b301", "--engine", "sglang"], "--system 'b301'"),
    (["--system", "b300_sxm", "--engine", "tgi"], "unknown engine 'tgi'"),
    (["--system", "b300_sxm"], "needs --engine, --out"),
])
def test_cli_bad_input_is_one_line_exit_2(cli_db, tmp_path, args, says):
    r = runner.invoke(app, ["profile", "import-aic", *args] + (["--out", str(tmp_path / "x.json")] if "--engine" in args else []))
    assert r.exit_code == 2 and says in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.output
    assert not (tmp_path / "x.json").exists()


def test_without_the_package_one_line_names_the_extra(monkeypatch):
    from importlib import resources

    def missing(name):
        raise ModuleNotFoundError(name)

    monkeypatch.setattr(resources, "files", missing)
    for args in (["profile", "import-aic", "--list"], ["validate", "--transfer"]):
        r = runner.invoke(app, args)
        assert r.exit_code == 2 and "pip install 'perfmodel[aic]'" in r.stderr, r.output
        assert len(r.stderr.strip().splitlines()) == 1


def test_cli_validate_transfer(cli_db):
    r = runner.invoke(app, ["validate", "--transfer", "--system", "b300_sxm", "--format", "json"])
    assert r.exit_code in (0, 1), r.output
    res = json.loads(r.stdout)
    assert {row["system"] for row in res["rows"]} == {"b300_sxm"}
    r = runner.invoke(app, ["validate", "--transfer", "--system", "l4"])
    assert r.exit_code == 2 and "--system 'l4'" in r.stderr
    r = runner.invoke(app, ["validate", "--system", "b300_sxm"])
    assert r.exit_code == 2 and "go with --transfer" in r.stderr


# ------------------------------------------------------------------------------ the installed package (skipped without it)
def test_the_installed_package_holds_the_mapped_systems():
    pytest.importorskip("aiconfigurator_core")
    real = aic.Database.installed()
    assert real.version == aic.package_version()
    have = set(real.systems())
    assert {"b300_sxm", "rtx_pro_6000_server", "h200_sxm"} <= have
    assert real.current("b300_sxm", "sglang") in real.versions("b300_sxm", "sglang")
