"""Prefill-size kernels: what a prompt, or a chunk of one after a cached prefix, runs. Prefill is
compute-bound GEMMs at thousands of tokens, causal attention whose cost grows with T·(P + T/2), and
MoE with nearly every expert hit; the decode benches (gemm, moe, attention) stop short of all three.
Laws are keyed `<class>.prefill` (perfmodel's kernel set) and `<class>.prefill@torch` (the kernel
set "torch"), the op variant of prefill-size calls in the step model (PREFILL_VARIANT).

  * Dense GEMMs at M = 256 .. 16384 tokens, the projections of Kimi K2.6 and DeepSeek-V3 at TP8,
    Llama-3.1-8B at TP1 and Llama-3.1-70B at TP8 (shapes.prefill_gemm_shapes): bf16 through
    F.linear -> `gemm_bf16.prefill` (cuBLAS in both kernel sets); fp8 e4m3 through
    torch._scaled_mm with per-tensor scales where the GPU runs fp8 (samples of provider
    "torch._scaled_mm"; the step model prices an fp8 GEMM by the bf16 law times the fp8/bf16
    ceiling ratio, and the note says how far the measured fp8 law is from that).
  * Routed experts at T = 256 .. 16384 tokens under uniform top-k routing (every expert hit):
    torch._grouped_mm -> `moe_bf16.prefill@torch`; perfmodel's Triton kernels, fused_moe_bf16 ->
    `moe_bf16.prefill` and fused_moe_w4a16 -> `moe_w4a16.prefill`; on Qwen3-30B-A3B, the Kimi TP8
    shard (I = 256) and Kimi's whole experts (I = 2048, as under expert parallelism).
  * Causal attention of N sequences x T new tokens after P cached ones, bottom-right aligned
    (ops.causal_attend), on the GQA heads of Llama-3.1-8B, Qwen3-30B-A3B and Llama-3.1-70B at TP8,
    through SDPA's flash backend (FlashAttention-2) -> `attention_gqa.prefill@torch` and its cuDNN
    backend -> `attention_gqa.prefill` (an engine's prefill kernel: cuDNN's fused attention is the
    fastest SDPA path on Hopper).
  * MLA prefill in its uncompressed form: K and V up-projected per head from the latent, then
    multi-head attention with q·k over 192 dims (nope 128 + rope 64) and V of 128, as DeepSeek-V3's
    prefill runs; DeepSeek-V3's 128 heads (TP1, or data-parallel attention) and 16 (TP8). Flash
    needs one head size for q, k and v (FlashAttention-2), so V is zero-padded to 192 there, as
    vLLM's MLA prefill pads it for FlashAttention-2 -> `attention_mla.prefill@torch`; cuDNN with V
    at 128 where it takes it -> `attention_mla.prefill`.

A backend is timed at a head shape only where ops.causal_check found that it computes bottom-right
causal attention there; one that does not (an error, or top-left alignment with a prefix) is named
in the note, and where cuDNN cannot, perfmodel's set takes the flash law (the fit's source says so).
Calls are timed eager, as an engine runs its prefill, with L2 flushed before each sample. Bytes and
FLOPs are counted as perfmodel's step model counts the calls (its prefill ops), so the fitted rates
are the model's own: attention FLOPs are 4 (GQA) or 2 (qk + v) per head and causal (query, key)
pair, pairs = T·P + T(T+1)/2 per sequence; bytes read K/V once per sequence plus q and the output.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from perfmodel.profile import KERNEL_SETS, BenchResult, fit_key

from .common import BenchContext, BenchOutput, make_sample, randn, uniform_topk
from .fits import fit_kernel_law, launcher_of
from .shapes import DEEPSEEK_V3, KIMI, LLAMA3_8B, LLAMA3_70B, QWEN3_30B, prefill_gemm_shapes
from .timing import time_fn

PREFILL_VARIANT = "prefill"  # the op variant of prefill-size calls (perfmodel.model.layers.PREFILL; measure cannot import the model)
BENCH = "prefill"
ACT = 2.0  # bytes per bf16 activation element

GEMM_PROVIDER = {"bf16": "torch.matmul", "fp8": "torch._scaled_mm"}
MOE_PROVIDERS = ("torch._grouped_mm", "triton_bf16", "triton_w4a16")
ATTN_PROVIDER = {"flash": "torch.sdpa.flash", "cudnn": "torch.sdpa.cudnn"}
# Which provider's samples each law is fitted from, by kernel set (`perfmodel`: the engines' kernels
# where perfmodel has none of its own, cuDNN attention; `torch`: what PyTorch's own ops run).
LAW_PROVIDERS = {
    "gemm_bf16": {"perfmodel": GEMM_PROVIDER["bf16"]},
    "moe_bf16": {"perfmodel": "triton_bf16", "torch": KERNEL_SETS["torch"]["moe"]},
    "moe_w4a16": {"perfmodel": "triton_w4a16"},
    "attention_gqa": {"perfmodel": ATTN_PROVIDER["cudnn"], "torch": ATTN_PROVIDER["flash"]},
    "attention_mla": {"perfmodel": ATTN_PROVIDER["cudnn"], "torch": ATTN_PROVIDER["flash"]},
}
TIMING = dict(max_samples=10, max_seconds=0.1, warmup=2)  # eager, L2 flushed before each sample


# ----------------------------------------------------------------------------- counts
def gemm_bytes(M: int, N: int, K: int, in_bytes: float = 2.0) -> float:
    """x [M, K] and w [N, K] read at `in_bytes` per element, the bf16 output [M, N] written."""
    return in_bytes * (M * K + N * K) + ACT * M * N


def causal_pairs(T: int, P: int) -> float:
    """(query, key) pairs of T new tokens after P cached ones under a causal mask (new token i
    sees the P cached and i + 1 new keys)."""
    return T * P + T * (T + 1) / 2


def gqa_prefill_bytes(N: int, T: int, P: int, hq: int, hkv: int, D: int) -> float:
    """K and V of each sequence's P + T keys read once, q read and the output written."""
    return N * (P + T) * 2 * hkv * D * ACT + 2 * N * T * hq * D * ACT


