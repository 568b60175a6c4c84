"""Host (Python) work of one eager call of the attention and MoE wrappers at decode size, with
their kernel launches stubbed out: what the wrapper itself costs before the launcher runs.
Runs on the CPU (no GPU, no interpreter: the stubs replace the launchers). Best of 5 rounds of
2000 calls each. For attention that is the path of a signature's first call (`_run_planned`: on
the CPU no call is planned); later calls on a GPU launch from the plan (kernels/tree_attention.py
`_run`), which measure/dispatch.py times with its launches.

    python -m tools.wrapper_host_cost
"""

from __future__ import annotations

import time


class _NoLaunch:
    def __getitem__(self, grid):
        return lambda *a, **kw: None


def _best_us(f, calls: int = 2000, rounds: int = 5) -> float:
    for _ in range(10):
        f()
    best = float("inf")
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(calls):
            f()
        best = min(best, (time.perf_counter() - t) / calls * 1e6)
    return best


def main() -> None:
    import torch

    from perfmodel.kernels import moe_w4a16 as m
    from perfmodel.kernels import tree_attention as ta
    from perfmodel.kernels._launch import FastLauncher

    ta._get_kernel = lambda: _NoLaunch()
    ta._get_combine = lambda: _NoLaunch()
    for name, v in list(vars(m).items()):  # every launcher of the MoE module, present and future
        if isinstance(v, FastLauncher):
            setattr(m, name, _NoLaunch())
    L, nh = 1024, 8  # as measure/dispatch.py's eager calls: C=1, q=1, L=1024; Kimi TP8 MLA heads
    mask = torch.ones(1, 1, 1, dtype=torch.bool)
    ql, qr = torch.randn(1, 1, nh, 512), torch.randn(1, 1, nh, 64)
    ckv, kpe = torch.randn(1, L + 1, 512), torch.randn(1, L + 1, 64)
    qq, k, v = torch.randn(1, 1, 32, 128), torch.randn(1, L + 1, 8, 128), torch.randn(1, L + 1, 8, 128)
    H, I, E, top = 7168, 256, 384, 8  # Kimi TP8 slice, one token
    w13, s13 = m.random_kernel_weights(E, 2 * I, H, device="cpu")
    w2, s2 = m.random_kernel_weights(E, H, I, device="cpu")
    x = torch.randn(1, H, dtype=torch.bfloat16)
    ids = torch.randperm(E)[:top].view(1, top).to(torch.int32)
    tw = torch.softmax(torch.randn(1, top), 1)
    for name, f in (("attention_mla", lambda: ta.tree_attention_mla(ql, qr, ckv, kpe, mask, 0.07)),
                    ("attention_gqa", lambda: ta.tree_attention_gqa(qq, k, v, mask)),
                    ("moe_w4a16", lambda: m.fused_moe_w4a16(x, w13, s13, w2, s2, ids, tw))):
        print(f"{name}: {_best_us(f):.1f} us per call without its launches", flush=True)


if __name__ == "__main__":
    main()
