"""Sweep of the decode-size kernels' knobs (issue 19, second round), on one GPU, in one call:
  * correctness of the variants (bf16 split partials, other row tiles, the fused MoE
    epilogues) against the torch references on the GPU;
  * MLA with 64 heads and GQA at C=1, q=1: row tile x splits x partial dtype (MLA) and
    KV tile x splits x stages x warps (GQA), timed as the attention bench times (CUDA graph,
    cold L2: ab_decode's Case); `split only` rows time the split kernel without the combine;
  * the whole W4A16 MoE layer (Kimi TP8 slice) with and without the fused epilogues at
    T = 1, 8, 16, 64, and its parts at T = 1 (align alone, gate_up alone, down alone).

Second round (the default sections; round one is `--only mla,gqa,moe`):
  * `ab`: the attention kernels of this tree against a saved copy of the previous module
    (`--before PATH`), interleaved, at the MLA decode shapes whose defaults changed;
  * `mla2`: variants around the new many-head MLA default, and the compiled kernels'
    registers and spills;
  * `moe2`: the MoE layer with no fused epilogue, the fused activation only, and both, at
    T = 1, 2, 4, 8, interleaved; and T = 1 with more split-K.

    python -m perfmodel.measure.tuning.sweep_decode [--only ab,mla2,moe2] [--before PATH]
"""

from __future__ import annotations

import argparse

from .ab_decode import Case, _time

MLA = [
    # (L, variants): dicts of tree_attention_mla knobs; {} is the default
    (8192, [{}, {"partials": "bf16"},
            {"block_r": 32, "num_splits": 33, "partials": "bf16"},
            {"block_r": 32, "num_splits": 132, "partials": "bf16"},
            {"block_r": 16, "num_splits": 33, "partials": "bf16"},
            {"block_r": 16, "num_splits": 66, "partials": "bf16"},
            {"block_r": 16, "num_splits": 17, "partials": "bf16"},
            {"block_r": 64, "num_splits": 132, "num_warps": 8, "partials": "bf16"},
            {"block_r": 64, "num_splits": 66, "num_warps": 8, "partials": "bf16"}]),
    (1024, [{}, {"partials": "bf16"},
            {"block_r": 16, "num_splits": 17, "partials": "bf16"},
            {"block_r": 16, "num_splits": 9, "partials": "bf16"},
            {"block_r": 64, "num_splits": 17, "num_warps": 8, "partials": "bf16"}]),
    (4096, [{}, {"partials": "bf16"}, {"block_r": 16, "num_splits": 33, "partials": "bf16"}]),
]
SPLIT_ONLY = [("mla", 64, 8192, {"partials": "fp32"}), ("mla", 64, 8192, {"partials": "bf16"}),
              ("mla", 64, 8192, {"block_r": 16, "num_splits": 33, "partials": "bf16"}),
              ("llama", 0, 8192, {}), ("qwen", 0, 8192, {})]
GQA = [
    ("llama", 8192, [{}, {"num_splits": 66}, {"num_splits": 66, "num_stages": 2}, {"block_s": 128, "num_stages": 2},
                     {"block_s": 128, "num_stages": 2, "num_warps": 8}, {"block_s": 128, "num_stages": 3, "num_warps": 8},
                     {"block_s": 128, "num_splits": 66, "num_stages": 2}, {"num_warps": 8, "num_stages": 4},
                     {"num_splits": 132, "num_stages": 2}]),
    ("qwen", 8192, [{}, {"num_splits": 132, "num_stages": 2}, {"block_s": 128, "num_splits": 33, "num_stages": 2},
                    {"block_s": 128, "num_splits": 66, "num_stages": 2}, {"block_s": 128, "num_splits": 33, "num_stages": 3,
                                                                          "num_warps": 8},
                    {"num_warps": 8, "num_stages": 4}]),
]


def _row(c, mod, variants):
    out = []
    for v in variants:
        try:
            out.append(f"{v or 'default'} {_time(c.fn(mod, **v), c):6.1f}")
        except Exception as e:  # noqa: BLE001 -- a config that does not fit: say so, carry on
            out.append(f"{v} failed: {type(e).__name__}: {str(e)[:80]}")
    print(f"{c.name}: " + "; ".join(out), flush=True)