def gqa_prefill_flops(N: int, T: int, P: int, hq: int, D: int) -> float:
    """Q·Kᵀ and P·V: 2 · 2 · D FLOPs per head and causal pair."""
    return 4.0 * N * hq * causal_pairs(T, P) * D


def mla_prefill_bytes(N: int, T: int, P: int, h: int, dqk: int, dv: int) -> float:
    """Per-head K (dqk) and V (dv) of each sequence's P + T keys read once, q (dqk) read and the
    output (dv) written."""
    return N * (P + T) * h * (dqk + dv) * ACT + N * T * h * (dqk + dv) * ACT


def mla_prefill_flops(N: int, T: int, P: int, h: int, dqk: int, dv: int) -> float:
    """Q·Kᵀ over dqk and P·V over dv (the useful FLOPs: padding V adds none)."""
    return 2.0 * N * h * causal_pairs(T, P) * (dqk + dv)


# ----------------------------------------------------------------------------- cases
@dataclass(frozen=True)
class Case:
    """One timed configuration: its provider, shape, counts, and `build`, which allocates the inputs
    and returns the call (weights shared across a sweep live in a `_Shared`)."""

    section: str
    provider: str
    shape: dict[str, Any]
    nbytes: float
    nflops: float
    build: Callable[[], Callable[[], Any]]
    extra: dict[str, Any] | None = None


class _Shared:
    """A tensor set built on first use and kept while the cases of one sweep hold it."""

    def __init__(self, make: Callable[[], Any]):
        self._make, self._value = make, None

    def __call__(self):
        if self._value is None:
            self._value = self._make()
        return self._value


def gemm_ms(quick: bool) -> list[int]:
    return [512, 4096, 16384] if quick else [256, 512, 1024, 2048, 4096, 8192, 16384]


