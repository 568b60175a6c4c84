import torch
from perfmodel.kernels import moe_w4a16
from perfmodel.measure.common import random_int32, random_scales, randn, uniform_topk
E, H, I, k = 384, 7168, 2048, 8
w13, s13 = random_int32(E, 2 * I, H // 8), random_scales(E, 2 * I, H // 32)
w2, s2 = random_int32(E, H, I // 8), random_scales(E, H, I // 32)
for T in (1, 64):
    x = randn(T, H); ids, wts = uniform_topk(T, E, k)
    for _ in range(3):
        moe_w4a16.fused_moe_w4a16(x, w13, s13, w2, s2, ids, wts)
torch.cuda.synchronize()
