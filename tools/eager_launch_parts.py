"""Where the host time of one eager Triton launch goes, on the GPU's host: the dispatch bench's
rmsnorm call (`kernels.rmsnorm` on one 64-wide row) taken apart, each part timed as the bench
times it (2000 back-to-back calls, 7 repeats, median us per call; two rounds):

    torch op         x.add_(1.0), the bench's torch baseline (in place)
    empty_like       the output allocation alone
    rmsnorm          the wrapper as the bench calls it (allocation, key, C launcher)
    rmsnorm out=     into a given output (no allocation)
    C launcher       the compiled kernel's launcher called with the cached arguments (no wrapper)
    direct           FastLauncher.launch_direct with the cached key and pointers (no wrapper)

    python -m tools.eager_launch_parts
"""

from __future__ import annotations

import argparse

from ._targets import start


def main(argv=None) -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args(argv)
    start("eager_launch_parts")
    import torch

    from perfmodel.kernels import rmsnorm as r
    from perfmodel.measure.dispatch import _host_per_call

    N = 2000
    x = torch.randn(1, device="cuda")
    xr = torch.randn(1, 64, device="cuda", dtype=torch.bfloat16)
    wr = torch.ones(64, device="cuda", dtype=torch.bfloat16)
    out = torch.empty_like(xr)
    r.rmsnorm(xr, wr, out=out)
    kl = r._kernel()
    (run, head, tail, raw), = kl.cache.values()
    dev = kl._device()
    ptrs = (xr.data_ptr(), xr.data_ptr(), wr.data_ptr(), out.data_ptr(), out.data_ptr(), 64, 64, 0, 64, 64, 1e-6)
    args = ptrs if raw else (xr, xr, wr, out, out, 64, 64, 0, 64, 64, 1e-6)
    key = (xr.dtype, wr.dtype, None, 64, True)
    parts = {
        "torch op": lambda: x.add_(1.0),
        "empty_like": lambda: torch.empty_like(xr),
        "rmsnorm": lambda: r.rmsnorm(xr, wr),
        "rmsnorm out=": lambda: r.rmsnorm(xr, wr, out=out),
        "C launcher": lambda: run(1, 1, 1, kl._stream(dev), *head, *args, *tail),
        "direct": lambda: kl.launch_direct(key, (1, 1, 1), ptrs),
    }
    h0 = kl.hits
    for _ in range(2):
        for name, fn in parts.items():
            t = _host_per_call(fn, N, torch)
            print(f"{name:14s} {t.median_ms * 1e3:6.2f} us per call (p10 {t.p10_ms * 1e3:.2f}, p90 {t.p90_ms * 1e3:.2f})",
                  flush=True)
    print(f"direct launches in these loops: {kl.hits - h0}", flush=True)


if __name__ == "__main__":
    main()
