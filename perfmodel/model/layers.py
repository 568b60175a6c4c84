"""The ops of one forward pass, per GPU, from a model spec and a parallel layout: a decode step
(`decode_ops`) or any batch of decode, verify and prefill groups (`batch_ops`, `Batch`).

The op sequence mirrors the synthetic decode stack that `perfmodel measure` times end to end
(measure/e2e.py), so the self-check compares like with like:

  add+RMSNorm; q_a; RMSNorm; q_b; kv_a; RMSNorm(latent); rope(q_pe); W_UK absorb; attention
  core; W_UV; head-major→token-major copies; o_proj; [all-reduce]; add+RMSNorm; router;
  top-k; routed experts; shared expert (gate_up, SiLU·mul, down); [all-reduce].

Each residual add is fused into the next RMSNorm (one kernel, as engines run it): the
attention block's into the MLP norm, the MLP block's into the next layer's attention norm
(or the final norm).

Shapes are per GPU. T = C·q tokens in the step.

Parallel layouts (n GPUs):
  tp              attention heads and expert intermediate split n ways; 2 all-reduces/layer.
  ep              attention data-parallel (C/n sequences per GPU, weights replicated);
                  experts split n ways by expert; all-to-all dispatch + combine per MoE layer.
  tp-attn-ep-moe  attention and shared expert TP; routed experts EP (E/n whole experts per
                  GPU). After the attention all-reduce every GPU holds all tokens, so each
                  runs its local experts on the pairs routed to them and the routed +
                  shared output is all-reduced: 2 all-reduces/layer, as vLLM's and SGLang's
                  TP + expert-parallel MoE run without DP attention (no all-to-all).
  mixed           any other split (`perfmodel.scenario.Split`: `tp4xdp2+tp2xep4`): attention TP
                  over attn_tp GPUs in attn_dp data-parallel groups, each routed expert TP over
                  moe_tp GPUs in moe_ep expert-parallel groups; collectives `_mixed_collectives`.

Under EP the step waits for the GPU whose local experts are touched most: the routed
experts are priced at the expected maximum over GPUs of the distinct local experts touched
(`expected_max_distinct_per_gpu`), not the mean.
"""

from __future__ import annotations

import collections
import functools
import math
from dataclasses import dataclass, replace
from statistics import NormalDist
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from perfmodel.kernel_classes import by_name, moe_class
from perfmodel.model.lookup import Probe
from perfmodel.model.ops import Op
from perfmodel.profile import attention_units
from perfmodel.scenario import Split, layout_split
from perfmodel.specs.schema import WEIGHT_BYTES, GQASpec, MLASpec, ModelSpec

Parallel = str
ACT = 2.0  # bf16 activation bytes


@dataclass(frozen=True)
class Layout:
    parallel: Parallel  # a layout key (perfmodel.scenario: tp, tp-attn-ep-moe, ep, or a mixed tp4xdp2+tp2xep4)
    n_gpus: int
    tp_shape: int | None = None  # shard shapes of this degree (self-check stacks); default n_gpus
    comm: bool = True  # False: one GPU computing a shard, no collectives (synthetic stacks)

    @property
    def split(self) -> Split:
        return layout_split(self.parallel, self.n_gpus)

    @property
    def t_attn(self) -> int:
        """GPUs attention's heads are split over (attention TP)."""
        if self.parallel in ("tp", "tp-attn-ep-moe"):
            return self.tp_shape or self.n_gpus
        return self.split.attn_tp

    @property
    def dp_attn(self) -> int:
        return self.split.attn_dp

    @property
    def moe_split(self) -> int:
        """Ways each routed expert's weights are split in all (E/moe_ep experts, each 1/moe_tp)."""
        return self.tp_shape or self.n_gpus

    @property
    def moe_ep(self) -> int:
        return self.split.moe_ep

    @property
    def moe_tp(self) -> int:
        return self.split.moe_tp

    @property
    def experts_ep(self) -> bool:
        return self.parallel in ("ep", "tp-attn-ep-moe") or self.moe_ep > 1


@dataclass(frozen=True)
class Collective:
    name: str
    op: Literal["all_reduce", "all_to_all"]
    bytes_per_gpu: float
    count: int
    group: int | None = None  # GPUs taking part (a TP group of a mixed layout); None: all of the layout's


def expected_distinct(n_experts: int, top_k: int, tokens: float) -> float:
    """Expected distinct experts touched by `tokens` tokens under uniform independent
    routing: E·(1−(1−k/E)^T). Real routing is correlated, so this is an upper bound."""
    return n_experts * (1.0 - (1.0 - top_k / n_experts) ** tokens)


@functools.lru_cache(maxsize=64)
def expected_max_std_normal(n: int) -> float:
    """E[max of n iid standard normals] = integral of x n phi(x) Phi(x)^(n-1) (trapezoid)."""
    if n <= 1:
        return 0.0
    nd, h = NormalDist(), 0.01
    return h * sum(x * n * nd.pdf(x) * nd.cdf(x) ** (n - 1) for x in (i * h for i in range(-800, 801)))


def expected_max_distinct_per_gpu(n_experts: int, top_k: int, tokens: float, n_gpus: int) -> float:
    """Expected distinct experts touched on the busiest of n_gpus GPUs holding E/n experts
    each, under uniform routing (k distinct experts per token, tokens independent).

    Per GPU, D = sum of E/n indicators with P(untouched) a = (1-k/E)^T and, for a pair,
    b = ((E-k)(E-k-1) / (E(E-1)))^T, so Var D = m a(1-a) + m(m-1)(b - a^2) with m = E/n
    (the pair term is negative: a token's k picks are distinct). The maximum over GPUs is
    taken as mean + sd x sqrt(n/(n-1)) x E[max of n standard normals], capped at m and at
    the k*T picks: the GPUs' counts share a nearly fixed total, so they are exchangeable
    normals with correlation -1/(n-1). Against 3000 simulated routings (E=384, k=8) this is
    within 7% at T=1 and 1% at T >= 8, for n = 2 and 8 (tests/test_model.py)."""
    E, k, T, n = n_experts, top_k, tokens, n_gpus
    m = E / n
    a = (1.0 - k / E) ** T
    mean = expected_distinct(E, k, T) / n  # = m (1 - a)
    if n <= 1:
        return mean
    b = ((E - k) * (E - k - 1) / (E * (E - 1))) ** T if E > 1 else 0.0
    var = max(0.0, m * a * (1 - a) + m * (m - 1) * (b - a * a))
    return min(m, k * T, mean + math.sqrt(var * n / (n - 1)) * expected_max_std_normal(int(n)))


