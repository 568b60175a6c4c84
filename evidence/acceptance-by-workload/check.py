"""Measured figures behind the acceptance-by-workload work (run: python evidence/acceptance-by-workload/check.py).

1. tau for Kimi K2.6 + DFlash (depth 15) as a DDTree of 16 nodes: the dflash_default preset
   against the published figures by workload, and what that does to the projection's 90%
   interval on 8x B300 at C=1 (Projector with the acceptance source swapped).
2. EAGLE-3 steps priced from the heads' shapes against published step times with a reported
   acceptance length (TPOT = step / tau): uncalibrated, then with an engine's per-step and
   per-draft-forward host costs fitted leave-one-out on the same run.
3. The draft family's shape error on the published tau-vs-setting series.
"""

from __future__ import annotations

import subprocess

import numpy as np

from perfmodel.api import projector as Projector
from perfmodel.api import resolve
from perfmodel.model import acceptance as A
from perfmodel.model.layers import Layout
from perfmodel.model.machine import build_machine
from perfmodel.model.step import step_estimate
from perfmodel.scenario import Request
from perfmodel.specs import registry

FIGS = registry.load_acceptance_data().figures


def sha() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    except OSError:
        return "?"


def machine(target: str, gpus: int, model: str, context: int):
    rs = resolve(Request(target=target, gpus=gpus, model=model, concurrency=[1], context=context))
    return rs, build_machine(rs.gpu, gpus, rs.link, rs.profile, rs.source_gpu, rs.mk, 1.0, True, "perfmodel")


def part1() -> None:
    print("== 1. Kimi K2.6 + DFlash (depth 15), DDTree budget 16 ==")
    old = A.parametric("dflash_default", depth=15, structure="ddtree")
    print(f"dflash_default        tau {old.tau(16):.3f} sigma {old.tau_sigma(16):.3f} "
          f"(90% {old.tau(16) - 1.645 * old.tau_sigma(16):.2f}-{old.tau(16) + 1.645 * old.tau_sigma(16):.2f})")
    for w in (*A.WORKLOADS, None):
        s = A.workload_source("dflash", w, depth=15, structure="ddtree", figures=FIGS)
        t, sg = s.tau(16), s.tau_sigma(16)
        print(f"workload {w or 'any':<13} tau {t:.3f} sigma {sg:.3f} (90% {max(t - 1.645 * sg, 1):.2f}-{t + 1.645 * sg:.2f})"
              f"  tau(8) {s.tau(8):.3f}  tau(64) {s.tau(64):.3f}")
    any_src = A.workload_source("dflash", None, depth=15, structure="ddtree", figures=FIGS)
    print(f"  description: {any_src.description}")
    print(f"  sigma note:  {any_src.sigma_note}")
    req = Request(target="b300", gpus=8, spec="ddtree", budget=16, concurrency=[1])
    for label, fn in (("dflash_default", None), ("workload any", lambda acc: any_src)):
        p = Projector(req, acceptance_fn=fn).projection().points[0]
        lo, hi = p.interval.tokens_per_s_per_stream
        print(f"8x B300 C=1 ddtree B=16, {label:<15}: tok/s/stream {p.tokens_per_s_per_stream:.1f}, 90% {lo:.1f}-{hi:.1f} "
              f"(width {(hi - lo) / p.tokens_per_s_per_stream:.0%} of the point), tau {p.tau:.3f} sigma {p.tau_sigma:.3f}")
        if fn is not None:
            st_lo, st_hi = p.interval.step_ms
            sp = A.combine_intervals(p.tokens_per_s_per_stream, p.step_ms, st_lo, st_hi, p.tau, p.tau_sigma)
            print(f"  combine_intervals: tok/s 90% {sp.tokens_per_s[0]:.1f}-{sp.tokens_per_s[1]:.1f}, tau's share of the "
                  f"log-space variance {sp.tau_share:.0%}")
    ar = Projector(Request(target="b300", gpus=8, concurrency=[1])).projection().points[0]
    lo, hi = ar.interval.tokens_per_s_per_stream
    print(f"8x B300 C=1 autoregressive: tok/s/stream {ar.tokens_per_s_per_stream:.1f}, 90% {lo:.1f}-{hi:.1f} "
          f"(width {(hi - lo) / ar.tokens_per_s_per_stream:.0%} of the point)")


# vllm-project/vllm#20780: Llama-3.1-8B + yuhuili/EAGLE3-LLaMA3.1-Instruct-8B, vLLM V1, batch 1:
# AL by chain length K and TPOT (ms); vanilla TPOT 7.07 ms. GPU not named there; the same author's
# runs in PR #16937 and tracking thread vllm-project/vllm#17812 are on H100, which is assumed.
VLLM = {2: (2.36, 4.32), 3: (2.79, 4.09), 4: (3.08, 4.05), 5: (3.32, 4.13), 6: (3.46, 4.20), 7: (3.54, 4.29)}
VLLM_AR_TPOT = 7.07


