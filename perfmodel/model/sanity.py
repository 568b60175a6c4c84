"""Checks that keep a projection physical: what a request asks must be something an engine can
run, and what it is told (an observed figure, an acceptance table) must be something physics
allows. Each failure is a `ProjectionError` whose one line names the option and the bad value.

Parallel layouts, as the serving engines implement them:
  tensor parallelism   vLLM and SGLang split attention heads evenly: n_heads % TP == 0 (vLLM:
                       "Total number of attention heads must be divisible by tensor parallel
                       size"). GQA KV heads are split when TP ≤ n_kv_heads (n_kv_heads % TP == 0)
                       and replicated when TP > n_kv_heads (TP % n_kv_heads == 0, one KV head
                       per GPU: vLLM's QKVParallelLinear); the KV cache is priced that way
                       (memory.kv_bytes_per_token) and the output says so. MLA's latent is one
                       shared head, replicated on every rank. The dense and shared-expert MLPs
                       (and the drafter's) are split by TP along their intermediate size, which
                       must divide evenly (vLLM's ColumnParallelLinear: output_size % tp == 0).
  expert parallelism   whole experts per GPU; this model prices E/n experts on every GPU, so
                       the expert count must divide evenly (384 experts on 7 GPUs is refused
                       rather than priced as if 54.9 experts sat on each).
Pure python: no torch, no numpy.
"""

from __future__ import annotations

import math

from perfmodel.errors import ProjectionError
from perfmodel.specs.schema import GQASpec, ModelSpec

MAX_CONTEXT = 10_000_000  # tokens per sequence; beyond any model's trained context
MAX_CONCURRENCY = 1_000_000
MAX_GPUS = 65_536
MAX_BUDGET = 4096
MAX_HOST_CPU_FACTOR = 100.0


def _error(msg: str) -> ProjectionError:
    return ProjectionError(msg)


def _divisors(n: int) -> str:
    return ", ".join(str(d) for d in range(1, n + 1) if n % d == 0)


def check_request(req, model: ModelSpec) -> None:
    """Numbers in range and a layout engines can run; raises ProjectionError. (Request's schema
    has already refused non-numbers, bools, and values below 1, or not above 0 for the factor.)"""
    if req.gpus > MAX_GPUS:
        raise _error(f"--gpus {req.gpus}: must be between 1 and {MAX_GPUS}")
    if req.context > MAX_CONTEXT:
        raise _error(f"--context {req.context}: must be between 1 and {MAX_CONTEXT} tokens (a decode step attends "
                     "to at least the token it decodes)")
    big = [c for c in req.concurrency if c > MAX_CONCURRENCY]
    if big:
        raise _error(f"--concurrency {big[0]}: must be ≤ {MAX_CONCURRENCY}")
    f = req.host_cpu_factor
    if f > MAX_HOST_CPU_FACTOR:
        raise _error(f"--host-cpu-factor {f}: must be a finite number in (0, {MAX_HOST_CPU_FACTOR:g}]")
    if req.budget != "auto" and req.budget > MAX_BUDGET:
        raise _error(f"--budget {req.budget}: must be between 1 and {MAX_BUDGET}, or 'auto'")
    if req.parallel != "tp" and model.moe is None:
        return  # request._check says: needs an MoE model
    problem = layout_problem(model, req.parallel, req.gpus, drafter=req.spec != "none")
    if problem:
        raise _error(f"--gpus {req.gpus} --parallel {req.parallel}: {problem}")


def layout_problem(model: ModelSpec, parallel: str, n: int, drafter: bool = False) -> str | None:
    """Why engines cannot run `model` over `n` GPUs with `parallel`, or None. Attention's TP width
    (n for tp and tp+ep, 1 for dp-attn+ep, a mixed layout's attn_tp) must split the heads and the
    TP-split MLPs evenly; the expert-parallel width (n for tp+ep and dp-attn+ep, a mixed layout's
    moe_ep) the experts."""
    from perfmodel.scenario import layout_split

    try:
        sp = layout_split(parallel, n)
    except ValueError as e:
        return str(e).split(": ", 1)[1] if str(e).startswith("--parallel") else str(e)
    if n <= 1:
        return None
    t = sp.attn_tp
    whole = "over the GPUs" if t == n else f"over attention's {t}-GPU tensor-parallel groups"
    if t > 1:
        h = model.attention.n_heads
        if h % t:
            return (f"tensor parallelism splits {model.name}'s {h} attention heads evenly (vLLM and SGLang require "
                    f"n_heads % TP == 0); use a " + ("GPU count" if t == n else "attention TP width")
                    + f" that divides {h} ({_divisors(h)})")
        a = model.attention
        if isinstance(a, GQASpec) and a.n_kv_heads % t and t % a.n_kv_heads:
            return (f"{model.name}'s {a.n_kv_heads} KV heads can be neither split nor replicated evenly over {t} GPUs "
                    f"(engines need n_kv_heads % TP == 0 or TP % n_kv_heads == 0)")
        if drafter and model.drafter is not None and model.drafter.n_heads % t:
            return (f"the drafter {model.drafter.name}'s {model.drafter.n_heads} attention heads do not split evenly "
                    f"over {t} GPUs")
        for what, size in _tp_split_mlps(model, drafter):
            if size % t:
                return (f"tensor parallelism splits {what} intermediate size {size} evenly {whole} (engines "
                        f"require intermediate_size % TP == 0); use a GPU count that divides {size}")
    e_ways = sp.moe_ep
    if e_ways > 1 and model.moe is not None:
        e = model.moe.n_routed_experts
        if e % e_ways:
            return (f"expert parallelism places whole experts, {e} / {e_ways} = {e / e_ways:.2f} per GPU; this model "
                    f"prices an even split, so use " + ("a GPU count" if e_ways == n else "an expert-parallel width")
                    + f" that divides {e} ({_divisors(e)})")
    return None