def gemm_cases(shapes: list[tuple[str, int, int]], Ms: list[int], dtypes: tuple[str, ...], device: str = "cuda") -> Iterator[Case]:
    """Dense GEMMs x [M, K] · w[N, K]ᵀ: bf16 by F.linear, fp8 e4m3 by torch._scaled_mm (per-tensor
    scales, bf16 out; N and K must be multiples of 16)."""
    import torch
    import torch.nn.functional as F

    for name, N, K in shapes:
        for dt in dtypes:
            if dt == "fp8" and (N % 16 or K % 16):
                continue
            if dt == "bf16":
                w = _Shared(lambda N=N, K=K: randn(N, K, scale=0.02, device=device))
            else:
                w = _Shared(lambda N=N, K=K: randn(N, K, scale=0.5, device=device).to(torch.float8_e4m3fn))
            for M in Ms:
                def build(M=M, K=K, w=w, dt=dt):
                    if dt == "bf16":
                        x, wt = randn(M, K, device=device), w()
                        return lambda: F.linear(x, wt)
                    x8, w8 = randn(M, K, scale=0.5, device=device).to(torch.float8_e4m3fn), w()
                    one = torch.ones((), device=device, dtype=torch.float32)
                    return lambda: torch._scaled_mm(x8, w8.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)

                yield Case("gemm", GEMM_PROVIDER[dt], {"op": "gemm", "name": name, "dtype": dt, "M": M, "N": N, "K": K},
                           gemm_bytes(M, N, K, 1.0 if dt == "fp8" else 2.0), 2.0 * M * N * K, build)