def part2() -> None:
    print("\n== 2. EAGLE-3 heads priced from their shapes, published tau given ==")
    rs, mach = machine("h100-sxm", 1, "llama-3.1-8b", 1200)
    m, lay = rs.model.with_drafter("eagle3"), Layout("tp", 1)
    ar = step_estimate(m, mach, lay, 1, 1, 1200).step_us / 1e3
    print(f"[vLLM #20780, H100 assumed, context 1200] AR step: model {ar:.3f} ms, published TPOT {VLLM_AR_TPOT} ms "
          f"({ar / VLLM_AR_TPOT - 1:+.1%})")
    gpu = {k: step_estimate(m, mach, lay, 1, k + 1, 1200, draft=True).step_us / 1e3 for k in VLLM}
    errs = []
    for k, (al, tpot) in VLLM.items():
        pred = gpu[k] / al
        errs.append(pred / tpot - 1)
        print(f"  K={k}: step {gpu[k]:.3f} ms (published TPOT x AL = {tpot * al:.3f}), TPOT {pred:.3f} vs {tpot} "
              f"({pred / tpot - 1:+.1%}); speedup {VLLM_AR_TPOT / tpot:.2f}x published, {ar / pred:.2f}x model")
    print(f"  uncalibrated: |error| median {np.median(np.abs(errs)):.1%}, max {np.max(np.abs(errs)):.1%}")
    # engine host costs: published step - model step = H0 + h k (H0 per step, h per draft forward), fitted
    # by least squares on the other five points, then the held-out point predicted
    ks = np.array(list(VLLM))
    resid = np.array([VLLM[k][1] * VLLM[k][0] - gpu[k] for k in ks])
    loo = []
    for i, k in enumerate(ks):
        keep = np.arange(len(ks)) != i
        h, h0 = np.polyfit(ks[keep], resid[keep], 1)
        pred = (gpu[k] + h0 + h * k) / VLLM[k][0]
        loo.append(pred / VLLM[k][1] - 1)
        print(f"  K={k} held out: engine {h0:.3f} ms/step + {h:.3f} ms/draft forward -> TPOT {pred:.3f} vs "
              f"{VLLM[k][1]} ({loo[-1]:+.1%})")
    h, h0 = np.polyfit(ks, resid, 1)
    print(f"  all six: {h0:.3f} ms/step + {h:.3f} ms/draft forward; leave-one-out |error| max {np.max(np.abs(loo)):.1%}")

    # sgl-project/sglang PR #4716: Llama-3.3-70B on 8x H100 TP8, EAGLE-3 tree (8 steps, topk 8, 64 draft
    # tokens), batch 1, MT-bench: 88.61 -> 234.54 token/s at acceptance length 5.88. Head shape: SpecForge's
    # 70B config (the run's yuhuili head has another hidden size, not found).
    rs, mach = machine("h100-sxm", 8, "llama-3.1-70b", 1200)
    m, lay = rs.model.with_drafter("eagle3"), Layout("tp", 8)
    ar = step_estimate(m, mach, lay, 1, 1, 1200).step_us / 1e3
    sp = step_estimate(m, mach, lay, 1, 64, 1200, draft=True, draft_steps=8, draft_topk=8).step_us / 1e3
    print(f"[SGLang #4716, 8x H100] AR {1000 / ar:.1f} tok/s vs 88.61 ({1000 / ar / 88.61 - 1:+.1%}); EAGLE-3 tree "
          f"{5.88 / sp * 1000:.1f} tok/s vs 234.54 ({5.88 / sp * 1000 / 234.54 - 1:+.1%}) at tau 5.88")


def part3() -> None:
    print("\n== 3. Shape error on the published series ==")
    print(f"SHAPE_SLOPE = {A.shape_slope(figures=FIGS):.4f} of (tau - 1) per doubling of the verify width")
    figs = A._figures(None)
    for g in A._groups(figs):
        if len(g) < 2:
            continue
        print(f"series {g[0].series}:")
        fits = [(A._setting_fields(f.setting), f.tau) for f in g]
        for st_i, t_i in fits:
            s1 = A.fit_scale(st_i, t_i)
            row = ", ".join(f"{A.setting_tau(s1, st_j):.2f}/{t_j:.2f}" for st_j, t_j in fits)
            print(f"  fitted at {A.describe_setting(st_i)} (tau {t_i}): predicted/published {row}")


if __name__ == "__main__":
    print(f"perfmodel at {sha()}")
    part1()
    part2()
    part3()
