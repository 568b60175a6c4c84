"""Elementwise and small ops vs tokens: RMSNorm (plain and fused with the residual add),
SiLU*mul, residual add, router top-k, RoPE, argmax over the vocab (Kimi shapes) -> fit `elementwise` (mostly its latency floor
t0) and one fit per op, `elementwise.<op>`: their floors differ by 10x (a fused add vs a
sigmoid + top-k), so the model prices each op with its own law when the profile has it.
Timed graph-captured (GPU time per op without launch gaps; the launch cost is `dispatch`)."""

from __future__ import annotations

from perfmodel.profile import KERNEL_SETS, BenchResult, fit_key

from .common import BenchContext, BenchOutput, make_sample, randn
from .fits import fit_kernel_law, launcher_of
from .ops import (
    add_rmsnorm,
    argmax_sample,
    residual_add,
    rmsnorm,
    rope,
    router_topk,
    silu_mul,
    torch_add_rmsnorm,
    torch_rmsnorm,
    torch_rope,
    torch_router_topk,
)
from .shapes import KIMI
from .timing import time_fn


def run(ctx: BenchContext) -> BenchOutput:
    from perfmodel.kernels.rmsnorm import bytes_moved as norm_bytes

    H, V, E, k, I = KIMI["hidden"], KIMI["vocab"], KIMI["n_experts"], KIMI["top_k"], KIMI["shared_inter"]
    Ts = [1, 8, 64, 512, 4096] if not ctx.quick else [1, 64, 4096]
    samples = []
    for T in Ts:
        if ctx.over_budget():
            break
        x, y, w = randn(T, H), randn(T, H), randn(H)
        gu = randn(T, 2 * I)
        logits_r = randn(T, E)
        logits_v = randn(T, V // 8)  # lm_head output of one GPU at TP8
        q_pe = randn(T, KIMI["n_heads"] // 8, 64)  # the rope part of q on one GPU at TP8
        cos, sin = randn(T, 1, 32), randn(T, 1, 32)
        cos_f, sin_f = randn(T, 1, 64), randn(T, 1, 64)  # the torch set's RoPE takes full-width tables
        tp = KERNEL_SETS["torch"]["elementwise"]
        cases = [  # (op, fn, bytes, flops, provider)
            ("rmsnorm", lambda: rmsnorm(x, w), norm_bytes(T, H, fused_add=False), 4.0 * T * H, "triton"),
            ("add_rmsnorm", lambda: add_rmsnorm(x, y, w), norm_bytes(T, H, fused_add=True), 5.0 * T * H, "triton"),
            ("silu_mul", lambda: silu_mul(gu), 2.0 * (2 * T * I + T * I), 5.0 * T * I, "torch"),
            ("residual_add", lambda: residual_add(x, y), 2.0 * 3 * T * H, 1.0 * T * H, "torch"),
            ("router_topk", lambda: router_topk(logits_r, k), 2.0 * T * E + 8.0 * T * k, 4.0 * T * E, "triton"),
            ("argmax_vocab", lambda: argmax_sample(logits_v), 2.0 * T * (V // 8) + 8.0 * T, 1.0 * T * (V // 8), "torch"),
            ("rope", lambda: rope(q_pe, cos, sin), 2.0 * 2 * q_pe.numel() + 4.0 * T * 32, 6.0 * q_pe.numel(), "triton"),
            # the kernel set "torch": the same ops as unfused torch ops (same byte and flop counts)
            ("rmsnorm", lambda: torch_rmsnorm(x, w), norm_bytes(T, H, fused_add=False), 4.0 * T * H, tp),
            ("add_rmsnorm", lambda: torch_add_rmsnorm(x, y, w), norm_bytes(T, H, fused_add=True), 5.0 * T * H, tp),
            ("router_topk", lambda: torch_router_topk(logits_r, k), 2.0 * T * E + 8.0 * T * k, 4.0 * T * E, tp),
            ("rope", lambda: torch_rope(q_pe, cos_f, sin_f), 2.0 * 2 * q_pe.numel() + 4.0 * T * 32, 6.0 * q_pe.numel(), tp),
        ]
        for name, fn, nb, nf, provider in cases:
            t = time_fn(fn, graph=True, calls_per_graph=20, max_samples=15, max_seconds=0.05)
            samples.append(make_sample({"op": name, "T": T, "H": H}, t, nbytes=nb, nflops=nf, provider=provider))
    return BenchOutput(
        BenchResult(status="ok", samples=samples, note="graph mode, 20 calls per replay (hot L2 after the first call); "
                    "ops from perfmodel.measure.ops (Triton: rmsnorm, add_rmsnorm, rope, router_topk)"),
        fits=fit_elementwise(samples, ctx.ceilings, ctx.source),
    )


def fit_elementwise(samples, ceilings, source: str) -> dict:
    """The class law over all ops, plus one law per op (`elementwise.<op>`), from perfmodel's
    own kernels; and one law per op the kernel set "torch" runs otherwise
    (`elementwise.<op>@torch`). An op timed by one provider only serves both sets."""
    def fit(pts):
        return fit_kernel_law([s.bytes for s in pts], [s.flops for s in pts], [s.median_ms * 1e3 for s in pts],
                              bench="elementwise", source=source, default_bw_GBps=ceilings.read_GBps,
                              default_tflops=ceilings.bf16_TFLOPS, launcher=launcher_of(pts))

    tp = KERNEL_SETS["torch"]["elementwise"]
    by_op: dict[str, dict[str, list]] = {}
    for s in samples:
        by_op.setdefault(s.shape["op"], {}).setdefault(s.provider, []).append(s)
    own = {op: next((v for p, v in provs.items() if p != tp), provs.get(tp, [])) for op, provs in by_op.items()}
    fits = {"elementwise": fit([s for pts in own.values() for s in pts])}
    for op, provs in by_op.items():
        if len(own[op]) >= 3:
            fits[f"elementwise.{op}"] = fit(own[op])
        if len(provs) > 1 and len(provs.get(tp, [])) >= 3:
            fits[fit_key(f"elementwise.{op}", "torch")] = fit(provs[tp])
    return fits