def attention(only: set[str]) -> None:
    import torch

    from perfmodel.kernels import tree_attention as ta
    from perfmodel.kernels._testing import calc_diff

    for spec, v in ((("mla", 64, 1, 1, 8192), {"partials": "bf16"}),
                    (("mla", 64, 1, 1, 8192), {"block_r": 16, "num_splits": 33, "partials": "bf16"}),
                    (("mla", 64, 1, 1, 1024), {"block_r": 64, "num_splits": 17, "num_warps": 8}),
                    (("mla", 8, 2, 9, 3000), {"partials": "bf16"}),
                    (("llama", 0, 1, 1, 8192), {"block_s": 128, "num_stages": 2, "num_warps": 8}),
                    (("qwen", 0, 3, 5, 1000), {"partials": "bf16"})):
        c = Case(spec[0], spec[1], *spec[2:])
        d = calc_diff(c.fn(ta, **v)(*c.kvs[0]), c.ref())
        print(f"check {c.name} {v}: calc_diff {d:.2e} ({'ok' if d < 1e-4 else 'FAIL'})", flush=True)
        del c
    if "mla" in only:
        print("\n## MLA, 64 heads, C=1 q=1 (us per call, CUDA graph, cold L2)", flush=True)
        for L, variants in MLA:
            _row(Case("mla", 64, 1, 1, L), ta, variants)
        for L in (1024, 8192):
            _row(Case("mla", 8, 1, 1, L), ta, [{}, {"partials": "bf16"}])
    if "gqa" in only:
        print("\n## GQA, C=1 q=1", flush=True)
        for kind, L, variants in GQA:
            _row(Case(kind, 0, 1, 1, L), ta, variants)
    print("\n## split kernel alone (no combine)", flush=True)
    for kind, H, L, v in SPLIT_ONLY:
        if ("mla" if kind == "mla" else "gqa") not in only:
            continue
        c = Case(kind, H, 1, 1, L)
        full = _time(c.fn(ta, **v), c)
        ta.SPLIT_ONLY = True
        try:
            split = _time(c.fn(ta, **v), c)
        finally:
            ta.SPLIT_ONLY = False
        print(f"{c.name} {v or 'default'}: whole {full:6.1f} | split kernel alone {split:6.1f}", flush=True)
        del c
    torch.cuda.empty_cache()


