"""A decode stack perfmodel did not write, to check calibration against kernels it does not know.

Every kernel is torch's own: cuBLAS GEMMs through `F.linear`, `F.rms_norm`, rope as plain
tensor arithmetic, a KV-cache write by slice assignment, `F.scaled_dot_product_attention`
(GQA-native at q = 1; when a step verifies q > 1 tokens per sequence, a bottom-right
causal mask with each KV head's query group folded into the query rows, so no backend
expands the KV heads), `torch._grouped_mm` for routed experts (router GEMM, softmax, `torch.topk`, sort,
grouped GEMMs, weighted `index_add_`), the lm_head GEMM and a local argmax, and NCCL
all-reduces under TP (after attention, after the MLP, and for the sampled (value, index)
pairs). One CUDA graph per step.

Two model presets at their full layer counts: a dense GQA model (llama-3.1-8b) and an MoE
(qwen3-30b-a3b), on one GPU and TP over every local GPU, at several concurrencies, contexts
and verify widths. With `NCCL_P2P_DISABLE=1` the TP run goes through host memory over PCIe
(link label `pcie5`), else over the GPUs' own link.

Results are samples of bench "foreign" (shape: stack, model, n_gpus, link, C, q, L), each
with its step time. `perfmodel validate` calibrates the model on two of them and predicts
the rest (kind `foreign-calibrated`)."""

from __future__ import annotations

import contextlib
import json
import math
import os
import tempfile
from pathlib import Path

from perfmodel.profile import BenchResult, Sample

from .common import BenchContext, BenchOutput, make_sample
from .timing import Timing, time_fn

MODELS = ("llama-3.1-8b", "qwen3-30b-a3b")
STACK = "torch-foreign"


def _shapes(name: str) -> dict:
    from perfmodel.specs import registry

    m = registry.load_model(name)
    a = m.attention
    d = dict(name=name, layers=m.n_layers, H=m.hidden_size, hq=a.n_heads, hkv=a.n_kv_heads, D=a.head_dim,
             vocab=m.vocab_size, eps=1e-6)
    if m.moe:
        d.update(E=m.moe.n_routed_experts, k=m.moe.top_k, I=m.moe.expert_intermediate_size)
    else:
        d.update(I=m.dense_intermediate_size)
    return d


def points(n_gpus: int, quick: bool, pcie: bool = False) -> list[tuple[int, int, int]]:
    """(C, q, L) per model: concurrency x context x verify width on one GPU and TP over NVLink;
    a smaller set over PCIe (the collectives are what it adds)."""
    if quick:
        return [(1, 1, 1024), (8, 4, 4096)]
    if pcie:
        return [(C, 1, 1024) for C in (1, 8, 32)]
    return [(C, q, L) for C in (1, 8, 32) for L in (1024, 8192) for q in (1, 4)]


class TorchStack:
    """One rank's shard of a full-depth decode model, built from torch ops only."""

    def __init__(self, name: str, tp: int = 1, group=None):
        import torch

        s = _shapes(name)
        self.s, self.tp, self.group = s, tp, group
        H, D = s["H"], s["D"]
        self.hq, self.hkv = s["hq"] // tp, max(1, s["hkv"] // tp)
        self.moe = "E" in s
        I = s["I"] // tp
        g = torch.Generator(device="cuda").manual_seed(0)

        def w(*shape, scale=0.02):
            return (torch.randn(*shape, device="cuda", generator=g) * scale).to(torch.bfloat16)

        self.layers = []
        for _ in range(s["layers"]):
            L = dict(ln1=w(H, scale=0.1) + 1, qkv=w((self.hq + 2 * self.hkv) * D, H), o=w(H, self.hq * D),
                     ln2=w(H, scale=0.1) + 1)
            if self.moe:
                L.update(router=w(s["E"], H), w13=w(s["E"], 2 * I, H), w2=w(s["E"], H, I))
            else:
                L.update(gu=w(2 * I, H), down=w(H, I))
            self.layers.append(L)
        self.final_ln = w(H, scale=0.1) + 1
        self.lm_head = w(math.ceil(s["vocab"] / tp), H)
        self.I = I

    def state(self, C: int, q: int, L: int) -> dict:
        import torch

        from .ops import verify_mask

        D, S = self.s["D"], L + q
        st = dict(C=C, q=q, L=L)
        st["x"] = torch.randn(C * q, self.s["H"], device="cuda").to(torch.bfloat16)
        st["k"] = [torch.randn(C, self.hkv, S, D, device="cuda").to(torch.bfloat16) for _ in self.layers]
        st["v"] = [torch.randn(C, self.hkv, S, D, device="cuda").to(torch.bfloat16) for _ in self.layers]
        pos = torch.arange(L, L + q, device="cuda", dtype=torch.float32)
        inv = 1.0 / (10000 ** (torch.arange(0, D, 2, device="cuda", dtype=torch.float32) / D))
        ang = pos[:, None] * inv[None, :]
        st["cos"], st["sin"] = ang.cos().repeat(1, 2).to(torch.bfloat16), ang.sin().repeat(1, 2).to(torch.bfloat16)
        st["mask"] = verify_mask(q, L, "cuda")
        return st

    def _all_reduce(self, t):
        if self.group is not None:
            import torch.distributed as dist

            dist.all_reduce(t, group=self.group)
        return t

    def _moe(self, h, W):
        import torch.nn.functional as F

        from perfmodel.kernels.moe_bf16 import grouped_mm_moe_torch

        from .ops import torch_router_topk

        wts, ids = torch_router_topk(F.linear(h, W["router"]), self.s["k"])
        return grouped_mm_moe_torch(h, W["w13"], W["w2"], ids, wts)

    def step(self, st):
        import torch
        import torch.nn.functional as F

        from .ops import sdpa_attend, torch_add_rmsnorm, torch_rmsnorm, torch_rope

        C, q, L = st["C"], st["q"], st["L"]
        D, eps = self.s["D"], self.s["eps"]
        x = st["x"]
        for li, W in enumerate(self.layers):
            h = torch_rmsnorm(x, W["ln1"], eps)
            qkv = F.linear(h, W["qkv"]).view(C, q, self.hq + 2 * self.hkv, D)
            qh, kh, vh = qkv.split((self.hq, self.hkv, self.hkv), dim=2)
            qh = torch_rope(qh, st["cos"][None, :, None], st["sin"][None, :, None])
            kh = torch_rope(kh, st["cos"][None, :, None], st["sin"][None, :, None]).transpose(1, 2)
            st["k"][li][:, :, L:L + q] = kh  # KV-cache write
            st["v"][li][:, :, L:L + q] = vh.transpose(1, 2)
            a = sdpa_attend(qh, st["k"][li], st["v"][li], st["mask"])
            o = self._all_reduce(F.linear(a, W["o"]))
            h, x = torch_add_rmsnorm(x, o, W["ln2"], eps)
            if self.moe:
                y = self._moe(h, W)
            else:
                gu = F.linear(h, W["gu"])
                y = F.linear(F.silu(gu[:, :self.I]) * gu[:, self.I:], W["down"])
            x = x + self._all_reduce(y)
        h = torch_rmsnorm(x, self.final_ln, eps)
        val, idx = F.linear(h, self.lm_head).max(dim=-1)
        pair = torch.stack((val.float(), idx.float()), dim=-1)
        return self._all_reduce(pair)  # stands in for the (value, index) gather across vocab shards


