"""A/B of session 7's decode-size changes (issue 19), on one GPU, in one call:
  * `eager`: host cost per eager call (measure/dispatch.py's method: median of 7 x N
    back-to-back calls) of a torch op, of allocations and views, of the previous and the new
    rmsnorm wrapper (with and without a caller-provided output), of the launch layers beneath
    it (Triton's own launcher, FastLauncher's generic and keyed paths, the C launcher alone),
    and a cProfile of the previous and the new wrapper;
  * `moe`: the whole W4A16 MoE layer at T = 1, 2, 4, 8 (Kimi TP8 slice; also Kimi I=2048 and
    Qwen3-30B-A3B at T = 1, 8; Kimi I=2048 at T = 32, the large-size check), the previous
    kernels against this tree's, interleaved, timed as the moe bench times (CUDA graph of 8
    calls with their own routings, cold weights); the read-bandwidth roof of each T from the
    expected number of distinct experts under uniform routing; variants of the new path;
  * `attn`: tree attention at C=1, q=1 and at large shapes, previous against new,
    interleaved (ab_decode's Case and timing), and variants at MLA 64 heads / GQA Llama.
Correctness of every new path is checked on the GPU against the previous kernels (and the
references) before it is timed.

    python -m perfmodel.measure.tuning.ab_session7 --before perfmodel.kernels_before [--only eager,moe,attn]
    python -m perfmodel.measure.tuning.ab_session7 --before ... --warm moe   # compile only

`--before` names an importable copy of the previous kernels package.
"""

from __future__ import annotations

import argparse
import cProfile
import importlib
import io
import pstats
import time

from ._ab import READ_GBPS, start
from ._ab import p as _p
from .ab_session8 import layer_us, moe_cases


# ------------------------------------------------------------------------------------ eager
def eager(before, rounds: int, warm: bool) -> None:
    import torch

    from perfmodel.kernels import _launch
    from perfmodel.kernels import rmsnorm as rn

    from ..dispatch import _host_per_call

    rb = importlib.import_module(before + ".rmsnorm")
    N = 2000
    x = torch.randn(1, device="cuda")
    xr = torch.randn(1, 64, device="cuda", dtype=torch.bfloat16)
    wr = torch.ones(64, device="cuda", dtype=torch.bfloat16)
    o = torch.empty_like(xr)
    ref = rn.rmsnorm_reference(xr, wr)
    for name, f in (("before", lambda: rb.rmsnorm(xr, wr)), ("new", lambda: rn.rmsnorm(xr, wr)),
                    ("new out=", lambda: rn.rmsnorm(xr, wr, out=o))):
        got = f()
        torch.cuda.synchronize()
        ok = torch.allclose(got.float(), ref.float(), atol=2e-2, rtol=2e-2)
        _p(f"check rmsnorm {name}: {'ok' if ok else 'FAIL'}")
    fl = rn._kernel()
    jit = fl.fn
    kw = rn._launch_kw(64, False)
    args = (xr, xr, wr, o, o, 64, 64, 0, 64, 64, 1e-6)
    ptrs = (xr.data_ptr(), xr.data_ptr(), wr.data_ptr(), o.data_ptr(), o.data_ptr(), 64, 64, 0, 64, 64, 1e-6)
    key = (xr.dtype, wr.dtype, None, 64, True)
    fl.launch_keyed(key, (1,), args, ptrs, kw)
    fl[(1,)](*args, **kw)
    run, head, tail, raw = fl.cache[(torch.cuda.current_device(), key)]
    stream = torch.cuda.current_stream().cuda_stream
    kernel = jit[(1,)](*args, **kw)
    crun = kernel.run
    _p(f"FastLauncher direct entry: {type(run).__name__} ({'C launcher' if run is not crun else 'CudaLauncher.__call__'}), raw pointers {raw}")
    if warm:
        return
    h0, hb0 = fl.hits, rb._kernel().hits
    cases = [
        ("torch add_ (in place)", lambda: x.add_(1.0)),
        ("torch.empty(shape, dtype, device)", lambda: torch.empty((1, 64), dtype=torch.bfloat16, device="cuda")),
        ("torch.empty_like", lambda: torch.empty_like(xr)),
        ("x.reshape(-1, H)", lambda: xr.reshape(-1, 64)),
        ("torch.cuda.current_device()", torch.cuda.current_device),
        ("rmsnorm() before", lambda: rb.rmsnorm(xr, wr)),
        ("rmsnorm() new", lambda: rn.rmsnorm(xr, wr)),
        ("rmsnorm(out=) new", lambda: rn.rmsnorm(xr, wr, out=o)),
        ("add_rmsnorm() before", lambda: rb.add_rmsnorm(xr, xr, wr)),
        ("add_rmsnorm() new", lambda: rn.add_rmsnorm(xr, xr, wr)),
        ("Triton jit[grid](...) (out given)", lambda: jit[(1,)](*args, **kw)),
        ("FastLauncher[grid](...) generic", lambda: fl[(1,)](*args, **kw)),
        ("FastLauncher.launch_keyed", lambda: fl.launch_keyed(key, (1,), args, ptrs, kw)),
        ("CudaLauncher.__call__ (tensors)", lambda: crun(1, 1, 1, stream, kernel.function, kernel.packed_metadata,
                                                          None, None, None, *args, *tail)),
        ("C launcher, raw pointers", lambda: run(1, 1, 1, stream, *head, *ptrs, *tail)),
    ]
    _p(f"\n## eager host cost per call (us; median of 7 x {N} calls, dispatch.py's method), {rounds} rounds")
    res: dict[str, list[float]] = {n: [] for n, _ in cases}
    for _ in range(rounds):
        for n, f in cases:
            res[n].append(_host_per_call(f, N, torch).median_ms * 1e3)
    for n, _ in cases:
        _p(f"{n:38s} " + " ".join(f"{v:7.2f}" for v in res[n]) + f" | min {min(res[n]):6.2f}")
    _p(f"FastLauncher direct launches: new {fl.hits - h0}, before {rb._kernel().hits - hb0}")
    _launch.FastLauncher.RAW_POINTERS = False
    fl.cache.clear()
    rn.rmsnorm(xr, wr)
    t = [_host_per_call(lambda: rn.rmsnorm(xr, wr), N, torch).median_ms * 1e3 for _ in range(rounds)]
    _p(f"{'rmsnorm() new, tensors to C launcher':38s} " + " ".join(f"{v:7.2f}" for v in t))
    _launch.FastLauncher.RAW_POINTERS = True
    fl.cache.clear()
    rn.rmsnorm(xr, wr)
    for name, f in (("before", lambda: rb.rmsnorm(xr, wr)), ("new", lambda: rn.rmsnorm(xr, wr))):
        pr = cProfile.Profile()
        pr.enable()
        for _ in range(N):
            f()
        pr.disable()
        torch.cuda.synchronize()
        s = io.StringIO()
        pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(12)
        _p(f"\n## cProfile, {N} calls of rmsnorm() {name} (tottime order)\n" + "\n".join(s.getvalue().splitlines()[4:30]))