def moe() -> None:
    import torch

    from perfmodel.kernels import moe_w4a16 as m
    from perfmodel.kernels._moe_common import moe_align_block_size
    from perfmodel.kernels._testing import calc_diff

    from ..common import randn, uniform_topk
    from ..shapes import KIMI
    from ..timing import time_fn

    E, H, I, k = KIMI["n_experts"], KIMI["hidden"], KIMI["moe_inter"] // 8, KIMI["top_k"]
    w13, s13 = m.random_kernel_weights(E, 2 * I, H)
    w2, s2 = m.random_kernel_weights(E, H, I)
    tk = dict(max_samples=12, max_seconds=0.08, graph=True, cold_l2="rotate")
    print(f"\n## W4A16 MoE layer, Kimi TP8 slice (E={E} H={H} I={I} k={k}): us per call, CUDA graph, "
          "8 routings rotated", flush=True)
    for T in (1, 8, 16, 64):
        x = randn(T, H)
        routes = [uniform_topk(T, E, k) for _ in range(8)]
        a = m.fused_moe_w4a16(x, w13, s13, w2, s2, *routes[0], fused_epilogues=False)
        b = m.fused_moe_w4a16(x, w13, s13, w2, s2, *routes[0], fused_epilogues=True)
        d = calc_diff(a, b)
        t = {}
        for fused in (False, True, False, True):
            f = (lambda i, w, fu=fused: m.fused_moe_w4a16(x, w13, s13, w2, s2, i, w, fused_epilogues=fu))
            t.setdefault(fused, []).append(time_fn(f, args_list=routes, calls_per_graph=8, **tk).median_ms * 1e3)
        nb = m.bytes_moved(routes[0][0], E, H, I)
        print(f"T={T:3d} unfused {' '.join(f'{x:6.1f}' for x in t[False])} | fused epilogues "
              f"{' '.join(f'{x:6.1f}' for x in t[True])} | best {min(t[False]):6.1f} -> {min(t[True]):6.1f} us"
              f" | fused {nb / min(t[True]) / 1e3:5.0f} GB/s (route 0) | calc_diff(unfused, fused) {d:.1e}"
              f" ({'ok' if d < 1e-4 else 'FAIL'})", flush=True)
    # parts at T = 1
    T = 1
    x = randn(T, H)
    routes = [uniform_topk(T, E, k) for _ in range(8)]
    bm, gu, dn = m.default_configs(T, k, E, H, I)
    print(f"parts at T=1: block_m {bm}, gate_up {gu}, down {dn}", flush=True)
    rt = [(moe_align_block_size(i, E, bm),) for i, _ in routes]
    h = torch.randn(T * k, I, device="cuda", dtype=torch.bfloat16)
    tw = torch.ones(T * k, device="cuda")

    def gate_up(r):
        g = torch.zeros(T * k * 2 * I + r.max_blocks * 8 + 8, device="cuda")
        hh = torch.empty(T * k, I, device="cuda", dtype=torch.bfloat16)
        m._launch(x, w13, s13, hh, None, r, n=I, k_dim=H, a_row_div=k, c_row_div=1, gate_up=True, atomic=False, cfg=gu,
                  ws=g[:T * k * 2 * I].view(T * k, 2 * I), counters=g[T * k * 2 * I:].view(torch.int32))

    def down(r):
        g = torch.zeros(T * H + 64, device="cuda")
        o = torch.empty(T, H, device="cuda", dtype=torch.bfloat16)
        m._launch(h, w2, s2, o, tw, r, n=H, k_dim=I, a_row_div=1, c_row_div=k, gate_up=False, atomic=True, cfg=dn,
                  ws=g[:T * H].view(T, H), counters=g[T * H:].view(torch.int32), out_rows=T)

    for name, f, args in (("align", lambda i, w: moe_align_block_size(i, E, bm), routes),
                          ("zeros (workspace memset)", lambda i, w: torch.zeros(T * k * 2 * I + T * H + 64, device="cuda"),
                           routes),
                          ("gate_up + memset (fused act)", gate_up, rt), ("down + memset (fused cast)", down, rt)):
        print(f"  {name:32s} {time_fn(f, args_list=args, calls_per_graph=8, **tk).median_ms * 1e3:6.1f}", flush=True)
    torch.cuda.empty_cache()


def ab(before: str) -> None:
    import torch

    from perfmodel.kernels import tree_attention as new

    from .ab_decode import _load

    old = _load(before, "perfmodel.kernels._tree_attention_before")  # its relative imports resolve
    print("\n## attention A/B (us per call, CUDA graph, cold L2): before | after, per round", flush=True)
    for H, L in ((64, 1024), (64, 4096), (64, 8192), (64, 32768), (8, 1024), (8, 8192)):
        c = Case("mla", H, 1, 1, L)
        tb, tn = [], []
        for _ in range(2):
            tb.append(_time(c.fn(old), c))
            tn.append(_time(c.fn(new), c))
        b, n = min(tb), min(tn)
        cfg = new.default_config(1, 1, H, L + 1, 512, num_sms=new._num_sms(0))
        print(f"{c.name:32s} before {' '.join(f'{x:7.1f}' for x in tb)} | after {' '.join(f'{x:7.1f}' for x in tn)}"
              f" | best {b:7.1f} -> {n:7.1f} us ({b / n:4.2f}x) | after {c.nbytes() / n / 1e3:6.0f} GB/s"
              f" | after: block_r {cfg['block_r']} splits {cfg['num_splits']}", flush=True)
        del c
        torch.cuda.empty_cache()


def mla2() -> None:
    from perfmodel.kernels import tree_attention as ta

    print("\n## MLA, 64 heads, C=1 q=1: variants around the new default", flush=True)
    for L, variants in ((8192, [{}, {"num_stages": 1}, {"num_splits": 33}, {"num_splits": 129},
                                {"block_s": 32, "num_splits": 132}, {"num_warps": 2}, {"num_warps": 8}]),
                        (4096, [{}, {"num_splits": 33}, {"num_stages": 1}]),
                        (1024, [{}, {"num_stages": 1}, {"block_s": 32, "num_splits": 33}])):
        _row(Case("mla", 64, 1, 1, L), ta, variants)
    print("\n## compiled split kernels (MLA, DV 512): registers and spills per thread", flush=True)
    for key, (kernel, tail) in ta._get_kernel().cache.items():
        kw = dict(key[2])
        if kw.get("DV") == 512:
            print(f"  BLOCK_R {kw['BLOCK_R']} BLOCK_S {kw['BLOCK_S']} warps {kw['num_warps']} stages {kw['num_stages']}:"
                  f" {kernel.n_regs} registers, {kernel.n_spills} spills", flush=True)


