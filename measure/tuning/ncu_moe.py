"""Nsight Compute target: the INT4 MoE GEMMs at Kimi shapes (kernel layout, default tiles).

    ncu --kernel-name regex:_w4a16_moe_gemm_kernel --launch-skip 4 --launch-count 2 \
        --section SpeedOfLight --section Occupancy --section WarpStateStats --section SchedulerStats \
        python -m perfmodel.measure.tuning.ncu_moe [I] [T]
"""

import sys

E, H, K_ROUTED = 384, 7168, 8


def main(argv: list[str]) -> None:
    import torch

    from perfmodel.kernels import moe_w4a16 as m

    from ..common import randn, uniform_topk

    I = int(argv[0]) if len(argv) > 0 else 2048  # noqa: E741 (the model's name for the MoE width)
    T = int(argv[1]) if len(argv) > 1 else 64
    w13, s13 = m.random_kernel_weights(E, 2 * I, H)
    w2, s2 = m.random_kernel_weights(E, H, I)
    x = randn(T, H)
    ids, wts = uniform_topk(T, E, K_ROUTED)
    for _ in range(4):  # 2 GEMM launches per call: skip 4 (2 warm calls), profile the next 2
        m.fused_moe_w4a16(x, w13, s13, w2, s2, ids, wts)
    torch.cuda.synchronize()


if __name__ == "__main__":
    from ..runner import exit_unless_cuda

    exit_unless_cuda("perfmodel.measure.tuning.ncu_moe")
    main(sys.argv[1:])