def moe_shapes(quick: bool) -> list[tuple[str, int, int, int, int, int]]:
    """(name, H, I, E, k, largest T) of the MoE sweeps."""
    q, k = QWEN3_30B, KIMI
    out = [("qwen3_30b_a3b", q["hidden"], q["moe_inter"], q["n_experts"], q["top_k"], 16384),
           ("kimi_tp8_I256", k["hidden"], k["moe_inter"] // 8, k["n_experts"], k["top_k"], 16384),
           ("kimi_I2048", k["hidden"], k["moe_inter"], k["n_experts"], k["top_k"], 8192)]
    return out[:2] if quick else out


def moe_ts(quick: bool) -> list[int]:
    return [512, 4096] if quick else [256, 512, 1024, 2048, 4096, 8192, 16384]


def moe_cases(shapes, Ts: list[int], providers: tuple[str, ...] = MOE_PROVIDERS, device: str = "cuda") -> Iterator[Case]:
    """Routed experts at prefill token counts, uniform top-k routing (fixed per point): the bf16
    experts through torch._grouped_mm and perfmodel's fused_moe_bf16, INT4 (W4A16, group 32)
    experts through fused_moe_w4a16. Counts from the kernel modules (as the moe bench's)."""
    from perfmodel.kernels import moe_bf16, moe_w4a16

    for name, H, I, E, k, t_max in shapes:
        bf16 = _Shared(lambda H=H, I=I, E=E: (randn(E, 2 * I, H, scale=0.02, device=device), randn(E, H, I, scale=0.02, device=device)))
        w4 = _Shared(lambda H=H, I=I, E=E: (*moe_w4a16.random_kernel_weights(E, 2 * I, H, device=device),
                                             *moe_w4a16.random_kernel_weights(E, H, I, device=device)))
        for T in (t for t in Ts if t <= t_max):
            route = _Shared(lambda T=T, E=E, k=k, H=H: (randn(T, H, device=device), *uniform_topk(T, E, k, device=device)))
            for prov in providers:
                def build(prov=prov, route=route, bf16=bf16, w4=w4):
                    x, ids, wts = route()
                    if prov == "triton_w4a16":
                        w13, s13, w2, s2 = w4()
                        return lambda: moe_w4a16.fused_moe_w4a16(x, w13, s13, w2, s2, ids, wts)
                    w13, w2 = bf16()
                    fn = moe_bf16.grouped_mm_moe_torch if prov == "torch._grouped_mm" else moe_bf16.fused_moe_bf16
                    return lambda: fn(x, w13, w2, ids, wts)

                ids = route()[1]
                mod = moe_w4a16 if prov == "triton_w4a16" else moe_bf16
                distinct = int(ids.unique().numel())
                yield Case("moe", prov, {"op": "moe", "shape": name, "T": T, "E": E, "k": k, "H": H, "I": I},
                           mod.bytes_moved(ids, E, H, I), mod.flops(T, k, H, I), build,
                           extra=dict(distinct_experts=distinct, tokens_per_expert=T * k / max(distinct, 1)))


GQA_SHAPES = {
    "gqa_llama3_8b": (LLAMA3_8B["n_heads"], LLAMA3_8B["n_kv_heads"], LLAMA3_8B["head_dim"]),
    "gqa_qwen3_30b": (QWEN3_30B["n_heads"], QWEN3_30B["n_kv_heads"], QWEN3_30B["head_dim"]),
    "gqa_llama3_70b_tp8": (LLAMA3_70B["n_heads"] // 8, max(1, LLAMA3_70B["n_kv_heads"] // 8), LLAMA3_70B["head_dim"]),
}
_DS = DEEPSEEK_V3
MLA_SHAPES = {  # name: (heads, q·k dims, v dims)
    "mla_dsv3_h128": (_DS["n_heads"], _DS["qk_nope"] + _DS["qk_rope"], _DS["v_head"]),
    "mla_dsv3_h16": (_DS["n_heads"] // 8, _DS["qk_nope"] + _DS["qk_rope"], _DS["v_head"]),
}


def attention_grid(quick: bool, primary: bool) -> list[tuple[int, int, int]]:
    """(N sequences, T new tokens, P cached) of the attention sweeps: whole prompts (P = 0) and
    chunks after a prefix, from a 64-token tail after 16k cached to a 16k-token prompt."""
    if quick:
        return [(1, 512, 0), (1, 2048, 0), (1, 512, 2048)]
    if primary:
        return [(1, 256, 0), (1, 1024, 0), (1, 4096, 0), (1, 16384, 0), (4, 1024, 0),
                (1, 64, 16384), (1, 256, 8192), (1, 1024, 4096), (1, 1024, 16384), (1, 4096, 4096), (1, 4096, 12288),
                (4, 1024, 4096)]
    return [(1, 1024, 0), (1, 4096, 0), (1, 16384, 0), (1, 256, 8192), (1, 1024, 16384), (1, 4096, 12288)]


def attention_cases(quick: bool, notes: list[str], device: str = "cuda", backends: tuple[str, ...] = ("flash", "cudnn"),
                    gqa: dict | None = None, mla: dict | None = None) -> Iterator[Case]:
    """Causal attention cases per head shape and backend, each (shape, backend, prefix or not)
    checked once (ops.causal_check) before its points; MLA's V is padded to q·k's size where the
    backend takes only one head size."""
    from .ops import causal_attend, causal_check

    gqa = GQA_SHAPES if gqa is None else gqa
    mla = MLA_SHAPES if mla is None else mla
    shapes = [(n, "gqa", hq, hkv, D, D) for n, (hq, hkv, D) in gqa.items()] + [(n, "mla", h, h, dqk, dv) for n, (h, dqk, dv) in mla.items()]
    for i, (name, kind, hq, hkv, D, Dv) in enumerate(shapes):
        primary = i == 0 or name == next(iter(mla), None)
        for backend in backends:
            ok: dict[bool, tuple[bool, str | None]] = {}  # prefix -> (pad V, why not)

            def check(prefix: bool, backend=backend, hq=hq, hkv=hkv, D=D, Dv=Dv, name=name) -> bool | None:
                """Whether V is padded, or None where the backend cannot run this shape."""
                if prefix not in ok:
                    why = causal_check(backend, hq, hkv, D, Dv, 128 if prefix else 0, device=device)
                    pad = False
                    if why and Dv != D:
                        why_pad = causal_check(backend, hq, hkv, D, D, 128 if prefix else 0, device=device)
                        pad, why = (True, None) if why_pad is None else (False, why)
                    ok[prefix] = (pad, why)
                    if why:
                        notes.append(f"{ATTN_PROVIDER[backend]} not timed at {name} {'with' if prefix else 'without'} a prefix: {why}")
                return None if ok[prefix][1] else ok[prefix][0]

            for N, T, P in attention_grid(quick, primary):
                pad = check(P > 0)
                if pad is None:
                    continue
                S = P + T

                def build(N=N, T=T, S=S, pad=pad, backend=backend, hq=hq, hkv=hkv, D=D, Dv=Dv):
                    import torch.nn.functional as F

                    q, k = randn(N, hq, T, D, device=device), randn(N, hkv, S, D, device=device)
                    v = randn(N, hkv, S, Dv, device=device)
                    if pad:  # outside the timed call: an engine pads once per chunk
                        v = F.pad(v, (0, D - Dv))
                    return lambda: causal_attend(q, k, v, backend)

                shape = {"op": "attention", "shape": name, "kind": kind, "backend": backend, "N": N, "T": T, "P": P,
                         "Hq": hq, "Hkv": hkv, "D": D, "Dv": Dv, "v_pad": pad}
                if kind == "gqa":
                    nb, nf = gqa_prefill_bytes(N, T, P, hq, hkv, D), gqa_prefill_flops(N, T, P, hq, D)
                else:
                    nb, nf = mla_prefill_bytes(N, T, P, hq, D, Dv), mla_prefill_flops(N, T, P, hq, D, Dv)
                yield Case("attention", ATTN_PROVIDER[backend], shape, nb, nf, build)


# ----------------------------------------------------------------------------- fits
def _law_samples(samples, cls: str, provider: str) -> list:
    if cls == "gemm_bf16":
        return [s for s in samples if s.shape.get("op") == "gemm" and s.provider == provider]
    if cls in ("moe_bf16", "moe_w4a16"):
        return [s for s in samples if s.shape.get("op") == "moe" and s.provider == provider]
    kind = cls.removeprefix("attention_")
    return [s for s in samples if s.shape.get("op") == "attention" and s.shape.get("kind") == kind and s.provider == provider]


def fit_prefill(samples, ceilings, source: str) -> dict:
    """`<class>.prefill` and `<class>.prefill@torch` from the providers of LAW_PROVIDERS. Where
    cuDNN has no samples with a prefix (or none at all) for an attention class, perfmodel's set
    takes the flash law, and its source says so."""
    fits = {}
    for cls, by_set in LAW_PROVIDERS.items():
        for kset, prov in by_set.items():
            pts = _law_samples(samples, cls, prov)
            why = ""
            both = any(s.shape.get("P", 0) > 0 for s in pts) and any(s.shape.get("P") == 0 for s in pts)
            if cls.startswith("attention_") and kset == "perfmodel" and not both:
                pts = _law_samples(samples, cls, LAW_PROVIDERS[cls]["torch"])
                why = "; cuDNN not timed both with and without a prefix: the flash backend's samples"
            if len(pts) < 3:
                continue
            fits[fit_key(f"{cls}.{PREFILL_VARIANT}", kset)] = fit_kernel_law(
                [s.bytes for s in pts], [s.flops for s in pts], [s.median_ms * 1e3 for s in pts],
                bench=BENCH, source=source + f"; provider {pts[0].provider}" + why,
                default_bw_GBps=ceilings.read_GBps, default_tflops=ceilings.bf16_TFLOPS, launcher=launcher_of(pts))
    return fits


def fp8_gemm_note(samples, fits: dict, ceilings, peak_ratio: float | None) -> str:
    """How the fp8 GEMMs compare with the model's pricing of them (the bf16 prefill law's compute
    roof times the fp8/bf16 ceiling ratio): their own law's roof over the bf16 law's, against that
    ratio, and the median error of the bf16 law so scaled on the fp8 points."""
    bf = fits.get(f"gemm_bf16.{PREFILL_VARIANT}")
    pts = [s for s in samples if s.shape.get("op") == "gemm" and s.provider == GEMM_PROVIDER["fp8"]]
    if bf is None or len(pts) < 3:
        return ""
    f8 = fit_kernel_law([s.bytes for s in pts], [s.flops for s in pts], [s.median_ms * 1e3 for s in pts], bench=BENCH,
                        default_bw_GBps=ceilings.read_GBps, default_tflops=ceilings.fp8_TFLOPS)
    out = (f"fp8 prefill GEMM law: t0 {f8.t0_us:.1f} us, {f8.tflops:.0f} TF/s, rmse {f8.rmse_rel:.0%}; "
           f"its roof is {f8.tflops / bf.tflops:.2f}x the bf16 prefill law's")
    ratios = [("ceiling", ceilings.fp8_TFLOPS / ceilings.bf16_TFLOPS if ceilings.fp8_TFLOPS and ceilings.bf16_TFLOPS else None),
              ("datasheet peak", peak_ratio)]
    for label, r in ratios:
        if r:
            from .fits import kernel_law

            pred = kernel_law(bf.t0_us, bf.bw_GBps, bf.tflops * r, [s.bytes for s in pts], [s.flops for s in pts])
            err = statistics.median(float(p) / (s.median_ms * 1e3) - 1 for p, s in zip(pred, pts))
            out += f"; fp8/bf16 {label} ratio {r:.2f}: the bf16 law so scaled prices the fp8 points {err:+.0%} (median)"
    return out


# ----------------------------------------------------------------------------- bench
def _why(e: BaseException) -> str:
    msg = str(e).strip().splitlines()[0][:120] if str(e).strip() else ""
    return f"{type(e).__name__}: {msg}"


def _fp8_ok() -> bool:
    import torch

    return torch.cuda.get_device_capability() >= (8, 9) and hasattr(torch, "_scaled_mm")


def sweep(ctx: BenchContext, sections, notes: list[str], timer=time_fn) -> list:
    """Time each section's cases in turn, each section up to its share of the budget; a provider
    failing at a point is noted and not tried at the rest of its shape's points, a section whose setup
    fails is noted and the next one runs. `timer` is time_fn (the tests pass a CPU one)."""
    import torch

    samples = []
    failed: set[tuple] = set()
    for name, share, cases in sections:
        ctx.settle_clock(f"prefill {name}")
        try:
            for case in cases:
                if ctx.over_budget(share):
                    notes.append(f"{name} stopped before {case.provider} {case.shape} (time budget)")
                    break
                key = (case.provider, case.shape.get("name") or case.shape.get("shape"), case.shape.get("backend"))
                if key in failed:
                    continue
                try:
                    fn = case.build()
                    t = timer(fn, **TIMING)
                except (RuntimeError, NotImplementedError) as e:  # one provider failing at one size keeps the others
                    failed.add(key)
                    notes.append(f"{case.provider} at {key[1]} failed from {case.shape}: {_why(e)}")
                    fn = None
                    torch.cuda.empty_cache()
                    continue
                samples.append(make_sample(case.shape, t, nbytes=case.nbytes, nflops=case.nflops, provider=case.provider,
                                           **(case.extra or {})))
                fn = None
        except Exception as e:  # noqa: BLE001 - a sweep's own setup failing (e.g. out of memory) keeps the other sweeps
            notes.append(f"{name} sweep ended early: {_why(e)}")
        torch.cuda.empty_cache()
    return samples


def run(ctx: BenchContext) -> BenchOutput:
    import torch

    from .peaks import find_peak

    notes: list[str] = []
    dtypes = ("bf16", "fp8") if _fp8_ok() else ("bf16",)
    if len(dtypes) == 1:
        notes.append("fp8 GEMMs not timed (no fp8 tensor cores or no torch._scaled_mm)")
    sections = [  # (name, share of the budget it may end at, cases)
        ("gemm", 0.2, gemm_cases(prefill_gemm_shapes(), gemm_ms(ctx.quick), dtypes)),
        ("attention", 0.55, attention_cases(ctx.quick, notes)),
        ("moe", 1.0, moe_cases(moe_shapes(ctx.quick), moe_ts(ctx.quick))),  # last: its cold Triton compiles
    ]
    samples = sweep(ctx, sections, notes)
    fits = fit_prefill(samples, ctx.ceilings, ctx.source)
    peak = find_peak(torch.cuda.get_device_name(0))
    note8 = fp8_gemm_note(samples, fits, ctx.ceilings, peak.fp8_TFLOPS / peak.bf16_TFLOPS if peak and peak.fp8_TFLOPS else None)
    notes += [note8] if note8 else []
    for k, f in sorted(fits.items()):
        ctx.log(f"  {k}: t0 {f.t0_us:.1f} us, {f.bw_GBps:.0f} GB/s, {f.tflops:.0f} TF/s, rmse {f.rmse_rel:.0%} ({f.n_points} points)")
    if note8:
        ctx.log(f"  {note8}")
    return BenchOutput(BenchResult(status="ok", samples=samples, note="; ".join(dict.fromkeys(notes))), fits=fits)