# weight format -> the kernel class of a dense GEMM through it: FP8 weights run W8A8 FP8 GEMMs
# (block-scaled as DeepSeek's and Qwen3's FP8 checkpoints; a profile without their own law prices
# them by gemm_bf16's at the FP8 rate: kernel_classes.KernelClass.stand_in); the others dequantise
# to, or are, bf16 GEMMs at their format's compute rate (compute_dtype).
GEMM_CLASSES = {"fp8": "gemm_fp8"}


def gemm_class(weight_dtype: str) -> str:
    return GEMM_CLASSES.get(weight_dtype, "gemm_bf16")


def _gemm(name, component, tokens, k, n, wdtype, count) -> Op:
    wb = WEIGHT_BYTES[wdtype]
    return Op(
        name=name, component=component, kernel_class=gemm_class(wdtype),
        bytes=n * k * wb + tokens * (k + n) * ACT, flops=2.0 * tokens * k * n, count=count,
        compute_dtype=compute_dtype(wdtype),
        probe=Probe("gemm", (("K", k), ("N", n)), "M", tokens, "torch.matmul") if wdtype == "bf16" else None,
    )


# Elementwise ops as `perfmodel measure` times them (measure/elementwise.py): bf16 passes over
# the data and flops per element, matching the bench's byte/flop counts so that the per-op laws
# (`elementwise.<variant>`) apply as fitted. Beside the passes the bench counts the norms'
# weight vector (once per call) and per token: RoPE's cos/sin, top-k's ids and weights, the
# argmax's (value, index) pair (the `per_token` bytes of the call sites).
_ELT = {  # variant: (passes, flops per element)
    "rmsnorm": (2.0, 4.0), "add_rmsnorm": (4.0, 5.0), "residual_add": (3.0, 1.0), "silu_mul": (1.0, 5.0 / 3.0),
    "router_topk": (1.0, 4.0), "argmax_vocab": (1.0, 1.0), "rope": (2.0, 6.0), "copy": (2.0, 0.0),
}


def compute_dtype(weight_dtype: str) -> str:
    """The MMA dtype a weight format runs at. FP8 and NVFP4 checkpoints quantise the
    activations too (W8A8, W4A4), so engines use FP8 / FP4 tensor cores where the GPU has
    them (machine.py falls back to the bf16 rate where it has not). Weight-only formats
    (INT4/INT8 group-quantised, MXFP4 as served on Hopper) dequantise to bf16."""
    return {"fp8": "fp8", "nvfp4": "fp4"}.get(weight_dtype, "bf16")


# Variants whose measured samples price the op directly (lookup.Probe), with the provider
# that timed them in the elementwise bench.
_ELT_PROBED = {"rmsnorm": "triton", "add_rmsnorm": "triton", "residual_add": "torch"}


def _elt(name, tokens, width, count, variant: str, component="elementwise", per_token: float = 0.0) -> Op:
    passes, fpe = _ELT[variant]
    weights = width * ACT if variant in ("rmsnorm", "add_rmsnorm") else 0.0
    probe = (Probe("elementwise", (("H", width), ("op", variant)), "T", tokens, _ELT_PROBED[variant])
             if variant in _ELT_PROBED else None)
    return Op(name=name, component=component, kernel_class="elementwise", variant=variant,
              bytes=passes * tokens * width * ACT + weights + tokens * per_token, flops=tokens * width * fpe,
              count=count, probe=probe)


def _attn_variant(q: int) -> str:
    """Attention over q > 1 new tokens per sequence (tree / chain verification) is its own
    variant: engines often run another kernel there than for q = 1 decode (FlashInfer's prefill
    vs decode kernels, SDPA's masked vs unmasked backends). The profile fits one law for both
    (perfmodel's tree attention is one kernel), so uncalibrated both use the class law; a
    calibration can price them apart (`calibration.py`, groups attention and attention_verify)."""
    return "verify" if q > 1 else ""


# The variant of the calls a prefill runs at its own size: causal attention over a prompt (or a
# chunk of one after a cached prefix), and the routed experts of a step that carries prefill
# tokens. A profile prices them by its `<class>.prefill` laws (measure's prefill bench; an
# import's prefill rows); one without them falls back to the class law, with the compute roof of
# the measured dense GEMM (`step.py`, `prefill_law`).
PREFILL = "prefill"


# ----------------------------------------------------------------------------- batches
# A forward pass as an engine runs it: groups of sequences, each adding new tokens to its KV
# cache. Decode: one token per sequence at context `context`; verify: `width` tokens per
# sequence (speculative verification, every position's logits); prefill: `tokens` new tokens
# per sequence after `prefix` cached ones (a whole prompt, or a chunk of one).

