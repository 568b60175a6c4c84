"""A/B of session 9's decode-size MoE changes (issue 19), on one GPU, in one call: the W4A16
MoE layer at a few tokens with down launched as a programmatic dependent launch of gate_up (its
programs pull their weights into L2 while gate_up runs) against the same path without it, and
the arrival epilogues' variants (`VARIANTS`: session 8's plain reads, the fence); interleaved,
timed as the moe bench times (CUDA graph of 8 calls with their own routings, cold weights);
per-kernel durations. Every variant is checked on the GPU against the aligned path without PDL
first, eagerly and under graph replay with changing routings, and the pair workspace is checked
to be zero afterwards. The race itself is measured by measure/tuning/race_pair.py (an earlier
version of this tool also had a race section: runs/tuning/session9/ab_session9_race_fence.log).

    python -m perfmodel.measure.tuning.ab_session9 [--rounds 3] [--warm]
"""

from __future__ import annotations

from . import _ab
from ._ab import READ_GBPS
from ._ab import p as _p
from .ab_session8 import _kernel_times, graph_replay_diff, layer_us, moe_cases

# name -> (fused_moe_w4a16 keywords, moe_w4a16.ARRIVE_FENCE, .ATOMIC_READ)
VARIANTS = {
    "pdl": (dict(pdl=True), False, True),
    "no_pdl": (dict(pdl=False), False, True),
    "no_pdl_session8": (dict(pdl=False), False, False),  # plain reads: session 8's epilogue (racy)
    "no_pdl_fence": (dict(pdl=False), True, True),
}
# Earlier runs of this tool also timed gate_up's or down's own weight tiles prefetched into L2
# (no PDL; a tuning knob since removed): slower everywhere (runs/tuning/session9/README.md).


def _flags(m, fence, atomic_read):
    m.ARRIVE_FENCE, m.ATOMIC_READ = fence, atomic_read


def moe(rounds: int, warm: bool) -> None:
    import torch

    from perfmodel.kernels import moe_w4a16 as m
    from perfmodel.kernels._testing import calc_diff


    plan = [("kimi_tp8", T) for T in (1, 2, 3, 4)] + [("qwen3", 1), ("qwen3", 2), ("qwen3", 4), ("kimi_I2048", 1),
                                                      ("kimi_I2048", 2)]
    _p("\n## W4A16 MoE layer, us per call (CUDA graph of 8 calls, 8 routings, cold weights), per round")
    for name, T, H, I, E, k, w, x, routes in moe_cases(plan):
        base = [m.fused_moe_w4a16(x, *w, *r, pair_blocks=False, pdl=False) for r in routes]
        checks = dict(VARIANTS)
        if T <= 2:  # the fused-epilogue aligned path takes PDL too
            checks["aligned_pdl"] = (dict(pair_blocks=False, pdl=True), False, True)
        for vname, (kv, *flags) in checks.items():
            _flags(m, *flags)
            outs = [m.fused_moe_w4a16(x, *w, *r, **kv) for r in routes]
            torch.cuda.synchronize()
            d = max(calc_diff(a.float(), b.float()) for a, b in zip(base, outs))
            dg = graph_replay_diff(x, w, routes, base, **kv)
            ws = m._PAIR_WS.get(("cuda", torch.cuda.current_device()))
            clean = ws is None or int(torch.count_nonzero(ws)) == 0
            ok = d < 1e-5 and dg < 1e-5 and clean
            _p(f"check {name} T={T} {vname}: max calc_diff vs aligned (no PDL) over 8 routings eager {d:.1e}, "
               f"graph replay {dg:.1e}; workspace zero afterwards: {clean} ({'ok' if ok else 'FAIL'})")
        _flags(m, False, True)
        if warm:
            continue

        def t_of(kv, *flags):
            _flags(m, *flags)
            try:
                return layer_us(x, w, routes, **kv)
            finally:
                _flags(m, False, True)

        res = {v: [] for v in VARIANTS}
        for _ in range(rounds):
            for vname, spec in VARIANTS.items():
                res[vname].append(t_of(*spec))
        nb = m.bytes_moved(routes[0][0], E, H, I)
        best = {v: min(t) for v, t in res.items()}
        _p(f"{name} T={T}: " + " | ".join(f"{v} {' '.join(f'{t:6.1f}' for t in ts)}" for v, ts in res.items())
           + f" | best pdl {best['pdl']:.1f} vs no_pdl {best['no_pdl']:.1f} us; pdl "
           f"{100 * nb / best['pdl'] / 1e3 / READ_GBPS:3.0f}% of read")
        for vname in ("pdl", "no_pdl"):
            kv = VARIANTS[vname][0]
            f = lambda i, wt, kv=kv: m.fused_moe_w4a16(x, *w, i, wt, **kv)  # noqa: E731
            _p(f"    kernels {vname}: {_kernel_times(f, routes)}")


def main(argv=None) -> None:
    _ab.main("ab_session9", __doc__, lambda a: moe(a.rounds, a.warm), argv)

if __name__ == "__main__":
    main()