# ------------------------------------------------------------------------------------ moe
def _expected_distinct(T: int, E: int, k: int) -> float:
    return E * (1.0 - (1.0 - k / E) ** T)


def moe(before, rounds: int, warm: bool) -> None:
    import torch

    from perfmodel.kernels import moe_w4a16 as new
    from perfmodel.kernels._testing import calc_diff

    from ..shapes import KIMI

    old = importlib.import_module(before + ".moe_w4a16")
    H, E, k = KIMI["hidden"], KIMI["n_experts"], KIMI["top_k"]
    eb = new.expert_bytes(H, KIMI["moe_inter"] // 8)
    _p(f"\n## W4A16 MoE, Kimi TP8 slice: the read roof under uniform routing (E={E}, k={k}, {eb / 1e6:.2f} MB per expert, "
       f"read {READ_GBPS:.0f} GB/s)")
    for T in (1, 2, 4, 8):
        d = _expected_distinct(T, E, k)
        nb = d * eb + 4.0 * T * H
        _p(f"T={T}: expected distinct experts {d:5.2f}, bytes {nb / 1e6:6.1f} MB, roof {nb / READ_GBPS / 1e3:5.1f} us")

    plan = [("kimi_tp8", T) for T in (1, 2, 4, 8)] + [("qwen3", 1), ("qwen3", 8), ("kimi_I2048", 1), ("kimi_I2048", 8),
                                                     ("kimi_I2048", 32)]
    variants = {("kimi_tp8", 1): [dict(gate_up_config=dict(split_k=2)), dict(gate_up_config=dict(split_k=7)),
                                  dict(direct=False)],
                ("kimi_tp8", 2): [dict(gate_up_config=dict(split_k=4)), dict(direct=False)],
                ("kimi_tp8", 4): [dict(gate_up_config=dict(split_k=2)), dict(direct=False)],
                ("kimi_tp8", 8): [dict(direct=False)]}
    _p("\n## W4A16 MoE layer: us per call (CUDA graph of 8 calls, 8 routings, cold weights): before | new, per round")
    for name, T, Hs, I, Es, ks, w, x, routes in moe_cases(plan):
        a = old.fused_moe_w4a16(x, *w, *routes[0])
        b = new.fused_moe_w4a16(x, *w, *routes[0])
        c = new.fused_moe_w4a16(x, *w, *routes[0], direct=False)
        torch.cuda.synchronize()
        d_new, d_al = calc_diff(a.float(), b.float()), calc_diff(a.float(), c.float())
        ok = d_new < 1e-5 and d_al < 1e-5 and torch.isfinite(b).all()
        _p(f"check {name} T={T}: calc_diff(before, new) {d_new:.1e}, (before, new aligned) {d_al:.1e} ({'ok' if ok else 'FAIL'})")
        for v in variants.get((name, T), []):
            y = new.fused_moe_w4a16(x, *w, *routes[0], **v)
            torch.cuda.synchronize()
            _p(f"  variant {v}: calc_diff {calc_diff(a.float(), y.float()):.1e}")
        if warm:
            continue

        def t_of(mod, **kv):
            return layer_us(x, w, routes, mod, **kv)

        tb, tn = [], []
        for _ in range(rounds):
            tb.append(t_of(old))
            tn.append(t_of(new))
        nb = new.bytes_moved(routes[0][0], Es, Hs, I)
        _p(f"{name} T={T:2d}: before {' '.join(f'{v:6.1f}' for v in tb)} | new {' '.join(f'{v:6.1f}' for v in tn)} | best "
           f"{min(tb):6.1f} -> {min(tn):6.1f} us | new {nb / min(tn) / 1e3:5.0f} GB/s = "
           f"{100 * nb / min(tn) / 1e3 / READ_GBPS:3.0f}% of read (route 0: {int(torch.unique(routes[0][0]).numel())} experts)")
        for v in variants.get((name, T), []):
            _p(f"    new {v}: {min(t_of(new, **v) for _ in range(2)):6.1f} us")
        if T <= new.DIRECT_MAX_T:
            new.DIRECT_PARTS = "gate_up"
            _p(f"    new, direct gate_up alone: {min(t_of(new) for _ in range(2)):6.1f} us")
            new.DIRECT_PARTS = "both"


# ------------------------------------------------------------------------------------ attention
DECODE = [("mla", 8, 1024), ("mla", 8, 8192), ("mla", 64, 1024), ("mla", 64, 4096), ("mla", 64, 8192),
          ("qwen", 0, 1024), ("qwen", 0, 8192), ("llama", 0, 1024), ("llama", 0, 8192)]
LARGE = [("mla", 8, 128, 1, 32768), ("qwen", 0, 32, 1, 32768), ("llama", 0, 8, 1, 8192)]
ATT_VARIANTS = [(("mla", 64, 1, 1, 8192), []), (("mla", 64, 1, 1, 4096), []), (("llama", 0, 1, 1, 8192), [])]


def attn(before, rounds: int, warm: bool) -> None:
    import torch

    from perfmodel.kernels import tree_attention as new
    from perfmodel.kernels._testing import calc_diff

    from .ab_decode import Case, _time

    old = importlib.import_module(before + ".tree_attention")
    _p("\n## attention A/B (us per call, CUDA graph, cold L2): before | new, per round")
    for spec in [(k, H, 1, 1, L) for k, H, L in DECODE] + LARGE:
        c = Case(spec[0], spec[1], *spec[2:])
        d = calc_diff(c.fn(new)(*c.kvs[0]).float(), c.ref().float())
        if warm:
            c.fn(old)(*c.kvs[0])
            _p(f"check {c.name}: calc_diff {d:.1e}")
            continue
        tb, tn = [], []
        for _ in range(rounds):
            tb.append(_time(c.fn(old), c))
            tn.append(_time(c.fn(new), c))
        nb = c.nbytes()
        _p(f"{c.name:30s} before {' '.join(f'{x:6.1f}' for x in tb)} | new {' '.join(f'{x:6.1f}' for x in tn)} | best "
           f"{min(tb):6.1f} -> {min(tn):6.1f} us | new {nb / min(tn) / 1e3:5.0f} GB/s = {100 * nb / min(tn) / 1e3 / READ_GBPS:3.0f}% "
           f"of read | calc_diff {d:.1e} ({'ok' if d < 1e-4 else 'FAIL'})")
        del c
        torch.cuda.empty_cache()
    _p("\n## attention variants (new module), us per call; 'split only' = the split kernel without the combine")
    for spec, vs in ATT_VARIANTS:
        c = Case(spec[0], spec[1], *spec[2:])
        out = [f"default {_time(c.fn(new), c):6.1f}"]
        new.SPLIT_ONLY = True
        out.append(f"split only {_time(c.fn(new), c):6.1f}")
        new.SPLIT_ONLY = False
        new.COMBINE_ONE_PASS = False
        out.append(f"two-pass combine {_time(c.fn(new), c):6.1f}")
        new.COMBINE_ONE_PASS = True
        for v in vs:
            try:
                d = calc_diff(c.fn(new, **v)(*c.kvs[0]).float(), c.ref().float())
                out.append(f"{v} {_time(c.fn(new, **v), c):6.1f}" + ("" if d < 1e-4 else f" (calc_diff {d:.1e} FAIL)"))
            except Exception as e:  # noqa: BLE001 -- a config that does not fit
                out.append(f"{v} failed: {type(e).__name__}: {str(e)[:80]}")
        _p(f"{c.name}: " + "; ".join(out))
        del c


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", required=True, help="importable package of the previous kernels")
    ap.add_argument("--only", default="eager,moe,attn")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warm", action="store_true", help="compile and check only (a cache-warming pass)")
    a = ap.parse_args(argv)
    t0 = start("ab_session7")
    for sec in a.only.split(","):
        try:
            {"eager": eager, "moe": moe, "attn": attn}[sec](a.before, a.rounds, a.warm)
        except Exception as e:  # noqa: BLE001 -- report and go on to the next section
            import traceback

            _p(f"\n!! section {sec} failed: {type(e).__name__}: {e}")
            traceback.print_exc()
        _p(f"# section {sec} done at {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