class Decode(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    kind: Literal["decode"] = "decode"
    n: int = Field(ge=1, description="sequences")
    context: int = Field(ge=0, description="tokens already in each sequence's KV cache")


class Verify(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    kind: Literal["verify"] = "verify"
    n: int = Field(ge=1, description="sequences")
    width: int = Field(ge=1, description="tokens verified per sequence (drafted tokens + 1)")
    context: int = Field(ge=0, description="tokens already in each sequence's KV cache")


class Prefill(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    kind: Literal["prefill"] = "prefill"
    n: int = Field(ge=1, description="sequences")
    tokens: int = Field(ge=1, description="new tokens per sequence (a prompt or a chunk of one)")
    prefix: int = Field(0, ge=0, description="tokens of each sequence already in the KV cache (earlier chunks, prefix-cache hit)")


Group = Annotated[Decode | Verify | Prefill, Field(discriminator="kind")]


class Batch(BaseModel):
    """One forward pass. `logits`: `last` computes logits for the last new token of each prefill
    sequence (what an engine samples its next token from), `all` for every prefill token.
    Decode groups compute one row per sequence and verify groups `width` rows, either way."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    groups: tuple[Group, ...] = Field(min_length=1)
    logits: Literal["last", "all"] = "last"

    @property
    def has_prefill(self) -> bool:
        return any(g.kind == "prefill" for g in self.groups)


_NOTATION = {"decode": "N@CTX", "prefill": "NxT@P (or NxT)", "verify": "NxW@CTX"}


def parse_group(kind: str, text: str) -> Decode | Prefill | Verify:
    """One group from its command-line notation: decode `N@CTX` (N sequences at context CTX),
    prefill `NxT@P` (N sequences of T new tokens after P cached; `NxT` for P = 0), verify
    `NxW@CTX` (N sequences verifying W tokens at context CTX). A bad one: ValueError, one line."""
    if kind not in _NOTATION:
        raise ValueError(f"unknown group kind '{kind}' (known: {', '.join(_NOTATION)})")
    body, at, tail = text.strip().partition("@")
    parts = body.split("x") if kind != "decode" else [body]
    try:
        nums = [int(p) for p in parts] + ([int(tail)] if at else [])
        if kind == "decode" and len(nums) == 2 and at:
            return Decode(n=nums[0], context=nums[1])
        if kind == "prefill" and len(parts) == 2:
            return Prefill(n=nums[0], tokens=nums[1], prefix=nums[2] if at else 0)
        if kind == "verify" and len(nums) == 3 and at:
            return Verify(n=nums[0], width=nums[1], context=nums[2])
    except ValueError as e:  # int() or a pydantic bound
        detail = str(e).splitlines()
        why = next((ln.strip().split(" [")[0] for ln in detail if ln.strip().startswith("Input should")), None)
        raise ValueError(f"--{kind} '{text}': expected {_NOTATION[kind]} with whole numbers"
                         + (f" ({why})" if why else "")) from None
    raise ValueError(f"--{kind} '{text}': expected {_NOTATION[kind]}")


@dataclass(frozen=True)
class _Seqs:
    """One group as one GPU sees it: `seqs` sequences on the busiest attention rank, each adding
    `q` tokens after `ctx` cached ones."""

    kind: str
    seqs: int
    q: int
    ctx: int


def _q(g) -> int:
    """Tokens a group adds per sequence: a prompt's chunk, a decode's 1, a verify's width."""
    return g.tokens if g.kind == "prefill" else 1 if g.kind == "decode" else g.width


def _busiest_prompts(batch: Batch, ranks: int) -> collections.Counter:
    """How many prompts of each prefill group (by index) the busiest of `ranks` runs: the step's
    prompts spread over the ranks, longest first, one a rank in turn (each engine gives a rank its
    own requests; TRT-LLM's balancing hands every rank one, SOURCES.md [V13]), so the busiest runs
    the 1st, (ranks+1)th, ... longest of whichever groups; ceil(n / ranks) of a single group."""
    prompts = sorted(((g.tokens + g.prefix, i) for i, g in enumerate(batch.groups) if g.kind == "prefill"
                      for _ in range(g.n)), reverse=True)
    return collections.Counter(i for _, i in prompts[::ranks])


def _per_gpu(batch: Batch, lay: Layout) -> list[_Seqs]:
    """The batch as its busiest attention rank sees it: ceil(n / DP) of each decode or verify group,
    its share of the prompts (`_busiest_prompts`); prefill groups with none there are left out."""
    d = lay.dp_attn
    busiest = _busiest_prompts(batch, d)
    out = []
    for i, g in enumerate(batch.groups):
        if g.kind == "prefill":
            if busiest[i]:
                out.append(_Seqs("prefill", busiest[i], g.tokens, g.prefix))
        else:
            out.append(_Seqs(g.kind, math.ceil(g.n / d), _q(g), g.context))
    return out


def causal_pairs(q: int, ctx: int, window: int | None = None) -> float:
    """(query, key) pairs of q new tokens after ctx cached ones under a causal mask: the new token
    at position ctx + i (i = 1..q) sees min(ctx + i, window) keys (itself included)."""
    lo, hi = ctx + 1, ctx + q  # positions of the new tokens
    W = window or hi
    if hi <= W:
        return q * ctx + q * (q + 1) / 2
    if lo >= W:
        return float(q * W)
    return (W * (W + 1) - ctx * (ctx + 1)) / 2 + (hi - W) * W


def _prefill_attention_ops(m: ModelSpec, lay: Layout, g: _Seqs, count: int, kvb: float) -> list[Op]:
    """Causal attention of one prefill group (FlashAttention-style: Q·Kᵀ and P·V over the causal
    pairs, each K/V of the context read once per sequence, the new tokens' K/V written).

    MLA prefill runs in its uncompressed form (per-head K and V up-projected from the latent
    with kv_b_proj, then multi-head attention with qk = nope + rope, v = v_head_dim), as vLLM's
    MLA backend runs prefill and chunked prefill (perfmodel/model/SOURCES.md [V8]): the up-projection, of the
    cached context and the new tokens, is `mla_kv_b_proj`, in `_attention_ops`."""
    a = m.attention
    t = lay.t_attn
    if isinstance(a, MLASpec):
        h = max(1, a.n_heads // t)
        qk = a.qk_nope_head_dim + a.qk_rope_head_dim
        lat = a.kv_lora_rank + a.qk_rope_head_dim
        return [mla_prefill_attention_op(g.seqs, g.q, g.ctx, h, qk, a.v_head_dim, lat, kvb, count)]
    assert isinstance(a, GQASpec)
    hq = max(1, a.n_heads // t)
    hkv = max(1, a.n_kv_heads // t)
    D = a.head_dim
    ops = []
    for frac, window, tag in ((1 - a.sliding_layer_fraction, None, "full"), (a.sliding_layer_fraction, a.sliding_window, "window")):
        n = round(count * frac)
        if not n:
            continue
        ops.append(gqa_prefill_attention_op(g.seqs, g.q, g.ctx, hq, hkv, D, kvb, n, window, f"attention_prefill_{tag}"))
    return ops


def _attention_ops(m: ModelSpec, lay: Layout, groups: list[_Seqs], count: int) -> list[Op]:
    """The attention block over every group's new tokens: norms and projections over all of them,
    the attention core per group (its own kernel call)."""
    a = m.attention
    H = m.hidden_size
    T = sum(g.seqs * g.q for g in groups)  # tokens on this GPU
    t = lay.t_attn
    wd = m.dtypes.attention
    kvb = 1.0 if m.dtypes.kv_cache == "fp8" else 2.0
    decode = [g for g in groups if g.kind != "prefill"]
    prefill = [g for g in groups if g.kind == "prefill"]
    ops: list[Op] = [_elt("attn_norm", T, H, count, "add_rmsnorm")]  # + the previous MLP's residual
    if isinstance(a, MLASpec):
        h = max(1, a.n_heads // t)
        qk = a.qk_nope_head_dim + a.qk_rope_head_dim
        lat = a.kv_lora_rank + a.qk_rope_head_dim
        if a.q_lora_rank:
            ops += [_gemm("q_a", "dense", T, H, a.q_lora_rank, wd, count),
                    _elt("q_norm", T, a.q_lora_rank, count, "rmsnorm"),
                    _gemm("q_b", "dense", T, a.q_lora_rank, h * qk, wd, count)]
        else:
            ops.append(_gemm("q_proj", "dense", T, H, h * qk, wd, count))
        ops += [
            _gemm("kv_a", "dense", T, H, lat, wd, count),
            _elt("kv_norm", T, a.kv_lora_rank, count, "rmsnorm"),
            _elt("q_rope", T, h * a.qk_rope_head_dim, count, "rope", per_token=2 * a.qk_rope_head_dim),
        ]
        if decode:
            Td = sum(g.seqs * g.q for g in decode)
            ops.append(Op("w_uk_absorb", "dense", "gemm_bf16",
                          bytes=h * a.qk_nope_head_dim * a.kv_lora_rank * WEIGHT_BYTES[wd]
                          + Td * h * (a.qk_nope_head_dim + a.kv_lora_rank) * ACT,
                          flops=2.0 * Td * h * a.qk_nope_head_dim * a.kv_lora_rank, count=count))
            ops += [mla_attention_op(g.seqs, g.q, g.ctx, h, a.kv_lora_rank, a.qk_rope_head_dim, kvb, count) for g in decode]
            ops += [
                Op("w_uv", "dense", "gemm_bf16",
                   bytes=h * a.v_head_dim * a.kv_lora_rank * WEIGHT_BYTES[wd]
                   + Td * h * (a.v_head_dim + a.kv_lora_rank) * ACT,
                   flops=2.0 * Td * h * a.v_head_dim * a.kv_lora_rank, count=count),
                # The batched absorb GEMMs are head-major; each output is copied back token-major.
                _elt("latent_transposes", Td, h * (a.kv_lora_rank + a.v_head_dim), count, "copy"),
            ]
        if prefill:
            # every context token's latent (cached prefix and new tokens) up-projected to per-head K_nope and V
            ctx_tokens = sum(g.seqs * (g.ctx + g.q) for g in prefill)
            ops.append(_gemm("mla_kv_b_proj", "dense", ctx_tokens, a.kv_lora_rank, h * (a.qk_nope_head_dim + a.v_head_dim),
                             wd, count))
            for g in prefill:
                ops += _prefill_attention_ops(m, lay, g, count, kvb)
        ops.append(_gemm("o_proj", "dense", T, h * a.v_head_dim, H, wd, count))
    else:
        assert isinstance(a, GQASpec)
        hq = max(1, a.n_heads // t)
        hkv = max(1, a.n_kv_heads // t)
        D = a.head_dim
        ops += [_gemm("qkv_proj", "dense", T, H, (hq + 2 * hkv) * D, wd, count),
                _elt("rope", T, (hq + hkv) * D, count, "rope", per_token=2 * D)]
        for g in groups:
            if g.kind == "prefill":
                ops += _prefill_attention_ops(m, lay, g, count, kvb)
                continue
            S = g.ctx + g.q
            for frac, span, tag in ((1 - a.sliding_layer_fraction, S, "full"),
                                    (a.sliding_layer_fraction, min(S, (a.sliding_window or S) + g.q), "window")):
                n = round(count * frac)
                if n:
                    ops.append(gqa_attention_op(g.seqs, g.q, span, hq, hkv, D, kvb, n, name=f"attention_core_{tag}"))
        ops.append(_gemm("o_proj", "dense", T, hq * D, H, wd, count))
    return ops  # the residual add is fused into the MLP norm


# ----------------------------------------------------------------------------- single ops, as a step builds them
# (the step builds its ops through these, and the database rows of perfmodel/aic.py are priced through them)
def gemm_op(tokens: int, k: int, n: int, weight_dtype: str, count: int = 1, name: str = "gemm", component: str = "dense") -> Op:
    """A dense projection of `tokens` rows through a [k, n] weight in `weight_dtype`, priced as a step's GEMMs are."""
    return _gemm(name, component, tokens, k, n, weight_dtype, count)


def mla_attention_op(Cg: int, q: int, L: int, h: int, kv_lora_rank: int, rope_dim: int, kvb: float, count: int = 1) -> Op:
    """Absorbed MLA attention of Cg sequences x q new tokens over a prefix of L, h heads on this GPU,
    the latent cache at kvb bytes per element.

    Tree tokens share the prefix: the latent cache is read once per sequence. With an FP8 latent
    cache the engines' MLA quantises q to FP8 too and runs FP8 MMAs (TRT-LLM PR #3190: per-tensor
    FP8 Q and KV, trtllm-gen on Blackwell, FP8 FlashMLA on Hopper), so its compute roof is the
    GPU's FP8 rate."""
    T = Cg * q
    S = L + q
    lat = kv_lora_rank + rope_dim
    return Op("attention_core", "attention", "attention_mla",
              bytes=Cg * S * lat * kvb + 2 * T * h * kv_lora_rank * ACT + T * h * lat * ACT,
              flops=2.0 * T * h * S * (lat + kv_lora_rank), count=count,
              compute_dtype="fp8" if kvb == 1.0 else "bf16", variant=_attn_variant(q),
              probe=Probe("attention", (("H", h), ("kind", "mla"), ("q", q)), "L", L, "triton", "C", Cg,
                          x_bytes=Cg * lat * kvb)
              if kvb == 2.0 and L > 0 else None)


def mla_latent_prefill_attention_op(seqs: int, q: int, ctx: int, h: int, kv_lora_rank: int, rope_dim: int, kvb: float,
                                    count: int = 1) -> Op:
    """Causal MLA attention of `seqs` sequences x q new tokens after ctx cached ones in its absorbed
    (latent) form: h query heads of kv_lora_rank + rope_dim dims against one shared K head of as many
    and one V head of kv_lora_rank, read at kvb bytes per element (the decode form, over a prompt).
    The engines run a prompt with no cached prefix in the uncompressed form (`mla_prefill_attention_op`,
    about 3.4x fewer FLOPs for DeepSeek-V3); the form of the database rows that time this one
    (perfmodel/aic.py `LATENT_PREFILL_SOURCES`)."""
    T = seqs * q
    S = ctx + q
    k = kv_lora_rank + rope_dim
    return Op("attention_prefill", "attention", "attention_mla",
              bytes=seqs * S * k * kvb + T * h * (k + kv_lora_rank) * ACT,
              flops=2.0 * seqs * h * causal_pairs(q, ctx) * (k + kv_lora_rank), count=count, variant=PREFILL)


def gqa_prefill_attention_op(seqs: int, q: int, ctx: int, hq: int, hkv: int, D: int, kvb: float, count: int = 1,
                             window: int | None = None, name: str = "attention_prefill") -> Op:
    """Causal GQA attention of `seqs` sequences x q new tokens after ctx cached ones (a prompt, or a
    chunk of one), as a prefill step prices it (`PREFILL` variant): FlashAttention-style, Q·Kᵀ and
    P·V over the causal pairs (4 FLOPs per head, pair and head dimension), each sequence's K/V of
    the context read once, q and the output read and written, the new tokens' K/V written."""
    T = seqs * q
    S = ctx + q
    keys = min(S, (window or S) + q)  # K/V read per sequence
    return Op(name, "attention", "attention_gqa",
              bytes=seqs * keys * 2 * hkv * D * kvb + 2 * T * hq * D * ACT + T * 2 * hkv * D * kvb,
              flops=4.0 * seqs * hq * causal_pairs(q, ctx, window) * D, count=count, variant=PREFILL)


def mla_prefill_attention_op(seqs: int, q: int, ctx: int, h: int, qk: int, v: int, lat: int, kvb: float,
                             count: int = 1) -> Op:
    """Causal MLA attention of `seqs` sequences x q new tokens after ctx cached ones in its
    uncompressed form (per-head K of qk = nope + rope dims and V of v dims, up-projected from the
    latent by `mla_kv_b_proj`), h heads on this GPU, the new tokens' latent (lat) written at kvb
    bytes per element; `PREFILL` variant."""
    T = seqs * q
    S = ctx + q
    return Op("attention_prefill", "attention", "attention_mla",
              bytes=seqs * S * h * (qk + v) * ACT + T * h * (qk + v) * ACT + T * lat * kvb,
              flops=2.0 * seqs * h * causal_pairs(q, ctx) * (qk + v), count=count, variant=PREFILL)


def gqa_attention_op(Cg: int, q: int, span: int, hq: int, hkv: int, D: int, kvb: float, count: int = 1,
                     name: str = "attention_core") -> Op:
    """GQA attention of Cg sequences x q new tokens over `span` cached positions (prefix + the new
    tokens, or the sliding window), hq query and hkv KV heads of size D on this GPU, the KV cache at
    kvb bytes per element."""
    T = Cg * q
    return Op(name, "attention", "attention_gqa",
              bytes=Cg * span * 2 * hkv * D * kvb + 2 * T * hq * D * ACT,
              flops=4.0 * T * hq * span * D, count=count, variant=_attn_variant(q),
              units=attention_units(Cg, q, hq, hkv),
              probe=Probe("attention", (("D", D), ("Hkv", hkv), ("Hq", hq), ("kind", "gqa"), ("q", q)),
                          "L", span - q, "triton", "C", Cg, x_bytes=Cg * 2 * hkv * D * kvb)
              if kvb == 2.0 and span > q else None)


# The provider whose samples time the routed experts of a weight format: perfmodel's kernels
# (measure/moe.py), or the engines' grouped GEMMs whose rows an imported database holds (aic.py).
MOE_PROVIDERS = {"int4_g32": "triton_w4a16", "bf16": "triton_bf16", "fp8": "grouped_fp8", "nvfp4": "grouped_nvfp4",
                 "mxfp4": "grouped_mxfp4"}


# What one expert slice costs a grouped GEMM of the engines beyond streaming its weights (its
# tiles' pipeline fill and epilogue, the block scales, the scheduling of one more group), as the
# bytes-equivalent streamed at the kernel's rate: SLICE_OVERHEAD_BYTES + SLICE_OVERHEAD_BYTES_PER_HIDDEN
# x the hidden size, fitted by least absolute deviations on aiconfigurator-core 0.12.0's per-op rows
# of every MoE shape split TP2 to TP8 against TP1 (443 groups: H100, H200, B200, B300; SGLang, vLLM,
# TRT-LLM; fp8, fp8 block-scaled, NVFP4, MXFP4; slices of 192 columns or more, every expert touched;
# evidence/moe-slice-width/compare.txt). The groups spread widely about it (the kernels differ):
# DeepSeek-V3's TP8 slices (hidden 7168, 256 columns of fp8) then stream at 1 / 1.13 of its whole
# experts' rate, where the 12 groups of that shape span 1.02 to 1.72.
SLICE_OVERHEAD_BYTES = 0.48e6
SLICE_OVERHEAD_BYTES_PER_HIDDEN = 52.0


def slice_overhead_bytes(H: int) -> float:
    """The bytes-equivalent one expert slice of hidden size H costs beyond its weights."""
    return SLICE_OVERHEAD_BYTES + SLICE_OVERHEAD_BYTES_PER_HIDDEN * H


def routed_experts_op(T: int, H: int, I: int, k: int, s: int, weight_dtype: str, weight_bytes: float, count: int = 1,
                      probe: Probe | None = None, variant: str = "", at_least: Op | None = None,
                      slices: float = 0.0) -> Op:
    """The routed experts of T tokens (top-k of hidden H, expert intermediate I), split s ways,
    reading `weight_bytes` of expert weights on this GPU from `slices` expert slices (the touched
    experts it holds, each 1/s of its expert).

    The format's class (`kernel_classes.moe_class`) prices the call. INT4 weight-only experts are
    priced by the measured W4A16 kernel, bf16 ones by the measured bf16 grouped GEMM: their laws
    and samples hold what their slices cost. FP8, NVFP4 and MXFP4 experts are priced by their own
    class's law where the profile has one (`profile import-aic`: fitted on the database's rows of
    that format, timed per slice, so the law holds the slices' cost); where it has none (a profile
    of perfmodel's own kernels) and for formats no class names (int8), as the engines' grouped
    GEMMs run them: their (smaller) weights streamed at the bf16 grouped GEMM's rate plus
    SLICE_OVERHEAD_BYTES + SLICE_OVERHEAD_BYTES_PER_HIDDEN x H per slice, so narrow tensor-parallel
    slices cost more per byte than whole experts (`slice_overhead_bytes` below, which a law fitted
    per slice leaves out: `ops.KernelLaw.slices_in_fit`)."""
    cls = moe_class(weight_dtype)
    kc = by_name()[cls]
    measured = weight_dtype in kc.weight_formats and not kc.stand_in  # perfmodel's kernels, timed per slice
    return Op("routed_experts", "moe", cls,
              bytes=weight_bytes + (T * k / s) * 2 * H * ACT,
              flops=2.0 * T * k * 3 * H * I / s, count=count,
              compute_dtype=compute_dtype(weight_dtype), tokens=T, probe=probe, variant=variant, at_least=at_least,
              slice_overhead_bytes=0.0 if measured else slices * slice_overhead_bytes(H))


def attention_ops(m: ModelSpec, lay: Layout, C: int, q: int, L: int, count: int) -> list[Op]:
    """The attention block of C sequences × q new tokens at context L."""
    return _attention_ops(m, lay, [_Seqs("decode" if q == 1 else "verify", math.ceil(C / lay.dp_attn), q, L)], count)


def _ffn_ops(m: ModelSpec, lay: Layout, T: int, Ta: int, count_moe: int, count_dense: int, prefill: bool = False,
             T_decode: int = 0) -> list[Op]:
    """FFN ops over T tokens through this GPU's expert weights (TP/EP: all tokens) and Ta on its
    attention rank. `prefill`: the step carries prefill tokens, so its routed-expert call runs at
    prefill size (the `PREFILL` variant), never cheaper than the same call over the step's
    `T_decode` decode tokens alone."""
    H = m.hidden_size
    ops: list[Op] = []
    if count_dense:
        I = m.dense_intermediate_size
        tp, Td = lay.t_attn, Ta  # the dense MLP is split as attention is, over its attention rank's tokens
        ops += [_elt("mlp_norm_dense", Td, H, count_dense, "add_rmsnorm"),
                _gemm("dense_gate_up", "dense", Td, H, 2 * I // tp, m.dtypes.dense_mlp, count_dense),
                _elt("dense_silu_mul", Td, 3 * I // tp, count_dense, "silu_mul"),
                _gemm("dense_down", "dense", Td, I // tp, H, m.dtypes.dense_mlp, count_dense)]
    if count_moe and m.moe:
        e = m.moe
        ops += [_elt("mlp_norm", Ta, H, count_moe, "add_rmsnorm"),
                _gemm("router", "dense", Ta, H, e.n_routed_experts, "bf16", count_moe),
                _elt("topk", Ta, e.n_routed_experts, count_moe, "router_topk", per_token=8 * e.top_k),
                _routed_experts(m, lay, T, count_moe, prefill, T_decode)]
        if e.n_shared_experts:
            Is = e.shared_intermediate_size or e.expert_intermediate_size * e.n_shared_experts
            ts = lay.t_attn
            ops += [_gemm("shared_gate_up", "dense", Ta, H, 2 * Is // ts, m.dtypes.shared_experts, count_moe),
                    _elt("shared_silu_mul", Ta, 3 * Is // ts, count_moe, "silu_mul"),
                    _gemm("shared_down", "dense", Ta, Is // ts, H, m.dtypes.shared_experts, count_moe)]
    return ops  # the residual add is fused into the next layer's attention norm


def _routed_experts(m: ModelSpec, lay: Layout, T: int, count: int, prefill: bool = False, T_decode: int = 0) -> Op:
    e = m.moe
    H = m.hidden_size
    s = lay.moe_split
    E, k, I = e.n_routed_experts, e.top_k, e.expert_intermediate_size
    wd = m.dtypes.routed_experts
    expert_bytes = 3.0 * H * I * WEIGHT_BYTES[wd]
    if lay.experts_ep:
        # E / groups whole experts per expert-parallel group, each expert's FFN split moe_tp ways in it;
        # the busiest group sets the step
        groups = s // lay.moe_tp
        touched = expected_max_distinct_per_gpu(E, k, T, groups)
        bytes_w = touched * expert_bytes / lay.moe_tp
    else:
        touched = expected_distinct(E, k, T)
        bytes_w = touched * expert_bytes / s
    if prefill:
        # The profile's MoE samples are decode-size kernels: a prefill-size call is priced by the law.
        return routed_experts_op(T, H, I, k, s, wd, bytes_w, count, variant=PREFILL, slices=touched,
                                 at_least=_routed_experts(m, lay, T_decode, count) if T_decode else None)
    tp = lay.moe_tp if lay.experts_ep else s
    # one expert-parallel group holds every expert, as a tensor-parallel split of the same width does
    ep = groups if lay.experts_ep and groups > 1 else None
    probe = moe_probe(E, H, I // tp, k, T, wd, ep) if I % tp == 0 else None
    return routed_experts_op(T, H, I, k, s, wd, bytes_w, count, probe=probe, slices=touched)


def moe_probe(E: int, H: int, I_slice: int, k: int, T: int, weight_dtype: str, ep: int | None = None) -> Probe | None:
    """The samples that describe a routed-expert call of T tokens over experts split to I_slice
    columns: a tensor-parallel split's (ep None), or, over `ep` expert-parallel groups, the busiest
    group's (an imported profile's, `aic.EP_DISTRIBUTION`); None for a format no provider times."""
    provider = MOE_PROVIDERS.get(weight_dtype)
    if provider is None:
        return None
    match = (("E", E), ("H", H), ("I", I_slice), ("k", k)) + ((("ep", ep),) if ep is not None else ())
    return Probe("moe", match, "T", T, provider)


def ffn_ops(m: ModelSpec, lay: Layout, C: int, q: int, count_moe: int, count_dense: int) -> list[Op]:
    """The FFN ops of C sequences × q new tokens."""
    return _ffn_ops(m, lay, C * q, math.ceil(C / lay.dp_attn) * q, count_moe, count_dense)


def _collectives(m: ModelSpec, lay: Layout, T: int, Ta: int, Ta_ep: int, rows: int, n_moe: int, n_dense: int,
                 lm_head: bool) -> list[Collective]:
    """T tokens in the step (all GPUs), Ta on the busiest attention data-parallel group, Ta_ep its
    share per GPU (what an all-to-all sends), `rows` logits rows (all GPUs)."""
    if not lay.comm or lay.n_gpus == 1:
        return []
    H = m.hidden_size
    L = n_moe + n_dense
    out: list[Collective] = []
    if lay.parallel == "tp":
        out.append(Collective("tp_allreduce", "all_reduce", T * H * ACT, 2 * L))
    else:
        if lay.parallel == "tp-attn-ep-moe":
            # after attention, and after each FFN (routed + shared partial sums, or the TP dense MLP)
            out.append(Collective("attn_allreduce", "all_reduce", T * H * ACT, L))
            out.append(Collective("ffn_allreduce", "all_reduce", T * H * ACT, L))
        elif lay.parallel == "ep":
            if n_moe and m.moe:
                # DP attention: dispatch + combine, each token's hidden state to its k experts' owners.
                out.append(Collective("ep_alltoall", "all_to_all", Ta_ep * m.moe.top_k * H * ACT, 2 * n_moe))
        else:
            out += _mixed_collectives(m, lay.split, T, Ta, Ta_ep, n_moe, L)
    if lm_head:
        # Greedy/verify sampling: local argmax, then gather (value, index) pairs.
        out.append(Collective("logits_gather", "all_reduce", rows * 8.0, 1))
    return out


def _mixed_collectives(m: ModelSpec, sp: Split, T: int, Ta: int, Ta_ep: int, n_moe: int, L: int) -> list[Collective]:
    """A mixed layout's collectives per step: attention TP over attn_tp GPUs, experts TP x EP.

    One data-parallel group (attn_dp = 1): every GPU holds all T tokens after attention's
    all-reduce, runs its experts' slices on the pairs routed to them, and the routed, shared and
    dense partial sums are all-reduced over the n GPUs, as tp-attn-ep-moe (2 all-reduces a layer).
    Several groups: attention and the TP-split shared and dense MLPs are all-reduced within each
    group (over Ta tokens, when attn_tp > 1); the MoE exchanges tokens between groups: with whole
    experts per GPU (moe_tp = 1) an all-to-all dispatch and combine of each GPU's Ta_ep tokens to
    their k experts' owners (as dp-attn+ep); with experts split TP (moe_tp > 1) every GPU needs
    every token, so an all-gather of the T tokens' hidden states before the experts and a
    reduce-scatter after (TRT-LLM's attention-DP MoE without all-to-all), which move what one
    all-reduce of T tokens moves (an all-reduce is a reduce-scatter plus an all-gather)."""
    H = m.hidden_size
    n = sp.n_gpus
    if sp.attn_dp == 1:
        return [Collective("attn_allreduce", "all_reduce", T * H * ACT, L),
                Collective("ffn_allreduce", "all_reduce", T * H * ACT, L)]
    out: list[Collective] = []
    if sp.attn_tp > 1:
        out += [Collective("attn_allreduce", "all_reduce", Ta * H * ACT, L, group=sp.attn_tp),
                Collective("ffn_allreduce", "all_reduce", Ta * H * ACT, L, group=sp.attn_tp)]
    if n_moe and m.moe:
        if sp.moe_tp == 1:
            out.append(Collective("ep_alltoall", "all_to_all", Ta_ep * m.moe.top_k * H * ACT, 2 * n_moe))
        else:
            out.append(Collective("moe_allgather_reducescatter", "all_reduce", T * H * ACT, n_moe, group=n))
    return out


def collectives(m: ModelSpec, lay: Layout, C: int, q: int, n_moe: int, n_dense: int, lm_head: bool) -> list[Collective]:
    return _collectives(m, lay, C * q, math.ceil(C / lay.dp_attn) * q, math.ceil(C / lay.n_gpus) * q, C * q, n_moe,
                        n_dense, lm_head)


def lm_head_ops(m: ModelSpec, lay: Layout, tokens: int) -> list[Op]:
    """Final norm, vocab-parallel lm_head and greedy sampling over the local vocab shard."""
    s = lay.tp_shape or lay.n_gpus
    V = math.ceil(m.vocab_size / s)
    return [_elt("final_norm", tokens, m.hidden_size, 1, "add_rmsnorm"),
            Op("lm_head", "lm_head", "gemm_bf16",
               bytes=V * m.hidden_size * WEIGHT_BYTES[m.dtypes.lm_head] + tokens * (m.hidden_size + V) * ACT,
               flops=2.0 * tokens * m.hidden_size * V, count=1),
            _elt("sample_argmax", tokens, V, 1, "argmax_vocab", per_token=8)]


def _layer_counts(m: ModelSpec, n_layers: int | None, n_dense: int | None) -> tuple[int, int, int]:
    nl = m.n_layers if n_layers is None else n_layers
    nd = min(m.n_dense_layers if n_dense is None else n_dense, nl)
    nm = nl - nd if m.moe else 0
    if not m.moe:
        nd = nl
    return nl, nd, nm


def batch_ops(m: ModelSpec, lay: Layout, batch: Batch, *, n_layers: int | None = None, n_dense: int | None = None,
              lm_head: bool = True) -> tuple[list[Op], list[Collective]]:
    """All ops and collectives of one target forward over a batch (per GPU, as `decode_ops`)."""
    nl, nd, nm = _layer_counts(m, n_layers, n_dense)
    groups = _per_gpu(batch, lay)
    T = sum(g.n * _q(g) for g in batch.groups)
    Ta = sum(g.seqs * g.q for g in groups)
    prefill = batch.has_prefill
    T_dec = sum(g.n * _q(g) for g in batch.groups if g.kind != "prefill")
    ops = _attention_ops(m, lay, groups, nl) + _ffn_ops(m, lay, T, Ta, nm, nd, prefill=prefill, T_decode=T_dec)

    def rows(q: int, kind: str) -> int:  # logits rows per sequence
        return 1 if kind == "prefill" and batch.logits == "last" else q

    if lm_head:
        ops += lm_head_ops(m, lay, sum(g.seqs * rows(g.q, g.kind) for g in groups))
    on_one = _busiest_prompts(batch, lay.n_gpus)  # tokens of the busiest GPU's own sequences, the dispatch's unit
    Ta_ep = sum((on_one[i] if g.kind == "prefill" else math.ceil(g.n / lay.n_gpus)) * _q(g) for i, g in enumerate(batch.groups))
    rows_all = sum(g.n * rows(_q(g), g.kind) for g in batch.groups)
    return ops, _collectives(m, lay, T, Ta, Ta_ep, rows_all, nm, nd, lm_head)


def decode_ops(m: ModelSpec, lay: Layout, C: int, q: int, L: int, *, n_layers: int | None = None,
               n_dense: int | None = None, lm_head: bool = True) -> tuple[list[Op], list[Collective]]:
    """All ops and collectives of one target forward over C sequences × q tokens at context L."""
    g = Decode(n=C, context=L) if q == 1 else Verify(n=C, width=q, context=L)
    return batch_ops(m, lay, Batch(groups=(g,)), n_layers=n_layers, n_dense=n_dense, lm_head=lm_head)


def at_probe_x(op: Op, x: float) -> Op:
    """The same call at another value of its probe's swept field, as the builders above count it:
    a GEMM's weights stay and its activations and flops scale with the tokens; a norm's weight
    vector stays and the rest of an elementwise op scales; attention's cache read grows with the
    context (`Probe.x_bytes` per position) and its flops with the positions attended (context +
    q); the routed experts read the weights of the experts T tokens touch (`expected_distinct`)
    and their activations and flops scale with T."""
    p = op.probe
    r = x / p.x
    shape = dict(p.match)
    if p.bench == "gemm":
        act = (p.x - x) * (shape["K"] + shape["N"]) * ACT
        return replace(op, bytes=op.bytes - act, flops=op.flops * r, probe=replace(p, x=x))
    if p.bench == "attention" and p.x_bytes:
        q = shape["q"]
        return replace(op, bytes=op.bytes + (x - p.x) * p.x_bytes, flops=op.flops * (x + q) / (p.x + q),
                       probe=replace(p, x=x))
    if p.bench == "moe":
        wd = {v: k for k, v in MOE_PROVIDERS.items()}[p.provider]
        per_expert = 3.0 * shape["H"] * shape["I"] * WEIGHT_BYTES[wd]
        w0, w1 = (expected_distinct(shape["E"], shape["k"], t) * per_expert for t in (p.x, x))
        return replace(op, bytes=w1 + (op.bytes - w0) * r, flops=op.flops * r, probe=replace(p, x=x))
    fixed = shape["H"] * ACT if p.bench == "elementwise" and shape.get("op") in ("rmsnorm", "add_rmsnorm") else 0.0
    return replace(op, bytes=fixed + (op.bytes - fixed) * r, flops=op.flops * r, probe=replace(p, x=x))


def at_probe(op: Op, x: float, y: float | None = None) -> Op:
    """The same call at other values of its probe's swept fields: `at_probe_x` along the first; along
    the second (the sequences C of an attention call) its bytes, flops and work units are
    proportional to C, as is its cache read per position."""
    p = op.probe
    if y is not None and p.y_name is not None and y != p.y:
        r = y / p.y
        op = replace(op, bytes=op.bytes * r, flops=op.flops * r, units=max(1, round(op.units * r)) if op.units else 0,
                     probe=replace(p, y=y, x_bytes=p.x_bytes * r))
    return op if x == op.probe.x else at_probe_x(op, x)
