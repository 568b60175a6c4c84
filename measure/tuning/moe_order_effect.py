"""Does the moe bench's order bias its decode points? The W4A16 layer of the Kimi TP8 slice at
T = 1 and 8, timed as the moe bench times it (CUDA graph of 8 calls with their own routings,
cold weights): fresh, right after the bench's Kimi I=2048 sweep (the shape the bench times
first, up to T = 1024), and after an idle pause; with the SM clock where torch can read it.

    python -m perfmodel.measure.tuning.moe_order_effect [--pause 10]
"""

from __future__ import annotations

import argparse
import time

from ._ab import p as _p
from ._ab import start


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pause", type=float, default=10.0)
    a = ap.parse_args(argv)
    t0 = start("moe_order_effect")
    import torch

    from perfmodel.kernels import moe_w4a16 as m

    from ..common import log_spaced, randn, uniform_topk
    from ..shapes import KIMI
    from ..timing import sm_clock_MHz
    from .ab_session8 import layer_us

    def clock() -> str:
        mhz = sm_clock_MHz(torch.cuda.current_device())
        return f"{mhz} MHz" if mhz is not None else "clock n/a"

    def layer(w, T, E, k, rounds=3):
        x = randn(T, H)
        routes = [uniform_topk(T, E, k) for _ in range(8)]
        return [layer_us(x, w, routes) for _ in range(rounds)]

    H, E, k = KIMI["hidden"], KIMI["n_experts"], KIMI["top_k"]
    tp8 = (*m.random_kernel_weights(E, 2 * (KIMI["moe_inter"] // 8), H), *m.random_kernel_weights(E, H, KIMI["moe_inter"] // 8))

    def report(when):
        for T in (1, 8):
            ts = layer(tp8, T, E, k)
            _p(f"{when:34s} Kimi TP8 T={T}: {' '.join(f'{t:5.1f}' for t in ts)} us   ({clock()})")

    report("fresh")
    big = (*m.random_kernel_weights(E, 2 * KIMI["moe_inter"], H), *m.random_kernel_weights(E, H, KIMI["moe_inter"]))
    t1 = time.time()
    for T in log_spaced(1, 4096, 13):
        if T > 1024:
            break
        layer(big, T, E, k, rounds=1)
    _p(f"(Kimi I=2048 sweep, T = 1..1024, bench timing: {time.time() - t1:.1f} s; {clock()})")
    del big
    torch.cuda.empty_cache()
    report("right after the I=2048 sweep")
    time.sleep(a.pause)
    report(f"after {a.pause:.0f} s idle")
    _p(f"# done at {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