def moe2() -> None:
    import torch

    from perfmodel.kernels import moe_w4a16 as m
    from perfmodel.kernels._testing import calc_diff

    from ..common import randn, uniform_topk
    from ..shapes import KIMI
    from ..timing import time_fn

    E, H, I, k = KIMI["n_experts"], KIMI["hidden"], KIMI["moe_inter"] // 8, KIMI["top_k"]
    w13, s13 = m.random_kernel_weights(E, 2 * I, H)
    w2, s2 = m.random_kernel_weights(E, H, I)
    tk = dict(max_samples=12, max_seconds=0.08, graph=True, cold_l2="rotate")
    print(f"\n## W4A16 MoE layer, Kimi TP8 slice (E={E} H={H} I={I} k={k}): us per call, CUDA graph, "
          "8 routings rotated; epilogues: none | activation fused | activation and cast fused", flush=True)
    modes = {"none": (0, 0), "act": (1 << 30, 0), "act+cast": (1 << 30, 1 << 30)}
    saved = m.FUSED_ACT_MAX_T, m.FUSED_CAST_MAX_T
    try:
        for T in (1, 2, 4, 8):
            x = randn(T, H)
            routes = [uniform_topk(T, E, k) for _ in range(8)]
            outs, t = {}, {}
            for _ in range(2):
                for name, (a, c) in modes.items():
                    m.FUSED_ACT_MAX_T, m.FUSED_CAST_MAX_T = a, c
                    outs[name] = m.fused_moe_w4a16(x, w13, s13, w2, s2, *routes[0])
                    f = (lambda i, w: m.fused_moe_w4a16(x, w13, s13, w2, s2, i, w))
                    t.setdefault(name, []).append(time_fn(f, args_list=routes, calls_per_graph=8, **tk).median_ms * 1e3)
            d = max(calc_diff(outs["none"], o) for o in outs.values())
            print(f"T={T}: " + " | ".join(f"{n} {' '.join(f'{v:6.1f}' for v in t[n])}" for n in modes)
                  + f" | max calc_diff vs none {d:.1e} ({'ok' if d < 1e-4 else 'FAIL'})", flush=True)
        m.FUSED_ACT_MAX_T, m.FUSED_CAST_MAX_T = saved
        T = 1
        x = randn(T, H)
        routes = [uniform_topk(T, E, k) for _ in range(8)]
        row = []
        for gu, dn in (({}, {}), ({"split_k": 7}, {}), ({"split_k": 14}, {}), ({"split_k": 7}, {"block_n": 64}),
                       ({"split_k": 7, "num_stages": 4}, {"block_n": 64})):
            f = (lambda i, w, gu=gu, dn=dn: m.fused_moe_w4a16(x, w13, s13, w2, s2, i, w, gate_up_config=gu or None,
                                                               down_config=dn or None))
            row.append(f"gate_up {gu or 'default'} down {dn or 'default'} "
                       f"{time_fn(f, args_list=routes, calls_per_graph=8, **tk).median_ms * 1e3:6.1f}")
        print("T=1 default epilogues, split-K variants: " + "; ".join(row), flush=True)
    finally:
        m.FUSED_ACT_MAX_T, m.FUSED_CAST_MAX_T = saved
    torch.cuda.empty_cache()


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="ab,mla2,moe2")
    ap.add_argument("--before", help="path of the previous tree_attention.py (section ab)")
    a = ap.parse_args(argv)
    from ..runner import exit_unless_cuda

    exit_unless_cuda("sweep_decode")
    import torch

    only = set(a.only.split(","))
    print(f"# {torch.cuda.get_device_name(0)}, torch {torch.__version__}", flush=True)
    if only & {"mla", "gqa"}:
        attention(only)
    if "moe" in only:
        moe()
    if "ab" in only and a.before:
        ab(a.before)
    if "moe2" in only:
        moe2()
    if "mla2" in only:
        mla2()


if __name__ == "__main__":
    main()
