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
the rest (kind `foreign-calibrated`).

Prefill and mixed steps: the same stack runs any batch of groups as an engine's forward pass
does (`BatchShape`): a prefill group of N sequences x T new tokens after P cached ones (a whole
prompt, or a chunk of one), beside a decode group of n sequences at context CTX (chunked prefill
sharing a step with decode). The tokens of all groups go through the norms, GEMMs and experts
together; attention runs per group (prefill: causal, bottom-right aligned, through SDPA's flash
backend, measure/ops.py causal_attend; decode as above), each group writing its new tokens' K/V
into its own cache; logits for the last token of each prefill sequence and for every decode
token. Timed eager (no CUDA graph), as an engine runs a prefill. On one GPU; samples of bench
"foreign_prefill" (shape: stack, model, n_gpus, tp, link, kind, prefill_n, prefill_T,
prefill_P, decode_n, decode_ctx, and `batch`, the batch in `perfmodel step`'s notation), kept
apart from the decode points, which `calibrate.points_from_foreign` reads as decode steps."""

from __future__ import annotations

import contextlib
import json
import math
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from perfmodel.profile import BenchResult, Sample

from .common import BenchContext, BenchOutput, make_sample
from .timing import Timing, time_fn

MODELS = ("llama-3.1-8b", "qwen3-30b-a3b")
STACK = "torch-foreign"
PREFILL_BENCH = "foreign_prefill"
PREFILL_BACKEND = "flash"  # SDPA backend of the stack's prefill attention (the kernel set "torch"'s prefill law)


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


@dataclass(frozen=True)
class Group:
    """Sequences of one kind in a step: `n` sequences adding `q` tokens each after `ctx` cached
    ones; kind "prefill" (causal over the q new tokens), "decode" (q = 1) or "verify" (q > 1)."""

    kind: str
    n: int
    q: int
    ctx: int


@dataclass(frozen=True)
class BatchShape:
    """A prefill group (prefill_n x prefill_T after prefill_P) and/or a decode group (decode_n at
    decode_ctx) in one forward pass."""

    prefill_n: int = 0
    prefill_T: int = 0
    prefill_P: int = 0
    decode_n: int = 0
    decode_ctx: int = 0

    @property
    def kind(self) -> str:
        return "mixed" if self.prefill_n and self.decode_n else "prefill" if self.prefill_n else "decode"

    def groups(self) -> list[Group]:
        out = [Group("prefill", self.prefill_n, self.prefill_T, self.prefill_P)] if self.prefill_n else []
        return out + ([Group("decode", self.decode_n, 1, self.decode_ctx)] if self.decode_n else [])

    def notation(self) -> str:
        """The batch as `perfmodel step` takes it: --prefill NxT@P --decode N@CTX."""
        parts = [f"--prefill {self.prefill_n}x{self.prefill_T}@{self.prefill_P}"] if self.prefill_n else []
        return " ".join(parts + ([f"--decode {self.decode_n}@{self.decode_ctx}"] if self.decode_n else []))


def batch_points(quick: bool) -> list[BatchShape]:
    """Prefill and mixed steps of the foreign stack on one GPU: whole prompts of 512 to 8k tokens
    (one sequence, and four of 1k), chunks after a cached prefix, and a prefill chunk beside a
    decode group (chunked prefill under a token budget)."""
    if quick:
        return [BatchShape(1, 512), BatchShape(1, 1024, 2048), BatchShape(1, 512, 0, 8, 1024)]
    return [BatchShape(1, 512), BatchShape(1, 2048), BatchShape(1, 8192), BatchShape(4, 1024),
            BatchShape(1, 2048, 6144), BatchShape(1, 4096, 12288),
            BatchShape(1, 2048, 0, 32, 4096), BatchShape(1, 512, 8192, 64, 2048), BatchShape(2, 1024, 1024, 16, 8192)]


class TorchStack:
    """One rank's shard of a full-depth model, built from torch ops only. `shapes` replaces the
    preset's (the dict `_shapes` returns; the tests pass a tiny one), `device` and `dtype` the GPU
    and bf16 (the tests run it on the CPU)."""

    def __init__(self, name: str, tp: int = 1, group=None, *, shapes: dict | None = None, device: str = "cuda", dtype=None):
        import torch

        s = shapes or _shapes(name)
        self.s, self.tp, self.group = s, tp, group
        self.device, self.dtype = device, dtype or torch.bfloat16
        H, D = s["H"], s["D"]
        self.hq, self.hkv = s["hq"] // tp, max(1, s["hkv"] // tp)
        self.moe = "E" in s
        I = s["I"] // tp
        g = torch.Generator(device=device).manual_seed(0)

        def w(*shape, scale=0.02):
            return (torch.randn(*shape, device=device, generator=g) * scale).to(self.dtype)

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
        """A decode (q = 1) or verify (q > 1) step of C sequences at context L."""
        st = self.batch_state([Group("decode" if q == 1 else "verify", C, q, L)])
        st.update(C=C, q=q, L=L)
        return st

    def batch_state(self, groups: list[Group]) -> dict:
        """Inputs and KV caches of one forward pass over `groups`: the hidden states of every new
        token (groups in order), per-token rotary angles at each token's position, per group and
        layer a cache [n, hkv, ctx + q, D] (random, the new tokens' slots written by the step), and
        the rows logits are computed for (None: every row)."""
        import torch

        from .ops import verify_mask

        dev, dt, D = self.device, self.dtype, self.s["D"]

        def rnd(*shape):
            return torch.randn(*shape, device=dev).to(dt)

        pos, gs, logit_rows, row = [], [], [], 0
        for g in groups:
            S = g.ctx + g.q
            gs.append(dict(g=g, rows=(row, row + g.n * g.q),
                           k=[rnd(g.n, self.hkv, S, D) for _ in self.layers], v=[rnd(g.n, self.hkv, S, D) for _ in self.layers],
                           mask=None if g.kind == "prefill" else verify_mask(g.q, g.ctx, dev)))
            pos.append(torch.arange(g.ctx, S, device=dev, dtype=torch.float32).repeat(g.n))
            if g.kind == "prefill":  # an engine samples the next token from each prompt's last position only
                logit_rows.append(torch.arange(row + g.q - 1, row + g.n * g.q, g.q, device=dev))
            else:
                logit_rows.append(torch.arange(row, row + g.n * g.q, device=dev))
            row += g.n * g.q
        ang = torch.cat(pos)[:, None] * (1.0 / (10000 ** (torch.arange(0, D, 2, device=dev, dtype=torch.float32) / D)))[None, :]
        rows = torch.cat(logit_rows)
        return dict(groups=gs, x=rnd(row, self.s["H"]), cos=ang.cos().repeat(1, 2).to(dt), sin=ang.sin().repeat(1, 2).to(dt),
                    logit_rows=None if rows.numel() == row else rows)

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

    def _attend(self, li: int, qh, kh, vh, gs: list[dict]):
        """Attention of each group over its own cache, after writing its new tokens' K/V: qh [T, hq, D],
        kh and vh [T, hkv, D] (rotated) -> [T, hq * D]."""
        import torch

        from .ops import causal_attend, sdpa_attend

        out = []
        for G in gs:
            g, (a, b) = G["g"], G["rows"]
            k, v = G["k"][li], G["v"][li]
            k[:, :, g.ctx:g.ctx + g.q] = kh[a:b].view(g.n, g.q, self.hkv, -1).transpose(1, 2)  # KV-cache write
            v[:, :, g.ctx:g.ctx + g.q] = vh[a:b].view(g.n, g.q, self.hkv, -1).transpose(1, 2)
            qg = qh[a:b].view(g.n, g.q, self.hq, -1)
            if g.kind == "prefill":
                o = causal_attend(qg.transpose(1, 2), k, v, PREFILL_BACKEND if k.is_cuda else None)
                out.append(o.transpose(1, 2).reshape(g.n * g.q, -1))
            else:
                out.append(sdpa_attend(qg, k, v, G["mask"]))
        return out[0] if len(out) == 1 else torch.cat(out)

    def step(self, st):
        """One forward pass over `st` (`state` or `batch_state`): the (value, index) of each
        logit row's maximum, [rows, 2]."""
        import torch
        import torch.nn.functional as F

        from .ops import torch_add_rmsnorm, torch_rmsnorm, torch_rope

        D, eps = self.s["D"], self.s["eps"]
        x = st["x"]
        cos, sin = st["cos"][:, None], st["sin"][:, None]
        for li, W in enumerate(self.layers):
            h = torch_rmsnorm(x, W["ln1"], eps)
            qkv = F.linear(h, W["qkv"]).view(x.shape[0], self.hq + 2 * self.hkv, D)
            qh, kh, vh = qkv.split((self.hq, self.hkv, self.hkv), dim=1)
            a = self._attend(li, torch_rope(qh, cos, sin), torch_rope(kh, cos, sin), vh, st["groups"])
            o = self._all_reduce(F.linear(a, W["o"]))
            h, x = torch_add_rmsnorm(x, o, W["ln2"], eps)
            if self.moe:
                y = self._moe(h, W)
            else:
                gu = F.linear(h, W["gu"])
                y = F.linear(F.silu(gu[:, :self.I]) * gu[:, self.I:], W["down"])
            x = x + self._all_reduce(y)
        if st["logit_rows"] is not None:
            x = x.index_select(0, st["logit_rows"])
        h = torch_rmsnorm(x, self.final_ln, eps)
        val, idx = F.linear(h, self.lm_head).max(dim=-1)
        pair = torch.stack((val.float(), idx.float()), dim=-1)
        return self._all_reduce(pair)  # stands in for the (value, index) gather across vocab shards


def _time_each(stack: TorchStack, cases, state_of, timing: dict, shape_of, label_of, log=None) -> list[dict]:
    """Each case's step of `stack` timed (`time_fn` with `timing`), as a row with its shape; a
    case that does not fit in memory is skipped and logged, the others still timed."""
    import torch

    rows = []
    for case in cases:
        try:
            st = state_of(case)
            t = time_fn(lambda: stack.step(st), **timing)
        except torch.cuda.OutOfMemoryError:
            st = None
            torch.cuda.empty_cache()
            if log:
                log(f"  foreign {stack.s['name']} {label_of(case)}: out of memory, skipped")
            continue
        rows.append(dict(shape=shape_of(case), times_ms=t.times_ms, median_ms=t.median_ms, p10_ms=t.p10_ms,
                         p90_ms=t.p90_ms, mode=t.mode))
        del st
        torch.cuda.empty_cache()
    return rows


def measure_stack(stack: TorchStack, pts, *, n_gpus: int, link: str, fixed_samples: bool, log=None) -> list[dict]:
    """Decode steps of `stack` at each (C, q, L), CUDA-graphed; a point that does not fit in
    memory (Qwen3-30B-A3B's bf16 weights leave an 80 GB GPU little room for KV) is skipped and logged."""
    kw = dict(max_samples=15, max_seconds=math.inf) if fixed_samples else dict(max_samples=20, max_seconds=0.5)
    return _time_each(stack, pts, lambda p: stack.state(*p), dict(graph=True, calls_per_graph=1, warmup=2, **kw),
                      lambda p: dict(stack=STACK, model=stack.s["name"], n_gpus=n_gpus, tp=stack.tp, link=link,
                                     C=p[0], q=p[1], L=p[2], n_layers=len(stack.layers)),
                      lambda p: f"C{p[0]} q{p[1]} L{p[2]}", log)


def measure_batches(stack: TorchStack, shapes: list[BatchShape], *, n_gpus: int = 1, link: str = "",
                    log=None) -> list[dict]:
    """Prefill and mixed steps of `stack`, timed eager; a shape that does not fit in memory is
    skipped and logged."""
    return _time_each(stack, shapes, lambda b: stack.batch_state(b.groups()),
                      dict(graph=False, warmup=2, max_samples=10, max_seconds=0.5, batch=5),
                      lambda b: dict(stack=STACK, model=stack.s["name"], n_gpus=n_gpus, tp=stack.tp, link=link, kind=b.kind,
                                     prefill_n=b.prefill_n, prefill_T=b.prefill_T, prefill_P=b.prefill_P,
                                     decode_n=b.decode_n, decode_ctx=b.decode_ctx, n_layers=len(stack.layers),
                                     graph=False, logits="last", batch=b.notation()),
                      lambda b: b.notation(), log)


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


def _samples(rows: list[dict]) -> list[Sample]:
    out = []
    for r in rows:
        t = Timing(times_ms=r["times_ms"], median_ms=r["median_ms"], p10_ms=r["p10_ms"], p90_ms=r["p90_ms"], mode=r["mode"])
        out.append(make_sample(r["shape"], t, provider=STACK))
    return out


def run(ctx: BenchContext) -> BenchOutput:
    import time

    import torch

    from .collectives import link_name

    world = torch.cuda.device_count()
    rows: list[dict] = []
    batch_rows: list[dict] = []
    notes = []
    batch_s = 0.0
    for name in MODELS:
        stack = TorchStack(name)
        rows += measure_stack(stack, points(1, ctx.quick), n_gpus=1, link="", fixed_samples=False, log=ctx.log)
        t0 = time.perf_counter()
        batch_rows += measure_batches(stack, batch_points(ctx.quick), log=ctx.log)
        batch_s += time.perf_counter() - t0
        del stack
        torch.cuda.empty_cache()
    ctx.log(f"  foreign 1 GPU: {len(rows)} decode points, {len(batch_rows)} prefill and mixed points, {ctx.elapsed():.0f} s")
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
    samples = _samples(rows)
    notes.insert(0, f"{len(samples)} step points of a torch-only decode stack ({', '.join(MODELS)})")
    # its time is part of bench foreign's wall time (no wall_s of its own, so no suite total counts it twice)
    prefill = BenchResult(status="ok", samples=_samples(batch_rows),
                          note=f"{len(batch_rows)} prefill and mixed steps of the torch-only stack ({', '.join(MODELS)}) on one GPU, "
                               f"eager, in {batch_s:.0f} s of bench foreign's run")
    return BenchOutput(BenchResult(status="ok", samples=samples, note="; ".join(notes)), more={PREFILL_BENCH: prefill})