def measure_stack(stack: TorchStack, pts, *, n_gpus: int, link: str, fixed_samples: bool) -> list[dict]:
    import torch

    rows = []
    for C, q, L in pts:
        st = stack.state(C, q, L)
        kw = dict(max_samples=15, max_seconds=math.inf) if fixed_samples else dict(max_samples=20, max_seconds=0.5)
        t = time_fn(lambda: stack.step(st), graph=True, calls_per_graph=1, warmup=2, **kw)
        rows.append(dict(shape=dict(stack=STACK, model=stack.s["name"], n_gpus=n_gpus, tp=stack.tp, link=link,
                                    C=C, q=q, L=L, n_layers=len(stack.layers)),
                         times_ms=t.times_ms, median_ms=t.median_ms, p10_ms=t.p10_ms, p90_ms=t.p90_ms, mode=t.mode))
        del st
        torch.cuda.empty_cache()
    return rows


def _worker(rank: int, world: int, port: int, quick: bool, out_path: str, link: str, pcie: bool) -> None:
    import torch
    import torch.distributed as dist

    from .collectives import init_rank

    init_rank(rank, world, port)
    try:
        rows = []
        for name in MODELS:
            stack = TorchStack(name, tp=world, group=dist.group.WORLD)
            rows += measure_stack(stack, points(world, quick, pcie), n_gpus=world, link=link, fixed_samples=True)
            del stack
            torch.cuda.empty_cache()
        dist.barrier()
        if rank == 0:
            Path(out_path).write_text(json.dumps(rows))
    finally:
        dist.destroy_process_group()


def run_tp(world: int, quick: bool, link: str, pcie: bool) -> list[dict]:
    """TP over `world` local GPUs in child processes; with pcie=True NCCL peer-to-peer is off,
    so the all-reduces go through host memory."""
    import torch.multiprocessing as mp

    from .collectives import _free_port, p2p_disabled

    with p2p_disabled() if pcie else contextlib.nullcontext(), tempfile.TemporaryDirectory() as d:
        out_path = os.path.join(d, "foreign.json")
        mp.spawn(_worker, args=(world, _free_port(), quick, out_path, link, pcie), nprocs=world, join=True)
        return json.loads(Path(out_path).read_text())


def run(ctx: BenchContext) -> BenchOutput:
    import torch

    from .collectives import link_name

    world = torch.cuda.device_count()
    rows: list[dict] = []
    notes = []
    for name in MODELS:
        stack = TorchStack(name)
        rows += measure_stack(stack, points(1, ctx.quick), n_gpus=1, link="", fixed_samples=False)
        del stack
        torch.cuda.empty_cache()
    ctx.log(f"  foreign 1 GPU: {len(rows)} points, {ctx.elapsed():.0f} s")
    if world >= 2:
        for pcie in (False, True):
            link = "pcie5" if pcie else link_name()
            try:
                got = run_tp(world, ctx.quick, link, pcie)
                rows += got
                ctx.log(f"  foreign TP{world} over {link}: {len(got)} points, {ctx.elapsed():.0f} s")
            except Exception as e:  # one failed layout keeps the others
                lines = [ln for ln in str(e).splitlines() if ln.strip()]
                notes.append(f"TP{world} over {link} failed: {lines[-1] if lines else type(e).__name__}")
    samples: list[Sample] = []
    for r in rows:
        t = Timing(times_ms=r["times_ms"], median_ms=r["median_ms"], p10_ms=r["p10_ms"], p90_ms=r["p90_ms"], mode=r["mode"])
        samples.append(make_sample(r["shape"], t, provider=STACK))
    notes.insert(0, f"{len(samples)} step points of a torch-only decode stack ({', '.join(MODELS)})")
    return BenchOutput(BenchResult(status="ok", samples=samples, note="; ".join(notes)))
