"""An imported profile prices a prompt's causal attention and routed experts from the database's own
prefill rows (`aic.import_profile`: `<class>.prefill` laws fitted on the context attention, context
MLA and 256+-token MoE rows), not from its decode law with the dense GEMM's compute roof
(`step.prefill_law`'s fallback). Checked on the rows of tests/fixtures/aic/ by hand: each row's op
is priced on the system's GPU from its law, t0 + max(bytes / bw, FLOPs / F), and lands near the
row's measured time, where the fallback prices the long prompts in at most 0.8 of it
(evidence/imported-prefill/)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from perfmodel import aic
from perfmodel.model.layers import PREFILL, gqa_prefill_attention_op, mla_latent_prefill_attention_op, mla_prefill_attention_op
from perfmodel.model.machine import build_machine
from perfmodel.model.step import prefill_law, price_op
from perfmodel.request import resolve_profile
from perfmodel.specs import registry

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "aic"
ROWS = FIXTURE / "systems" / "data"
SYSTEM_GPU = {"h200_sxm": "h200-sxm", "b300_sxm": "b300-sxm"}


def _db(root: Path) -> aic.Database:
    return aic.Database(root, (FIXTURE / "VERSION").read_text().strip())


@pytest.fixture(scope="module")
def local():
    return resolve_profile(None)


def _machine(prof, system: str):
    gpu, h200 = registry.load_gpu(SYSTEM_GPU[system]), registry.load_gpu("h200-sxm")
    return build_machine(gpu, 1, None, prof, gpu, registry.load_memory_kinds(), fallback_gpu=h200)


def _rows(system: str, family: str, table: str) -> list[dict]:
    return [r for r in aic._read_table(ROWS / system / family / "sglang" / "0.5.14" / f"{table}.csv")
            if r["kv_cache_dtype"] == "bfloat16"]


def _ops(system: str) -> list[tuple]:
    """(the step's prefill op of each context attention / MLA row, its measured µs, its class)."""
    out = []
    for r in _rows(system, "attention", "context_attention_perf"):
        out.append((gqa_prefill_attention_op(r["batch_size"], r["isl"], 0, r["num_heads"], r["num_key_value_heads"],
                                             r["head_dim"], 2.0), r["latency"] * 1e3, "attention_gqa"))
    for r in _rows(system, "mla", "context_mla_perf"):
        out.append((_timed_mla(r), r["latency"] * 1e3, "attention_mla"))
    return out


def _timed_mla(r: dict):
    """The op a context-MLA row timed: aiconfigurator's SGLang collector takes the uncompressed form
    (K 128 + 64, V 128 per head) with trtllm_mla only, the latent form (one K head of 512 + 64, V of
    512) with every other backend (its collector/sglang/collect_mla.py `run_mla`)."""
    if r["kernel_source"] == "trtllm_mla":
        return mla_prefill_attention_op(r["batch_size"], r["isl"], 0, r["num_heads"], 128 + 64, 128, 512 + 64, 2.0)
    return mla_latent_prefill_attention_op(r["batch_size"], r["isl"], 0, r["num_heads"], 512, 64, 2.0)


@pytest.mark.parametrize("system", ["h200_sxm", "b300_sxm"])
def test_prefill_calls_are_priced_by_the_databases_prefill_rows(system, local):
    prof = aic.import_profile(_db(FIXTURE / "systems"), system, "sglang@0.5.14", local)
    im = prof.provenance.imported
    for cls, table in (("attention_gqa", "context_attention_perf"), ("attention_mla", "context_mla_perf")):
        key = f"{cls}.{PREFILL}"
        assert im.tables[key].endswith(f"{system}/{cls.replace('attention_gqa', 'attention').replace('attention_mla', 'mla')}"
                                       f"/sglang/0.5.14/{table}.csv")
        assert im.dtypes[key] == "bfloat16" and table in prof.fits[key].source and prof.fits[key].bench == PREFILL
    for cls, dtype in (("moe_bf16", "bfloat16"), ("moe_w4a16", "int4_wo")):  # the fixture's MoE rows of 256+ tokens
        key = f"{cls}.{PREFILL}"
        assert im.tables[key].endswith("moe/sglang/0.5.14/moe_perf.csv") and im.dtypes[key] == dtype
        assert "prefill-size rows (256+ tokens)" in prof.fits[key].source
    m = _machine(prof, system)
    for op, measured_us, cls in _ops(system):
        law, why = prefill_law(m, op)
        fit = prof.fits[f"{cls}.{PREFILL}"]
        assert why is None and law.tflops == pytest.approx(fit.tflops)  # its own GPU: the fit as it is
        # by hand: the law's floor (less the graph nodes the machine adds back) + the larger of its two terms
        hand = (law.t0_us + max(op.bytes / (law.bandwidth(op.bytes) * 1e3), op.flops / (law.tflops * 1e6))
                + law.graph_nodes * m.overheads.graph_node_us)
        priced = price_op(m, op)
        assert priced == pytest.approx(hand, rel=1e-6), cls
        assert priced == pytest.approx(measured_us, rel=0.15), f"{system} {cls}: priced {priced:.1f} us, row {measured_us:.1f} us"


def test_a_prompt_runs_uncompressed_where_the_rows_timed_the_latent_form(local):
    """H200's SGLang rows (flash_attention: SGLang's fa3 backend) time the latent form; SGLang runs a
    prompt with no cached prefix uncompressed (MHA), which takes (192 + 128) / (576 + 512) of the
    FLOPs. The law learns the kernel's rate on the form it timed, so the prompt the engine runs is
    priced at about that share of the row's time on the compute-bound rows, where a law fitted on the rows
    read uncompressed would price it at the row's own time, as slow as the latent form."""
    prof = aic.import_profile(_db(FIXTURE / "systems"), "h200_sxm", "sglang@0.5.14", local)
    assert "flash_attention rows read as the latent form" in prof.fits[f"attention_mla.{PREFILL}"].source
    m = _machine(prof, "h200_sxm")
    long_rows = [r for r in _rows("h200_sxm", "mla", "context_mla_perf") if _timed_mla(r).flops > 1e11]  # compute-bound
    assert long_rows and all(r["kernel_source"] == "flash_attention" for r in long_rows)
    shares = []
    for r in sorted(long_rows, key=lambda r: _timed_mla(r).flops):
        runs = mla_prefill_attention_op(r["batch_size"], r["isl"], 0, r["num_heads"], 128 + 64, 128, 512 + 64, 2.0)
        shares.append(price_op(m, runs) / (r["latency"] * 1e3))
    assert max(shares) < 0.4, shares  # the law's floor adds a little on the shorter ones
    assert shares[-1] == pytest.approx((192 + 128) / (576 + 512), rel=0.1), shares


def test_without_prefill_rows_the_decode_law_with_the_gemm_roof_prices_it_too_fast(local, tmp_path):
    """The same system with its context tables removed: the import has no prefill law, the call
    falls back to the class's decode law at the dense GEMM's compute roof, and the long prompts
    come out far faster than the database measured them (what the prefill laws mend)."""
    root = tmp_path / "systems"
    shutil.copytree(FIXTURE / "systems", root)
    for f in root.glob("data/h200_sxm/*/sglang/0.5.14/context_*_perf.csv"):
        f.unlink()
    prof = aic.import_profile(_db(root), "h200_sxm", "sglang@0.5.14", local)
    assert not any(k.endswith(f".{PREFILL}") and k.startswith("attention") for k in prof.fits)
    m = _machine(prof, "h200_sxm")
    long_ones = [(op, us) for op, us, _ in _ops("h200_sxm") if op.flops > 1e11]
    assert long_ones
    for op, measured_us in long_ones:
        _, why = prefill_law(m, op)
        assert why and "no measured prefill law" in why
        assert price_op(m, op) < 0.85 * measured_us
