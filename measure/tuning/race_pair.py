"""Where the pair-block MoE layer's occasional wrong outputs come from (issue 19, session 9).

Eager layer calls one at a time (synchronised), each output checked against the torch
reference; after each call the persistent workspace is checked for entries left non-zero. For
a wrong output: which tokens and 64-column groups are off, and which of the token's pairs,
dropped, explain the error. Each case with and without the fence before arriving
(`ARRIVE_FENCE`) and the atomic read of the sums (`ATOMIC_READ`), back to back (checked
afterwards) and synchronised (checked after each call).

    python -m perfmodel.measure.tuning.race_pair [--calls 400]
"""

from __future__ import annotations

import argparse

from ._ab import p as _p


def _reference(m, x, w, ids, tw, H, I):
    """fused_moe_w4a16_reference over the touched experts only (unpacked from the kernel layout)."""
    import torch

    used, local = torch.unique(ids, return_inverse=True)
    w13 = m.unpack_from_kernel(w[0][used], w[1][used], 2 * I, H)
    w2 = m.unpack_from_kernel(w[2][used], w[3][used], H, I)
    return m.fused_moe_w4a16_reference(x, *w13, *w2, local.to(ids.dtype), tw)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=400)
    a = ap.parse_args(argv)
    from ..runner import exit_unless_cuda

    exit_unless_cuda("race_pair")
    import torch

    from perfmodel.kernels import moe_w4a16 as m
    from perfmodel.kernels._testing import calc_diff

    from ..common import uniform_topk
    from ..shapes import KIMI

    H, E, k = KIMI["hidden"], KIMI["n_experts"], KIMI["top_k"]
    for I, T in ((KIMI["moe_inter"], 2), (KIMI["moe_inter"], 4), (KIMI["moe_inter"] // 8, 2)):
        torch.cuda.empty_cache()
        w = (*m.random_kernel_weights(E, 2 * I, H), *m.random_kernel_weights(E, H, I))
        x = torch.randn(T, H, device="cuda", dtype=torch.bfloat16)
        routes = [uniform_topk(T, E, k) for _ in range(8)]
        refs = [_reference(m, x, w, *r, H, I).float() for r in routes]
        # each pair's contribution tw * W2 (silu(W1 x) * W3 x), [P, H]
        contrib = []
        for ids, tw in routes:
            per = []
            for p in range(T * k):
                t, s = divmod(p, k)
                one = torch.zeros_like(tw)
                one[t, s] = tw[t, s]
                per.append(_reference(m, x, w, ids, one, H, I).float()[t])
            contrib.append(torch.stack(per))

        def run(label, calls, zero_ws=False, fence=True, atomic_read=True, sync=True, **kv):
            m.ARRIVE_FENCE, m.ATOMIC_READ = fence, atomic_read
            bad = left = 0
            notes = []
            if not sync:  # back to back, checked afterwards
                outs = [m.fused_moe_w4a16(x, *w, *routes[i % 8], **kv) for i in range(calls)]
                torch.cuda.synchronize()
                bad = sum(calc_diff(o.float(), refs[i % 8]) > 1e-4 for i, o in enumerate(outs))
                calls_ = calls
                calls = 0
            for i in range(calls):
                r = i % 8
                ws = m._PAIR_WS.get(("cuda", torch.cuda.current_device()))
                if zero_ws and ws is not None:
                    ws.zero_()
                before = ws.clone() if ws is not None else None
                out = m.fused_moe_w4a16(x, *w, *routes[r], **kv)
                torch.cuda.synchronize()
                ws = m._PAIR_WS.get(("cuda", torch.cuda.current_device()))
                nz = int(torch.count_nonzero(ws)) if ws is not None else 0
                left += nz > 0
                d = calc_diff(out.float(), refs[r])
                if d <= 1e-4:
                    continue
                bad += 1
                if len(notes) >= 3:
                    continue
                err = out.float() - refs[r]
                scale = refs[r].abs().amax()
                groups = []
                for t in range(T):
                    e64 = err[t].reshape(-1, 64).abs().amax(1)
                    for gi in torch.nonzero(e64 > 0.02 * scale).flatten().tolist():
                        cols = slice(64 * gi, 64 * gi + 64)
                        seg = err[t, cols]
                        c = contrib[r][t * k:(t + 1) * k, cols]
                        # which of the token's pairs, dropped together, explain the error best
                        lost = [p for p in range(k) if float((seg + c[p]).abs().sum()) < float(seg.abs().sum())]
                        resid = float((seg + c[lost].sum(0)).abs().amax()) if lost else float(seg.abs().amax())
                        groups.append(f"t{t} cols {64 * gi}-{64 * gi + 63}: max err {float(seg.abs().amax()):.3g}, "
                                      f"minus slots {lost} lost leaves {resid:.3g}")
                nz_before = int(torch.count_nonzero(before)) if before is not None else 0
                notes.append(f"call {i} routing {r}: calc_diff {d:.1e}; workspace non-zero before {nz_before}, "
                             f"after {nz}; " + "; ".join(groups[:4]) + (f" (+{len(groups) - 4} more)" if len(groups) > 4
                                                                        else ""))
            if not sync:
                calls = calls_
            m.ARRIVE_FENCE, m.ATOMIC_READ = True, True
            _p(f"I={I} T={T} {label}: {bad} of {calls} wrong; calls leaving the workspace non-zero: {left}")
            for n in notes:
                _p("    " + n)

        for sync in (False, True):
            tag = "synchronised" if sync else "back to back"
            for fence, atomic_read in ((False, False), (True, False), (False, True), (True, True)):
                run(f"pair, {tag}, fence {fence}, atomic read {atomic_read}", a.calls, fence=fence,
                    atomic_read=atomic_read, sync=sync, pair_blocks=True, pdl=False)
            run(f"pair with PDL, {tag}, defaults", a.calls, sync=sync, pair_blocks=True, pdl=True)



if __name__ == "__main__":
    main()
