"""Nsight Compute target: the INT4 MoE GEMMs at Kimi shapes (kernel layout, default tiles).

    ncu --kernel-name regex:_w4a16_moe_gemm_kernel --launch-skip 4 --launch-count 2 \
        --section SpeedOfLight --section Occupancy --section WarpStateStats --section SchedulerStats \
        python perfmodel/data/runs/ncu/ncu_moe.py [I] [T]
"""
import sys

import torch

from perfmodel.kernels import moe_w4a16 as m
from perfmodel.measure.common import randn, uniform_topk

E, H, k = 384, 7168, 8
I = int(sys.argv[1]) if len(sys.argv) > 1 else 2048
T = int(sys.argv[2]) if len(sys.argv) > 2 else 64
w13, s13 = m.random_kernel_weights(E, 2 * I, H)
w2, s2 = m.random_kernel_weights(E, H, I)
x = randn(T, H)
ids, wts = uniform_topk(T, E, k)
for _ in range(4):  # 2 GEMM launches per call: skip 4 (2 warm calls), profile the next 2
    m.fused_moe_w4a16(x, w13, s13, w2, s2, ids, wts)
torch.cuda.synchronize()
