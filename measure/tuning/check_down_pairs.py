"""Correctness of the pair-summing down (`moe_w4a16._down_pairs`) over its knobs on the GPU:
warps x PDL x dequantisation x column tile at shapes with one or several K-blocks, a ragged last
K-block or none, against the torch reference (calc_diff <= 1e-4). Written when the default test
found 8 warps with 16-column tiles wrong at a K of one ragged block (session 10).

    python -m perfmodel.measure.tuning.check_down_pairs [--guard-off]

--guard-off lifts the wrapper's guard (`DOWN_PAIRS_MAX_WARPS_RAGGED_K`) to show what it avoids.
"""

from __future__ import annotations

import argparse
import itertools

from ._ab import p as _p
from ._ab import start

# (T, E, H, I, k): one ragged K-block (I=32) at 2 and 8 pairs, one whole block, the Kimi TP8
# slice, three blocks with a ragged last one
SHAPES = [(1, 8, 64, 32, 2), (1, 8, 64, 256, 2), (1, 8, 64, 32, 8), (1, 8, 7168, 256, 8), (1, 8, 256, 544, 4)]


def case(T, E, H, I, k, seed):
    """Checkpoint-layout weights, routing, activations and the reference output, from one seed."""
    import torch

    from perfmodel.kernels import moe_w4a16 as m

    gen = torch.Generator().manual_seed(seed)
    w13 = torch.randn(E, 2 * I, H, generator=gen) / H**0.5
    w2 = torch.randn(E, H, I, generator=gen) / I**0.5
    ckpt = (*m.quantize_int4_g32(w13.cuda()), *m.quantize_int4_g32(w2.cuda()))
    ids = torch.stack([torch.randperm(E, generator=gen)[:k] for _ in range(T)]).cuda()
    tw = torch.rand(T, k, generator=gen).cuda()
    tw = tw / tw.sum(-1, keepdim=True)
    x = torch.randn(T, H, generator=gen).cuda().to(torch.bfloat16)
    kl = (*m.pack_for_kernel(*ckpt[:2]), *m.pack_for_kernel(*ckpt[2:]))
    return kl, ids, tw, x, m.fused_moe_w4a16_reference(x.float(), *ckpt, ids, tw)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--guard-off", action="store_true")
    a = ap.parse_args(argv)
    start("check_down_pairs")
    import torch

    from perfmodel.kernels import moe_w4a16 as m
    from perfmodel.kernels._testing import calc_diff

    if a.guard_off:
        m.DOWN_PAIRS_MAX_WARPS_RAGGED_K = 8
    wrong = 0
    for T, E, H, I, k in SHAPES:
        kl, ids, tw, x, ref = case(T, E, H, I, k, T * 100 + H)
        for w, pdl, dq, bn in itertools.product((4, 8), (False, True), (0, 2), (16, 32)):
            out = m.fused_moe_w4a16(x, *kl, ids, tw, pair_blocks=True, down_pairs=True, pdl=pdl,
                                    down_config=dict(num_warps=w, dequant=dq, block_n=bn))
            torch.cuda.synchronize()
            d = calc_diff(out.float(), ref.float())
            wrong += d > 1e-4
            _p(f"T={T} E={E} H={H} I={I} k={k} warps={w} pdl={pdl} dequant={dq} bn={bn}: calc_diff {d:.2e} "
               f"{'ok' if d <= 1e-4 else 'WRONG'}")
    _p(f"# {wrong} wrong (guard {'off' if a.guard_off else 'on'})")


if __name__ == "__main__":
    main()
