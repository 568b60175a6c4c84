"""The prefill bench and the foreign stack's prefill and mixed steps on the CPU, at tiny shapes:
the calls the benches time compute what they claim (causal attention bottom-right aligned, with a
prefix and GQA; the fp8 and bf16 GEMMs; the grouped-GEMM MoE), their FLOP and byte counts, the
laws fitted from them, and a chunked prefill through the stack equal to the whole prompt. The
GPU-only parts (Triton kernels, cuDNN, timing) are marked `gpu`."""

import importlib

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from perfmodel.measure import prefill as pf  # noqa: E402
from perfmodel.measure.common import make_sample  # noqa: E402
from perfmodel.measure.ops import causal_attend, causal_check, causal_reference  # noqa: E402
from perfmodel.measure.timing import summarize  # noqa: E402
from perfmodel.profile import Ceilings  # noqa: E402

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def _rel(a, b):
    return float((a.float() - b.float()).norm() / b.float().norm())


# ----------------------------------------------------------------------------- counts
@pytest.mark.parametrize("T,P", [(1, 0), (5, 0), (4, 7), (16, 3)])
def test_causal_pairs_count_the_bottom_right_mask(T, P):
    mask = torch.ones(T, P + T, dtype=torch.bool).tril(diagonal=P)
    assert pf.causal_pairs(T, P) == int(mask.sum())
    assert pf.gqa_prefill_flops(2, T, P, 8, 16) == 2 * 8 * int(mask.sum()) * 4 * 16
    assert pf.mla_prefill_flops(1, T, P, 4, 24, 16) == 4 * int(mask.sum()) * 2 * (24 + 16)


def test_counts_match_the_step_model_where_it_has_prefill_ops():
    """The bench counts as the step model's prefill ops do, so a fitted rate is the model's own."""
    layers = importlib.import_module("perfmodel.model.layers")
    if not hasattr(layers, "causal_pairs"):
        pytest.skip("this step model has no prefill ops")
    for T, P in [(1, 0), (64, 0), (512, 4096), (3, 9)]:
        assert pf.causal_pairs(T, P) == layers.causal_pairs(T, P)
    assert pf.PREFILL_VARIANT == layers.PREFILL


