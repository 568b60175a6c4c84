"""All-reduce and all-to-all (all_to_all_single) vs message size, 1 KB -> 256 MB, over all
local GPUs with torch.distributed + NCCL, eager and CUDA-graph-captured. One process per
GPU (torch.multiprocessing.spawn, 127.0.0.1 on a free port). NVLS / multicast are turned
off in parent and children (NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1,
NVSHMEM_DISABLE_NVLS=1).

Fit t_us = latency_us + bytes_per_gpu / (bw_GBps*1e3) on decode-range sizes (<= 4 MB) ->
CollectiveFit per (op, graph); busbw of the large sizes is in the samples and the note
(busbw = algbw * perfmodel.collective_math.bus_factor: 2(n-1)/n all-reduce, (n-1)/n all-to-all, nccl-tests).
The same processes then run the e2e Kimi stack over all of them (tp_shape = n_gpus = world
size, the two NCCL all-reduces per layer graph-captured), as real TP and as TP attention +
expert-parallel routed experts -> E2EPoints."""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import socket
import subprocess
import tempfile
from pathlib import Path

from perfmodel.collective_math import bus_factor
from perfmodel.profile import BenchResult, E2EPoint, Sample

from .common import BenchContext, BenchOutput
from .fits import fit_collective_law

NCCL_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def _set_env() -> None:
    for k, v in NCCL_ENV.items():
        os.environ[k] = v


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def link_name() -> str:
    """What joins GPU0 and GPU1: nvlinkN from `nvidia-smi topo -m` (NV# entries) and the
    compute capability, else pcie."""
    import torch

    major = torch.cuda.get_device_capability(0)[0]
    gen = {8: "nvlink3", 9: "nvlink4", 10: "nvlink5"}.get(major, "nvlink")
    try:
        r = subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True, timeout=15)
        lines = [re.sub(r"\x1b\[[0-9;]*m", "", ln) for ln in r.stdout.splitlines()]
        for ln in lines:
            cells = ln.split()
            if len(cells) > 2 and cells[0] == "GPU0" and cells[1] == "X":  # the GPU0 row, not the header
                entry = cells[2]  # cells[1] is GPU0 itself ("X")
                if entry.startswith("NV"):
                    return gen
                return "pcie"
    except Exception:
        pass
    return gen + "?"  # guess: could not read the topology


def _sizes(quick: bool) -> list[int]:
    exps = range(10, 29, 2) if not quick else (10, 14, 18, 22, 26)
    return [2**e for e in exps]  # 1 KB ... 256 MB


def init_rank(rank: int, world: int, port: int) -> None:
    """One spawned worker: multicast off, its GPU, and the NCCL process group on 127.0.0.1."""
    _set_env()
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            device_id=torch.device("cuda", rank))


@contextlib.contextmanager
def p2p_disabled():
    """NCCL peer-to-peer off for the workers spawned inside (they inherit the environment):
    collectives then go through host memory over PCIe."""
    old = os.environ.get("NCCL_P2P_DISABLE")
    os.environ["NCCL_P2P_DISABLE"] = "1"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("NCCL_P2P_DISABLE", None)
        else:
            os.environ["NCCL_P2P_DISABLE"] = old