def _tp_split_mlps(model: ModelSpec, drafter: bool) -> list[tuple[str, int]]:
    """The MLPs tensor parallelism splits along their intermediate size: (what, size)."""
    out = []
    if model.n_dense_layers and model.dense_intermediate_size:
        out.append((f"{model.name}'s dense MLP", model.dense_intermediate_size))
    e = model.moe
    if e is not None and e.n_shared_experts:
        out.append((f"{model.name}'s shared experts'", e.shared_intermediate_size or e.expert_intermediate_size * e.n_shared_experts))
    if drafter and model.drafter is not None:
        out.append((f"the drafter {model.drafter.name}'s MLP", model.drafter.intermediate_size))
    return out


def layout_notes(model: ModelSpec, parallel: str, n: int) -> list[str]:
    """What the projection assumes about replicated state, said in the output."""
    from perfmodel.scenario import layout_split

    a = model.attention
    t = layout_split(parallel, n).attn_tp
    if t > 1 and isinstance(a, GQASpec) and t > a.n_kv_heads:
        return [(f"TP {t} > {a.n_kv_heads} KV heads: each KV head is replicated on {t // a.n_kv_heads} GPUs "
                 f"(one KV head per GPU, as vLLM and SGLang do); the KV cache is priced per GPU that way")]
    return []


def check_treebuild(req, profile, profile_label: str) -> None:
    if req.spec == "ddtree" and req.tree_build not in profile.treebuild:
        have = ", ".join(profile.treebuild) or "none"
        raise _error(f"--spec ddtree --tree-build {req.tree_build}: the profile ({profile_label}) has no "
                     f"'{req.tree_build}' tree-build fit (treebuild fits: {have})")


def check_acceptance(spec: str, depth: int) -> None:
    """τ (tokens accepted per step, bonus included) can exceed neither B + 1 nor the block size
    (draft depth + 1): a tree of B nodes accepts at most B drafted tokens along one path, and
    the drafter proposes at most `depth` tokens per block."""
    s = spec.strip()
    if s.lower().startswith("table:"):
        for part in filter(None, (x.strip() for x in s.split(":", 1)[1].split(","))):
            # TAU may carry its standard error: 16=6.1±0.3 or 16=6.1+-0.3
            b, t = part.split("=", 1)
            b, t = float(b), float(t.replace("+-", "±").partition("±")[0])
            cap = min(b, depth) + 1
            if t > cap + 1e-9:
                why = f"B+1 = {b + 1:g}" if b <= depth else f"the block size {depth + 1}"
                raise _error(f"--acceptance '{spec}': τ {t:g} at budget {b:g} is above {why} (at most one token "
                             f"per drafted position plus the bonus token)")


def capped_tau(acc, budget: int, depth: int) -> float:
    """τ(B) of the acceptance source, at most min(B, depth) + 1: a table clamped at its ends (or
    any source) cannot credit a small tree with more tokens than it drafts."""
    return min(float(acc.tau(budget)), min(budget, depth) + 1.0)


def observed_floor_us(model: ModelSpec, gpu, layout, concurrency: int, context: int, q: int = 1,
                      n_layers: int | None = None, lm_head: bool = True) -> float:
    """The shortest decode step physics allows: the bytes one GPU must move for the step (its
    weight shards, the experts its tokens touch, its KV cache) at the datasheet peak bandwidth."""
    from perfmodel.model.layers import decode_ops

    ops, _ = decode_ops(model, layout, concurrency, q, context, n_layers=n_layers, lm_head=lm_head)
    total = sum(op.bytes * op.count for op in ops)
    return total / (gpu.memory.bandwidth_GBps.value * 1e3)


def check_observed(s: str, o: dict, model: ModelSpec, gpu, context: int) -> None:
    if o["gpus"] < 1 or o["concurrency"] < 1:
        raise _error(f"--observed '{s}': GPU count and concurrency must be ≥ 1")
    tps = o["tokens_per_s"]
    if not math.isfinite(tps) or tps <= 0:
        raise _error(f"--observed '{s}': tok/s must be a positive number, got {tps:g}")
    if context > MAX_CONTEXT:  # (parse_observed and Request refuse a context below 1)
        raise _error(f"--observed '{s}': ctx {context} must be between 1 and {MAX_CONTEXT}")
    from perfmodel.model.layers import Layout

    layout = Layout(o["parallel"], o["gpus"])
    problem = layout_problem(model, layout.parallel, layout.n_gpus)
    if problem:
        raise _error(f"--observed '{s}': {problem}")
    spec = o.get("spec") or "none"
    q = (o.get("budget") or model.drafter.block_size - 1) + 1 if spec != "none" and model.drafter else 1
    tau_max = min(q, model.drafter.block_size) if q > 1 else 1  # a step yields at most this many tokens
    floor_us = observed_floor_us(model, gpu, layout, o["concurrency"], context, q) / tau_max
    if 1e6 / tps < floor_us:
        raise _error(f"--observed '{s}': {tps:g} tok/s per stream is faster than physics allows on {gpu.name}: "
                     f"each step moves at least {floor_us * gpu.memory.bandwidth_GBps.value / 1e6:.2f} GB per GPU, "
                     f"{floor_us / 1e3:.3f} ms at the {gpu.memory.bandwidth_GBps.value:g} GB/s peak "
                     f"(≤ {1e6 / floor_us:.0f} tok/s per stream)")
