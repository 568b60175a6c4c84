"""Where the host time of one eager Triton launch goes (issue 19's eager goal), on the GPU's host:
the dispatch bench's rmsnorm call (`kernels.rmsnorm` on one 64-wide row) taken apart, each part
timed as the bench times (2000 back-to-back calls, 7 repeats, median us per call):

    torch op         x.add_(1.0), the bench's torch baseline (in place)
    empty_like       the output allocation alone
    rmsnorm          the wrapper as the bench calls it (allocation, key, C launcher)
    rmsnorm out=     into a given output (no allocation)
    C launcher       the compiled kernel's launcher called with the cached arguments (no wrapper)
    keyed / keyed out=   the wrapper's fast path as it was before launch_direct (session 13: the
                     argument tuple, the constexpr dict and FastLauncher.launch_keyed every call)
    direct           FastLauncher.launch_direct with the cached key and pointers (no wrapper)

    python -m perfmodel.measure.tuning.eager_parts
"""

from __future__ import annotations

from ._ab import p as _p
from ._ab import start


def main() -> None:
    start("eager_parts")
    import torch

    from perfmodel.kernels import rmsnorm as r

    from ..dispatch import _host_per_call

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

    def keyed(x, w, out=None):  # session 13's fast path of kernels/rmsnorm.py _run, spelled out
        H = x.shape[-1]
        if out is not None and (out.shape != x.shape or out.dtype != x.dtype or not out.is_contiguous()):
            raise ValueError("out")
        if x.is_contiguous() and w.is_contiguous():
            out = torch.empty_like(x) if out is None else out
            px, pw, po = x.data_ptr(), w.data_ptr(), out.data_ptr()
            if not (px | pw | po) & 15:
                kl.launch_keyed((x.dtype, w.dtype, None, H, x.is_cuda and w.is_cuda), (x.numel() // H,),
                                (x, x, w, out, out, H, H, 0, H, H, 1e-6),
                                (px, px, pw, po, po, H, H, 0, H, H, 1e-6), r._launch_kw(H, False))
        return out

    parts = {
        "torch op": lambda: x.add_(1.0),
        "empty_like": lambda: torch.empty_like(xr),
        "rmsnorm": lambda: r.rmsnorm(xr, wr),
        "rmsnorm out=": lambda: r.rmsnorm(xr, wr, out=out),
        "C launcher": lambda: run(1, 1, 1, kl._stream(dev), *head, *args, *tail),
        "keyed": lambda: keyed(xr, wr),
        "keyed out=": lambda: keyed(xr, wr, out=out),
        "direct": lambda: kl.launch_direct(key, (1, 1, 1), ptrs),
    }
    h0 = kl.hits
    for _ in range(2):
        for name, fn in parts.items():
            t = _host_per_call(fn, N, torch)
            _p(f"{name:14s} {t.median_ms * 1e3:6.2f} us per call (p10 {t.p10_ms * 1e3:.2f}, p90 {t.p90_ms * 1e3:.2f})")
    _p(f"direct launches in these loops: {kl.hits - h0}")


if __name__ == "__main__":
    main()