def _worker(rank: int, world: int, port: int, quick: bool, out_path: str, do_e2e: bool) -> None:
    import torch
    import torch.distributed as dist

    from .timing import time_fn

    init_rank(rank, world, port)
    try:
        rows = []
        for op in ("all_reduce", "all_to_all"):
            for graph in (False, True):
                for nbytes in _sizes(quick):
                    n = nbytes // 2
                    buf = torch.randn(n, device="cuda").to(torch.bfloat16)
                    outb = torch.empty_like(buf)
                    if op == "all_reduce":
                        fn = lambda: dist.all_reduce(buf)  # noqa: E731
                    else:
                        fn = lambda: dist.all_to_all_single(outb, buf)  # noqa: E731
                    ns = 30 if nbytes <= 16 * 2**20 else 8
                    dist.barrier()
                    t = time_fn(fn, cold_l2="none", graph=graph, calls_per_graph=10 if nbytes <= 16 * 2**20 else 2,
                                warmup=3, max_samples=ns, max_seconds=math.inf)
                    rows.append(dict(op=op, graph=graph, bytes=nbytes, times_ms=t.times_ms, median_ms=t.median_ms,
                                     p10_ms=t.p10_ms, p90_ms=t.p90_ms, mode=t.mode))
                    del buf, outb
        torch.cuda.empty_cache()
        e2e_pts, e2e_samples = [], []
        if do_e2e:
            from .e2e import KimiStack, measure_points, points_tp

            # over every local GPU (TP2 / EP2 on a 2-GPU machine, TP8 / EP8 on an 8-GPU one):
            # TP, then TP attention + expert-parallel routed experts
            for parallel in ("tp", "tp-attn-ep-moe"):
                stack = KimiStack(n_layers=4, tp=world, group=dist.group.WORLD, parallel=parallel, rank=rank)
                pts, smp = measure_points(stack, points_tp(world, quick), n_gpus=world, fixed_samples=True)
                e2e_pts, e2e_samples = e2e_pts + pts, e2e_samples + smp
                del stack
                torch.cuda.empty_cache()
        dist.barrier()
        if rank == 0:
            Path(out_path).write_text(json.dumps(dict(
                rows=rows, e2e=[p.model_dump(mode="json") for p in e2e_pts], e2e_samples=[s.model_dump(mode="json") for s in e2e_samples],
            )))
    finally:
        dist.destroy_process_group()


def collect(ctx: BenchContext, world: int, link: str, do_e2e: bool) -> BenchOutput:
    """Spawn one worker per GPU, then fit each (op, graph) law from the samples."""
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as d:
        out_path = os.path.join(d, "collectives.json")
        try:
            mp.spawn(_worker, args=(world, _free_port(), ctx.quick, out_path, do_e2e), nprocs=world, join=True)
        except Exception as e:
            # ProcessRaisedException carries the child's traceback: keep its last line
            lines = [ln for ln in str(e).splitlines() if ln.strip()]
            raise RuntimeError(f"collectives worker failed: {lines[-1] if lines else type(e).__name__}") from e
        res = json.loads(Path(out_path).read_text())

    samples, fits, notes = [], [], []
    for r in res["rows"]:
        t_s = r["median_ms"] * 1e-3
        algbw = r["bytes"] / t_s / 1e9
        factor = bus_factor(r["op"], world)
        samples.append(Sample(
            shape={"op": r["op"], "bytes": r["bytes"], "n_gpus": world, "graph": r["graph"], "link": link},
            bytes=float(r["bytes"]), times_ms=r["times_ms"], median_ms=r["median_ms"], p10_ms=r["p10_ms"],
            p90_ms=r["p90_ms"], achieved_GBps=algbw, provider="nccl", busbw_GBps=algbw * factor, mode=r["mode"],
        ))
    for op in ("all_reduce", "all_to_all"):
        for graph in (False, True):
            pts = [s for s in samples if s.shape["op"] == op and s.shape["graph"] == graph]
            # All sizes: decode-sized messages alone leave the bandwidth term unidentified
            # (eager launches are latency-bound up to MBs); relative residuals keep the small
            # messages weighted as much as the large ones.
            if len(pts) >= 2:
                fits.append(fit_collective_law([s.bytes for s in pts], [s.median_ms * 1e3 for s in pts], op=op, n_gpus=world,
                                               graph=graph, link=link, source=ctx.source))
            if pts:
                big = max(pts, key=lambda s: s.bytes)
                notes.append(f"{op}{' graph' if graph else ''} busbw {big.busbw_GBps:.0f} GB/s at {big.bytes / 2**20:.0f} MiB")
    e2e = [E2EPoint.model_validate(p) for p in res.get("e2e", [])]
    samples += [Sample.model_validate(s) for s in res.get("e2e_samples", [])]
    if do_e2e:
        n_ep = sum(p.parallel != "tp" for p in e2e)
        notes.append(f"{world} GPUs over {link}; e2e points: TP{world} {len(e2e) - n_ep}, TP-attn + EP{world} {n_ep}")
    else:
        notes.append(f"{world} GPUs over {link}")
    return BenchOutput(BenchResult(status="ok", samples=samples, note="; ".join(notes)), collectives=fits, e2e=e2e)


def run(ctx: BenchContext) -> BenchOutput:
    import torch

    world = torch.cuda.device_count()
    if world < 2:
        return BenchOutput(BenchResult(status="skipped", note=f"needs >= 2 GPUs (found {world})"))
    _set_env()
    return collect(ctx, world, link_name(), do_e2e=True)
