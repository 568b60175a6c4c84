"""A/B on the GPU (python -m perfmodel.measure.tuning.ab_moe_fastlauncher): the W4A16 MoE layer (Kimi TP8 slice) at T = 1, 2 graph-captured as the moe
bench times it, with its kernels launched through FastLauncher (new) or Triton's own
fn[grid] path (old), interleaved, 5 rounds."""
import torch

from perfmodel.kernels import _moe_common, moe_w4a16
from perfmodel.measure.common import randn, uniform_topk
from perfmodel.measure.timing import time_fn

H, E, k, I = 7168, 384, 8, 256
w13, s13 = moe_w4a16.random_kernel_weights(E, 2 * I, H)
w2, s2 = moe_w4a16.random_kernel_weights(E, H, I)
fast_gemm = moe_w4a16._MOE_GEMM
raw_gemm = fast_gemm.fn
moe_w4a16.fused_moe_w4a16(randn(1, H), w13, s13, w2, s2, *uniform_topk(1, E, k))  # builds _ALIGN_KERNEL
fast_align = _moe_common._ALIGN_KERNEL
raw_align = fast_align.fn


def use(fast):
    moe_w4a16._MOE_GEMM = fast_gemm if fast else raw_gemm
    _moe_common._ALIGN_KERNEL = fast_align if fast else raw_align


for rnd in range(5):
    for T in (1, 2, 8):
        x = randn(T, H)
        routes = [uniform_topk(T, E, k) for _ in range(8)]
        out = []
        for fast in (False, True):
            use(fast)
            t = time_fn(lambda i, w: moe_w4a16.fused_moe_w4a16(x, w13, s13, w2, s2, i, w), args_list=routes,
                        calls_per_graph=8, max_samples=12, max_seconds=0.08, graph=True, cold_l2="rotate")
            out.append(t.median_ms * 1e3)
        print(f"round {rnd} T={T}: fn[grid] {out[0]:.1f} us, FastLauncher {out[1]:.1f} us", flush=True)
use(True)
x = randn(1, H)
routes = [uniform_topk(1, E, k) for _ in range(8)]
print("eager host per call (us): ", end="")
import time

for fast in (False, True):
    use(fast)
    for _ in range(50):
        moe_w4a16.fused_moe_w4a16(x, w13, s13, w2, s2, *routes[0])
    torch.cuda.synchronize(); t0 = time.perf_counter()
    for _ in range(500):
        moe_w4a16.fused_moe_w4a16(x, w13, s13, w2, s2, *routes[0])
    print(f"{'FastLauncher' if fast else 'fn[grid]'} {(time.perf_counter() - t0) / 500 * 1e6:.1f}", end="  ")
    torch.cuda.synchronize()
print()
