"""A Kimi K2.6-shaped synthetic decode step (random weights, INT4 routed experts),
graph-captured, for the model's self-check -> `E2EPoint`s.

Per layer, in this order (perfmodel.model mirrors it op by op; keep it exactly):
  fused residual add + RMSNorm (the previous layer's MLP output; plain RMSNorm in layer 0);
  q_a GEMM (H->1536, replicated); RMSNorm; q_b GEMM (1536->(n/t)*192);
  kv_a GEMM (H->576, replicated); RMSNorm on the 512 latent; rope (Triton, on q_pe);
  W_UK absorb bmm (per head 128->512); MLA tree attention over the latent cache [C, L+q, 576]
  (ckv [C,S,512] + kpe [C,S,64]); W_UV bmm (512->128 per head); o_proj GEMM ((n/t)*128->H);
  [all-reduce if n_gpus>1]; fused residual add + RMSNorm; router GEMM (H->384, bf16) +
  top-k (Triton); fused_moe_w4a16 (I/t, E=384, k=8, uniform random routing fixed per point;
  the router's own top-k is computed but not used, so routing stays uniform);
  shared expert gate_up GEMM (H->2*2048/t) + SiLU*mul + down GEMM (the down GEMM adds the
  routed output in its epilogue: torch.addmm, no extra kernel); [all-reduce].
With parallel="tp-attn-ep-moe" the routed experts are split by expert instead: this rank
holds experts [rank*E/n, (rank+1)*E/n) with the full intermediate size, every rank draws
the same routing (seeded per point), and fused_moe_w4a16 gets the ids shifted to the local
range, dropping the other ranks' pairs. Attention and the shared expert stay TP, and the
second all-reduce sums the routed and shared partial outputs, so the collectives are the
TP ones (perfmodel.model.layers prices the same).
The last layer's MLP output is added by a plain residual add, or with lm_head=True by the
fused add + final RMSNorm, then the lm_head GEMM (H->V/t) and argmax over V/t (no vocab
all-gather across GPUs). No KV-cache write is included (the op list has none).
Small glue copies (transposes around the bmm's) are extra kernels not in the list.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from perfmodel.profile import BenchResult, E2EPoint

from .common import BenchContext, BenchOutput, make_sample, randn, uniform_topk
from .shapes import KIMI
from .timing import time_fn


class KimiStack:
    def __init__(self, n_layers: int = 4, tp: int = 8, group=None, parallel: str = "tp", rank: int = 0):
        import torch

        from perfmodel.kernels.moe_w4a16 import random_kernel_weights

        k = KIMI
        assert parallel in ("tp", "tp-attn-ep-moe"), parallel
        self.n_layers, self.tp, self.group, self.parallel = n_layers, tp, group, parallel
        H, nh = k["hidden"], k["n_heads"] // tp
        Is = k["shared_inter"] // tp
        E = k["n_experts"]
        ep = parallel == "tp-attn-ep-moe"
        I = k["moe_inter"] if ep else k["moe_inter"] // tp  # EP: whole experts
        E_local = E // tp if ep else E
        self.expert_lo = rank * E_local if ep else 0  # first global expert id held here
        self.H, self.nh, self.I, self.E, self.k = H, nh, I, E, k["top_k"]
        s = 0.02
        self.layers = []
        for _ in range(n_layers):
            self.layers.append(dict(
                ln1=randn(H) * 0.1 + 1, q_a=randn(k["q_lora"], H, scale=s), q_a_ln=randn(k["q_lora"]) * 0.1 + 1,
                q_b=randn(nh * 192, k["q_lora"], scale=s), kv_a=randn(576, H, scale=s), kv_ln=randn(512) * 0.1 + 1,
                w_uk=randn(nh, 128, 512, scale=s), w_uv=randn(nh, 512, 128, scale=s), o=randn(H, nh * 128, scale=s),
                ln2=randn(H) * 0.1 + 1, router=randn(E, H, scale=s),
                **dict(zip(("w13", "s13"), random_kernel_weights(E_local, 2 * I, H))),
                **dict(zip(("w2", "s2"), random_kernel_weights(E_local, H, I))),
                sg=randn(2 * Is, H, scale=s), sd=randn(H, Is, scale=s),
            ))
        self.final_ln = randn(H) * 0.1 + 1
        self.lm_head = None
        self.sm_scale = 1.0 / math.sqrt(k["qk_nope"] + k["qk_rope"])
        del torch

    def ensure_lm_head(self):
        if self.lm_head is None:
            self.lm_head = randn(KIMI["vocab"] // self.tp, self.H, scale=0.02)

    def state(self, C: int, q: int, L: int):
        """Per-point inputs: hidden x, latent caches per layer, tree mask, routing, rope tables."""
        import torch

        from .attention import random_tree_mask

        T, S = C * q, L + q
        st = dict(C=C, q=q, L=L)
        st["x"] = randn(T, self.H)
        st["ckv"] = [randn(C, S, 512) for _ in range(self.n_layers)]
        st["kpe"] = [randn(C, S, 64) for _ in range(self.n_layers)]
        st["mask"] = random_tree_mask(C, q, seed=C * 100 + q)
        if self.parallel == "tp":
            st["ids"], st["wts"] = uniform_topk(T, self.E, self.k)
        else:  # one routing for all ranks, shifted to this rank's experts (others dropped)
            gen = torch.Generator(device=st["x"].device).manual_seed(C * 1000 + q)
            ids, st["wts"] = uniform_topk(T, self.E, self.k, generator=gen)
            st["ids"] = ids - self.expert_lo
        ang = torch.rand(C, q, 1, 32, device=st["x"].device) * 6.28
        st["cos"], st["sin"] = ang.cos().to(torch.bfloat16), ang.sin().to(torch.bfloat16)
        return st

    def step(self, st, lm_head: bool = False):
        import torch
        import torch.distributed as dist
        import torch.nn.functional as F

        from perfmodel.kernels.moe_w4a16 import fused_moe_w4a16
        from perfmodel.kernels.tree_attention import tree_attention_mla

        from .ops import add_rmsnorm, argmax_sample, residual_add, rmsnorm, rope, router_topk, silu_mul

        C, q = st["C"], st["q"]
        T, nh = C * q, self.nh
        x = st["x"]
        y = None  # the previous layer's MLP output, added into x by the next fused add+norm
        for li, W in enumerate(self.layers):
            h, x = add_rmsnorm(x, y, W["ln1"]) if y is not None else (rmsnorm(x, W["ln1"]), x)
            qa = rmsnorm(F.linear(h, W["q_a"]), W["q_a_ln"])
            qf = F.linear(qa, W["q_b"]).view(C, q, nh, 192)
            kv = F.linear(h, W["kv_a"])
            rmsnorm(kv[:, :512], W["kv_ln"])  # the new latent (not written to the cache; see docstring)
            q_pe = rope(qf[..., 128:], st["cos"], st["sin"])
            q_nope = qf[..., :128].reshape(T, nh, 128).transpose(0, 1)
            q_lat = torch.bmm(q_nope, W["w_uk"]).transpose(0, 1).reshape(C, q, nh, 512)
            a = tree_attention_mla(q_lat, q_pe, st["ckv"][li], st["kpe"][li], st["mask"], self.sm_scale)
            o = torch.bmm(a.reshape(T, nh, 512).transpose(0, 1), W["w_uv"]).transpose(0, 1).reshape(T, nh * 128)
            o = F.linear(o, W["o"])
            if self.group is not None:
                dist.all_reduce(o, group=self.group)
            h, x = add_rmsnorm(x, o, W["ln2"])
            router_topk(F.linear(h, W["router"]), self.k)
            m = fused_moe_w4a16(h, W["w13"], W["s13"], W["w2"], W["s2"], st["ids"], st["wts"])
            y = torch.addmm(m, silu_mul(F.linear(h, W["sg"])), W["sd"].t())
            if self.group is not None:
                dist.all_reduce(y, group=self.group)
        if lm_head:
            h, _ = add_rmsnorm(x, y, self.final_ln)
            return argmax_sample(F.linear(h, self.lm_head))
        return residual_add(x, y)


@dataclass
class Point:
    C: int
    q: int
    L: int = 4096
    lm_head: bool = False
    graph: bool = True


def points_1gpu(quick: bool) -> list[Point]:
    if quick:
        return [Point(C, q) for C in (1, 32) for q in (1, 9)] + [Point(8, 9, lm_head=True)]
    pts = [Point(C, q) for C in (1, 8, 32, 128) for q in (1, 9, 17)]
    return pts + [Point(32, 9, L=16384), Point(8, 9, lm_head=True), Point(8, 9, graph=False)]


def points_tp(n_gpus: int, quick: bool) -> list[Point]:
    """Multi-GPU TP points: C = 1, 8, 32 on 2 GPUs; C = 1, 8, 32, 128 on 4+ GPUs (the 8-GPU set);
    q = 1 and 9."""
    Cs = (1, 8) if quick else ((1, 8, 32) if n_gpus <= 2 else (1, 8, 32, 128))
    return [Point(C, q) for C in Cs for q in ((1,) if quick else (1, 9))]


def measure_points(stack: KimiStack, points, *, n_gpus: int, budget_check=None, fixed_samples: bool = False):
    """Time each point (graph-captured unless Point.graph is False). With n_gpus > 1 every
    rank must take the same number of samples, so sampling is by count only."""
    import torch

    out, samples = [], []
    for p in points:
        if budget_check is not None and budget_check():
            break
        st = stack.state(p.C, p.q, p.L)
        if p.lm_head:
            stack.ensure_lm_head()
        kw = dict(max_samples=15, max_seconds=math.inf) if fixed_samples else dict(max_samples=20, max_seconds=0.3)
        t = time_fn(lambda: stack.step(st, p.lm_head), graph=p.graph, calls_per_graph=1, warmup=2, **kw)
        layout = f"tp{stack.tp}" if stack.parallel == "tp" else f"tpattn_ep{stack.tp}"
        name = (f"kimi_{layout}_x{n_gpus}_C{p.C}_q{p.q}_L{p.L}" + ("_lmhead" if p.lm_head else "")
                + ("" if p.graph else "_eager"))
        out.append(E2EPoint(
            name=name, model="kimi-k2.6", n_layers=stack.n_layers, tp_shape=stack.tp, n_gpus=n_gpus, parallel=stack.parallel,
            concurrency=p.C, q=p.q, context=p.L, lm_head=p.lm_head, graph=p.graph, step_ms=t.median_ms,
            p10_ms=t.p10_ms, p90_ms=t.p90_ms,
            note="synthetic Kimi K2.6 MoE layers, random weights, INT4 experts, uniform routing; see perfmodel.measure.e2e",
        ))
        samples.append(make_sample({"name": name, "C": p.C, "q": p.q, "L": p.L, "tp": stack.tp, "n_gpus": n_gpus,
                                    "parallel": stack.parallel,
                                    "lm_head": p.lm_head, "graph": p.graph}, t, provider="torch+triton"))
        del st
        torch.cuda.empty_cache()
    return out, samples


def run(ctx: BenchContext) -> BenchOutput:
    stack = KimiStack(n_layers=4, tp=8)
    pts, samples = measure_points(stack, points_1gpu(ctx.quick), n_gpus=1, budget_check=lambda: ctx.over_budget(0.95))
    n_all = len(points_1gpu(ctx.quick))
    note = f"{len(pts)}/{n_all} points" + ("; stopped by time budget" if len(pts) < n_all else "")
    return BenchOutput(BenchResult(status="ok", samples=samples, note=note), e2e=pts)
