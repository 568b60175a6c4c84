"""Collectives over PCIe through host memory: the collectives bench with NCCL peer-to-peer
off (`NCCL_P2P_DISABLE=1`), so all-reduce and all-to-all between the local GPUs go through
host memory over each GPU's PCIe link, as on machines without NVLink or P2P. Eager and
CUDA-graph-captured, decode message sizes and up. The fits are stored with link `pcie5`
(the H200 SXM host interface is PCIe Gen5 x16) and check the `pcie*` link specs."""

from __future__ import annotations

from perfmodel.profile import BenchResult

from .collectives import _set_env, collect, p2p_disabled
from .common import BenchContext, BenchOutput

LINK = "pcie5"


def run(ctx: BenchContext) -> BenchOutput:
    import torch

    world = torch.cuda.device_count()
    if world < 2:
        return BenchOutput(BenchResult(status="skipped", note=f"needs >= 2 GPUs (found {world})"))
    _set_env()
    with p2p_disabled():
        return collect(ctx, world, LINK, do_e2e=False)