def test_prefill_gemm_shapes_hold_the_latent_up_projection():
    from perfmodel.measure.shapes import DEEPSEEK_V3, KIMI, mla_prefill_gemm_shapes, prefill_gemm_shapes

    s = {n: (N, K) for n, N, K in mla_prefill_gemm_shapes(DEEPSEEK_V3, 8)}
    assert s["kv_b"] == (128 // 8 * (128 + 128), 512) and s["q_b"] == (128 // 8 * 192, 1536)
    assert {n: (N, K) for n, N, K in mla_prefill_gemm_shapes(KIMI, 8)}["o_proj"] == (7168, 64 // 8 * 128)
    shapes = prefill_gemm_shapes()
    assert len({(N, K) for _, N, K in shapes}) == len(shapes)  # each (N, K) timed once
    assert ("llama8b_gate_up", 2 * 14336, 4096) in shapes


# ----------------------------------------------------------------------------- attention
@pytest.mark.parametrize("backend", [None, "flash"])
@pytest.mark.parametrize("hq,hkv,P", [(8, 2, 0), (8, 2, 40), (4, 4, 17), (6, 1, 0)])
def test_causal_attend_is_bottom_right_causal(backend, hq, hkv, P):
    g = torch.Generator().manual_seed(hq + P)
    T, D = 24, 16
    q, k, v = (torch.randn(2, h, n, D, generator=g) for h, n in ((hq, T), (hkv, P + T), (hkv, P + T)))
    out = causal_attend(q, k, v, backend)
    assert out.shape == (2, hq, T, D)
    assert _rel(out, causal_reference(q, k, v)) < 1e-5, f"{hq=} {hkv=} {P=}"
    # the last new token sees every key: plain attention over the whole cache
    last = F.scaled_dot_product_attention(q[:, :, -1:], k, v, enable_gqa=hq != hkv)
    assert _rel(out[:, :, -1:], last) < 1e-5
    # the first new token sees the prefix and itself only
    first = F.scaled_dot_product_attention(q[:, :, :1], k[:, :, :P + 1], v[:, :, :P + 1], enable_gqa=hq != hkv)
    assert _rel(out[:, :, :1], first) < 1e-5


def test_causal_check_accepts_the_function_and_rejects_top_left_alignment(monkeypatch):
    assert causal_check(None, 8, 2, 16, 16, 32, device="cpu") is None
    assert causal_check("flash", 8, 2, 16, 16, 0, device="cpu") is None
    ops = importlib.import_module("perfmodel.measure.ops")

    def top_left(q, k, v, backend=None):  # SDPA's own is_causal: top-left aligned when S > T
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=q.shape[1] != k.shape[1])

    monkeypatch.setattr(ops, "causal_attend", top_left)
    assert causal_check(None, 8, 2, 16, 16, 0, device="cpu") is None  # the same without a prefix
    assert "differs from bottom-right" in causal_check(None, 8, 2, 16, 16, 32, device="cpu")


def test_causal_check_names_a_backend_that_cannot_run():
    why = causal_check("flash", 4, 4, 24, 16, 0, device="cpu")  # flash needs one head size for q, k and v
    assert why and why.startswith("RuntimeError")


def test_attention_cases_pad_mla_values_and_note_what_is_not_timed():
    notes = []
    cases = list(pf.attention_cases(True, notes, device="cpu", backends=("flash", "cudnn"),
                                    gqa={"gqa_tiny": (4, 2, 16)}, mla={"mla_tiny": (4, 24, 16)}))
    assert cases and {c.shape["backend"] for c in cases} == {"flash"}  # no cuDNN on the CPU
    assert any("torch.sdpa.cudnn not timed at gqa_tiny" in n for n in notes)
    mla = [c for c in cases if c.shape["kind"] == "mla"]
    gqa = [c for c in cases if c.shape["kind"] == "gqa"]
    assert mla and all(c.shape["v_pad"] for c in mla) and not any(c.shape["v_pad"] for c in gqa)
    assert {(c.shape["N"], c.shape["T"], c.shape["P"]) for c in gqa} == set(pf.attention_grid(True, True))
    c = mla[0]
    N, T, P, h = (c.shape[x] for x in ("N", "T", "P", "Hq"))
    assert c.nflops == pf.mla_prefill_flops(N, T, P, h, 24, 16) and c.nbytes == pf.mla_prefill_bytes(N, T, P, h, 24, 16)
    torch.manual_seed(0)
    out = c.build()()
    assert out.shape == (N, h, T, 24)  # padded V: the output's last columns are the padding's zeros
    assert float(out[..., 16:].abs().max()) == 0.0


# ----------------------------------------------------------------------------- GEMMs and MoE
def test_gemm_cases_compute_the_product():
    cases = list(pf.gemm_cases([("tiny", 48, 32)], [16, 64], ("bf16", "fp8"), device="cpu"))
    assert [(c.shape["dtype"], c.shape["M"]) for c in cases] == [("bf16", 16), ("bf16", 64), ("fp8", 16), ("fp8", 64)]
    assert cases[0].nbytes == 2 * (16 * 32 + 48 * 32) + 2 * 16 * 48 and cases[2].nbytes == 16 * 32 + 48 * 32 + 2 * 16 * 48
    assert all(c.nflops == 2 * c.shape["M"] * 48 * 32 for c in cases)
    for c in cases:
        out = c.build()()
        assert out.shape == (c.shape["M"], 48) and out.dtype == torch.bfloat16 and torch.isfinite(out.float()).all()
    assert list(pf.gemm_cases([("odd", 40, 24)], [16], ("fp8",), device="cpu")) == []  # fp8 needs multiples of 16


def test_gemm_case_fp8_matches_its_dequantized_product(monkeypatch):
    captured = {}
    real = torch._scaled_mm

    def spy(a, b, **kw):
        captured["a"], captured["b"] = a, b
        return real(a, b, **kw)

    monkeypatch.setattr(torch, "_scaled_mm", spy)
    (c,) = pf.gemm_cases([("tiny", 32, 64)], [16], ("fp8",), device="cpu")
    out = c.build()()
    ref = captured["a"].float() @ captured["b"].float()
    assert _rel(out, ref) < 1e-2


def test_moe_cases_route_every_expert_and_compute_the_layer():
    from perfmodel.kernels.moe_bf16 import fused_moe_bf16_reference

    shapes = [("tiny", 32, 16, 8, 2, 64)]
    cases = list(pf.moe_cases(shapes, [16, 64, 128], providers=("torch._grouped_mm",), device="cpu"))
    assert [c.shape["T"] for c in cases] == [16, 64]  # T above the shape's largest dropped
    assert cases[-1].extra["distinct_experts"] == 8  # prefill: every expert hit
    c = cases[-1]
    fn = c.build()
    out = fn()
    # the call's own inputs, from its closure
    x, w13, w2, ids, wts = (fn.__closure__[i].cell_contents for i in _closure_order(fn, ("x", "w13", "w2", "ids", "wts")))
    assert _rel(out, fused_moe_bf16_reference(x, w13, w2, ids, wts)) < 2e-2
    assert c.nflops == 6 * 64 * 2 * 32 * 16


def _closure_order(fn, names):
    return [fn.__code__.co_freevars.index(n) for n in names]


# ----------------------------------------------------------------------------- fits
def _sample(shape, us, nbytes, nflops, provider):
    return make_sample(shape, summarize([us / 1e3] * 3), nbytes=nbytes, nflops=nflops, provider=provider)


def _law(t0, bw, tf, b, f):
    return t0 + max(b / (bw * 1e3), f / (tf * 1e6))


def _synthetic(rates: dict[str, float], cudnn_prefix: bool = True) -> list:
    """Samples exactly on t = 5 us + max(bytes / 3000 GB/s, flops / rate) per provider."""
    out = []
    for M in (256, 1024, 4096, 16384):
        b, f = pf.gemm_bytes(M, 4096, 4096), 2.0 * M * 4096 * 4096
        out.append(_sample({"op": "gemm", "name": "g", "dtype": "bf16", "M": M, "N": 4096, "K": 4096},
                           _law(5, 3000, rates["torch.matmul"], b, f), b, f, "torch.matmul"))
        b8 = pf.gemm_bytes(M, 4096, 4096, 1.0)
        out.append(_sample({"op": "gemm", "name": "g", "dtype": "fp8", "M": M, "N": 4096, "K": 4096},
                           _law(5, 3000, rates["torch._scaled_mm"], b8, f), b8, f, "torch._scaled_mm"))
    for T in (512, 2048, 8192):
        b, f = 3e8 + T * 1e4, 6.0 * T * 8 * 2048 * 768
        for prov in ("torch._grouped_mm", "triton_bf16"):
            out.append(_sample({"op": "moe", "shape": "m", "T": T, "E": 128, "k": 8, "H": 2048, "I": 768},
                               _law(5, 3000, rates[prov], b, f), b, f, prov))
    for backend in ("flash", "cudnn"):
        for N, T, P in ((1, 1024, 0), (1, 4096, 0), (1, 1024, 8192), (1, 64, 16384)):
            if P and backend == "cudnn" and not cudnn_prefix:
                continue
            prov = pf.ATTN_PROVIDER[backend]
            b, f = pf.gqa_prefill_bytes(N, T, P, 32, 8, 128), pf.gqa_prefill_flops(N, T, P, 32, 128)
            out.append(_sample({"op": "attention", "shape": "a", "kind": "gqa", "backend": backend, "N": N, "T": T, "P": P},
                               _law(5, 3000, rates[prov], b, f), b, f, prov))
    return out


RATES = {"torch.matmul": 700.0, "torch._scaled_mm": 1300.0, "torch._grouped_mm": 450.0, "triton_bf16": 520.0,
         "torch.sdpa.flash": 380.0, "torch.sdpa.cudnn": 560.0}


def test_fit_prefill_keys_each_law_by_its_kernel_set_and_recovers_the_roofs():
    fits = pf.fit_prefill(_synthetic(RATES), Ceilings(read_GBps=4000.0, bf16_TFLOPS=780.0), "measured: t")
    assert set(fits) == {"gemm_bf16.prefill", "moe_bf16.prefill", "moe_bf16.prefill@torch",
                         "attention_gqa.prefill", "attention_gqa.prefill@torch"}
    for key, prov in (("gemm_bf16.prefill", "torch.matmul"), ("moe_bf16.prefill", "triton_bf16"),
                      ("moe_bf16.prefill@torch", "torch._grouped_mm"), ("attention_gqa.prefill", "torch.sdpa.cudnn"),
                      ("attention_gqa.prefill@torch", "torch.sdpa.flash")):
        assert fits[key].tflops == pytest.approx(RATES[prov], rel=1e-6), key
        assert fits[key].bench == "prefill" and prov in fits[key].source
    assert fits["moe_bf16.prefill"].launcher == "triton" and fits["gemm_bf16.prefill"].launcher == "torch"


def test_fit_prefill_takes_flash_for_perfmodels_set_when_cudnn_lacks_prefix_points():
    fits = pf.fit_prefill(_synthetic(RATES, cudnn_prefix=False), Ceilings(), "measured: t")
    f = fits["attention_gqa.prefill"]
    assert f.tflops == pytest.approx(RATES["torch.sdpa.flash"], rel=1e-6) and "flash backend's samples" in f.source


@pytest.mark.parametrize("fp8_rate,lo,hi", [(1400.0, -1, 1), (1050.0, -26, -10)])
def test_fp8_note_compares_the_fp8_law_with_the_scaled_bf16_law(fp8_rate, lo, hi):
    """The bf16 law (700 TF/s) times the ceiling ratio (2) prices fp8 points at 1400 TF/s exactly;
    at 1050 TF/s it is too fast, by up to 25% where the points are compute-bound."""
    import re

    samples = _synthetic(dict(RATES, **{"torch._scaled_mm": fp8_rate}))
    ceil = Ceilings(bf16_TFLOPS=700.0, fp8_TFLOPS=1400.0)
    note = pf.fp8_gemm_note(samples, pf.fit_prefill(samples, ceil, "measured: t"), ceil, None)
    assert f"{fp8_rate:.0f} TF/s" in note and f"{fp8_rate / 700:.2f}x the bf16" in note
    err = re.search(r"ceiling ratio 2\.00: the bf16 law so scaled prices the fp8 points ([+-]\d+)% \(median\)", note)
    assert err and lo <= int(err.group(1)) <= hi, note
    assert "datasheet" not in note  # no peak ratio given
    assert "datasheet peak ratio 1.50" in pf.fp8_gemm_note(samples, pf.fit_prefill(samples, ceil, "t"), Ceilings(), 1.5)


def test_refit_recomputes_the_prefill_laws(tmp_path):
    from perfmodel.measure.refit import refit
    from perfmodel.profile import BenchResult, Profile, Provenance

    prof = Profile(provenance=Provenance(kind="measured", gpu_name="x", timestamp="t"),
                   benches={"prefill": BenchResult(status="ok", samples=_synthetic(RATES))})
    out = refit(prof)
    assert out.fits["attention_gqa.prefill@torch"].tflops == pytest.approx(RATES["torch.sdpa.flash"], rel=1e-6)


# ----------------------------------------------------------------------------- the sweep
def _cpu_timer(calls):
    def timer(fn, **kw):
        out = fn()  # the call runs: a broken case raises here, as under time_fn
        calls.append(out.shape)
        return summarize([0.5, 0.6, 0.55])

    return timer


def test_sweep_times_every_case_and_fits_them_on_the_cpu():
    from perfmodel.measure.common import BenchContext

    notes, calls = [], []
    sections = [
        ("gemm", 0.2, pf.gemm_cases([("tiny", 48, 32)], [16, 64, 256], ("bf16", "fp8"), device="cpu")),
        ("attention", 0.55, pf.attention_cases(True, notes, device="cpu", backends=("flash",),
                                               gqa={"gqa_tiny": (4, 2, 16)}, mla={"mla_tiny": (4, 24, 16)})),
        ("moe", 1.0, pf.moe_cases([("tiny", 32, 16, 8, 2, 256)], [16, 64, 256], providers=("torch._grouped_mm",), device="cpu")),
    ]
    samples = pf.sweep(BenchContext(budget_s=600, log=lambda *a, **k: None), sections, notes, timer=_cpu_timer(calls))
    assert len(samples) == len(calls) == 6 + 2 * len(pf.attention_grid(True, True)) + 3 and not notes
    by = {(s.shape["op"], s.provider) for s in samples}
    assert by == {("gemm", "torch.matmul"), ("gemm", "torch._scaled_mm"), ("attention", "torch.sdpa.flash"),
                  ("moe", "torch._grouped_mm")}
    assert all(s.median_ms == pytest.approx(0.55) and s.bytes and s.flops for s in samples)
    fits = pf.fit_prefill(samples, Ceilings(), "measured: t")
    assert {"gemm_bf16.prefill", "attention_gqa.prefill@torch", "attention_mla.prefill@torch", "moe_bf16.prefill@torch",
            "attention_gqa.prefill", "attention_mla.prefill"} == set(fits)


def test_sweep_notes_a_failing_provider_and_a_spent_budget():
    from perfmodel.measure.common import BenchContext

    def broken():
        for M in (16, 32, 64):
            def build(M=M):
                def call():
                    raise RuntimeError(f"CUDA out of memory at {M}")
                return call

            yield pf.Case("gemm", "torch.matmul", {"op": "gemm", "name": "big", "M": M}, 1.0, 1.0, build)

    def setup_fails():
        raise RuntimeError("no memory for the weights")
        yield

    notes, calls = [], []
    ctx = BenchContext(budget_s=600, log=lambda *a, **k: None)
    ok = pf.gemm_cases([("tiny", 48, 32)], [16], ("bf16",), device="cpu")
    assert pf.sweep(ctx, [("gemm", 1.0, broken()), ("moe", 1.0, setup_fails()), ("more", 1.0, ok)], notes,
                    timer=_cpu_timer(calls))
    assert len(notes) == 2 and "torch.matmul at big failed from" in notes[0] and "'M': 16" in notes[0]
    assert notes[1] == "moe sweep ended early: RuntimeError: no memory for the weights"
    notes.clear()
    spent = BenchContext(budget_s=0.0, log=lambda *a, **k: None)
    assert pf.sweep(spent, [("gemm", 0.5, pf.gemm_cases([("tiny", 48, 32)], [16], ("bf16",), device="cpu"))], notes,
                    timer=_cpu_timer(calls)) == []
    assert notes and notes[0].startswith("gemm stopped before torch.matmul")


# ----------------------------------------------------------------------------- GPU
@needs_cuda
@pytest.mark.gpu
def test_prefill_bench_quick_fits_both_kernel_sets():
    from perfmodel.measure.common import BenchContext

    out = pf.run(BenchContext(quick=True, budget_s=60, log=lambda *a, **k: None))
    assert out.result.status == "ok" and out.result.samples
    assert {"gemm_bf16.prefill", "moe_bf16.prefill@torch", "attention_gqa.prefill@torch"} <= set(out.fits), out.result.note


@needs_cuda
@pytest.mark.gpu
@pytest.mark.parametrize("P", [0, 1024])
def test_flash_causal_attend_on_gpu(P):
    """The flash backend computes bottom-right causal attention, through the flash kernel, at the
    bench's GQA heads and MLA's padded heads, with and without a prefix."""
    for hq, hkv, D, Dv in ((32, 8, 128, 128), (8, 1, 128, 128), (128, 128, 192, 192)):
        assert causal_check("flash", hq, hkv, D, Dv, P) is None, (hq, hkv, D)
