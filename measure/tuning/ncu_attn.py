"""Nsight Compute target: the tree-attention split kernel at C=1, q=1 (decode size), default
config, or with the split kernel's q loaded inside the KV loop (`qil`).

    ncu --clock-control none --kernel-name regex:_tree_attn_kernel --launch-skip 2 --launch-count 1 \
        --section SpeedOfLight --section Occupancy --section WarpStateStats --section LaunchStats \
        python -m perfmodel.measure.tuning.ncu_attn mla 64 8192 [qil]
"""

import sys


def main(argv: list[str]) -> None:
    import torch

    from perfmodel.kernels import tree_attention as ta

    from .ab_decode import Case

    kind, H, L = argv[0], int(argv[1]), int(argv[2])
    kw = dict(q_in_loop=True) if "qil" in argv[3:] else {}
    c = Case(kind, H, 1, 1, L)
    for i in range(3):  # one split-kernel launch per call: skip 2 (warm), profile the third
        c.fn(ta, **kw)(*c.kvs[i % len(c.kvs)])
    torch.cuda.synchronize()


if __name__ == "__main__":
    from ..runner import exit_unless_cuda

    exit_unless_cuda("perfmodel.measure.tuning.ncu_attn")
    main(sys.argv[1:])
