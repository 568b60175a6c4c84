"""A/B of the decode-size kernel changes (issue 19), on one GPU, in one call:
  * tree-verify attention, this tree's kernels vs a saved copy of the previous module
    (`--before PATH`), interleaved (before, after, before, after) at the decode shapes
    (C=1, q=1) and at large shapes, with the attention bench's timing (CUDA graph of calls
    rotating over KV copies: cold L2, no launch overhead);
  * a few split / tile variants of the new path at C=1 (`explore`);
  * eager host cost per call: a torch op, a Triton kernel through Triton's own launcher,
    and through kernels/_launch.py's FastLauncher;
  * the floor probe (measure/floor.py).
Correctness (against the torch references) is checked on the GPU before anything is timed.

    python -m perfmodel.measure.tuning.ab_decode --before out/ab/tree_attention_before.py
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import sys

DECODE = [("mla", 8, L) for L in (1024, 4096, 8192, 32768)] + [("mla", 64, L) for L in (1024, 8192, 32768)] + \
    [("qwen", 0, L) for L in (1024, 4096, 8192, 32768)] + [("llama", 0, L) for L in (1024, 8192, 32768)]
LARGE = [("mla", 8, 128, 1, 32768), ("mla", 8, 128, 1, 8192), ("mla", 8, 8, 1, 32768), ("mla", 8, 32, 9, 8192),
         ("mla", 64, 128, 1, 8192), ("qwen", 0, 32, 1, 32768), ("qwen", 0, 128, 1, 8192), ("llama", 0, 8, 1, 8192),
         ("llama", 0, 32, 17, 8192)]


def _load(path: str, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


class Case:
    """Inputs of one attention shape (KV copies for a cold L2) and how to call a module on them."""

    def __init__(self, kind: str, H: int, C: int, q: int, L: int):
        import torch

        from ..attention import random_tree_mask
        from ..common import randn
        from ..shapes import LLAMA3_8B, QWEN3_30B
        from ..timing import rotation_copies

        self.kind, self.C, self.q, self.L = kind, C, q, L
        S = L + q
        self.mask = random_tree_mask(C, q, seed=C * 1000 + q)
        if kind == "mla":
            self.H = H
            self.ql, self.qr = randn(C, q, H, 512), randn(C, q, H, 64)
            kvb = C * S * 576 * 2
            n = max(1, min(rotation_copies(kvb, max_copies=16), int(12e9 // kvb)))
            self.kvs = [(randn(C, S, 512), randn(C, S, 64)) for _ in range(n)]
            self.name = f"mla_h{H} C={C} q={q} L={L}"
        else:
            m = QWEN3_30B if kind == "qwen" else LLAMA3_8B
            self.Hq, self.Hkv, self.D = m["n_heads"], m["n_kv_heads"], m["head_dim"]
            self.qq = randn(C, q, self.Hq, self.D)
            kvb = 2 * C * S * self.Hkv * self.D * 2
            n = max(1, min(rotation_copies(kvb, max_copies=16), int(12e9 // kvb)))
            self.kvs = [(randn(C, S, self.Hkv, self.D), randn(C, S, self.Hkv, self.D)) for _ in range(n)]
            self.name = f"gqa_{kind} C={C} q={q} L={L}"
        del torch

    def fn(self, mod, **cfg):
        if self.kind == "mla":
            sm = 1.0 / math.sqrt(192)
            return lambda ckv, kpe: mod.tree_attention_mla(self.ql, self.qr, ckv, kpe, self.mask, sm, **cfg)
        return lambda k, v: mod.tree_attention_gqa(self.qq, k, v, self.mask, **cfg)

    def ref(self):
        from perfmodel.kernels import tree_attention as ta

        if self.kind == "mla":
            return ta.tree_attention_mla_reference(self.ql, self.qr, *self.kvs[0], self.mask, 1.0 / math.sqrt(192))
        return ta.tree_attention_gqa_reference(self.qq, *self.kvs[0], self.mask)

    def nbytes(self):
        from perfmodel.kernels import tree_attention as ta

        if self.kind == "mla":
            return ta.mla_bytes_moved(self.C, self.q, self.L, self.H)
        return ta.gqa_bytes_moved(self.C, self.q, self.L, self.Hq, self.Hkv, self.D)


def _time(fn, case):
    from ..timing import time_fn

    t = time_fn(fn, args_list=case.kvs, calls_per_graph=len(case.kvs), graph=True, cold_l2="rotate",
                max_samples=12, max_seconds=0.05)
    return t.median_ms * 1e3


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", required=True, help="path of the previous tree_attention.py")
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args(argv)
    from ..runner import exit_unless_cuda

    exit_unless_cuda("ab_decode")
    import torch

    from perfmodel.kernels import tree_attention as new
    from perfmodel.kernels._testing import calc_diff

    old = _load(a.before, "tree_attention_before")
    print(f"# {torch.cuda.get_device_name(0)}, torch {torch.__version__}", flush=True)

    # ---- correctness on the GPU (new path, decode and tree shapes)
    for spec in [("mla", 8, 1, 1, 1024), ("mla", 64, 1, 1, 8192), ("mla", 8, 2, 9, 3000), ("qwen", 0, 1, 1, 8192),
                 ("llama", 0, 3, 5, 1000)]:
        c = Case(spec[0], spec[1], *spec[2:])
        try:
            out = c.fn(new)(*c.kvs[0])
        except Exception as e:  # noqa: BLE001 -- report, fall back to no PDL, and carry on
            print(f"new path failed ({type(e).__name__}: {str(e)[:200]}); PDL_DEFAULT = False", flush=True)
            new.PDL_DEFAULT = False
            out = c.fn(new)(*c.kvs[0])
        d = calc_diff(out, c.ref())
        print(f"check {c.name}: calc_diff {d:.2e} ({'ok' if d < 1e-4 else 'FAIL'})", flush=True)
        del c

    # ---- attention A/B, interleaved
    print("\n## attention A/B (us per call, CUDA graph, cold L2): before | after, per round", flush=True)
    rows = [(k, H, 1, 1, L) for k, H, L in DECODE] + LARGE
    for spec in rows:
        c = Case(spec[0], spec[1], *spec[2:])
        tb, ta_ = [], []
        for _ in range(a.rounds):
            tb.append(_time(c.fn(old), c))
            ta_.append(_time(c.fn(new), c))
        b, n = min(tb), min(ta_)
        nb = c.nbytes()
        cfg = new.default_config(c.C, 1 if c.kind == "mla" else c.Hkv, c.q * (c.H if c.kind == "mla" else c.Hq // c.Hkv),
                                 c.L + c.q, 512 if c.kind == "mla" else c.D, num_sms=new._num_sms(0))
        print(f"{c.name:32s} before {' '.join(f'{x:7.1f}' for x in tb)} | after {' '.join(f'{x:7.1f}' for x in ta_)}"
              f" | best {b:7.1f} -> {n:7.1f} us ({b / n:4.2f}x) | after {nb / n / 1e3:6.0f} GB/s | splits {cfg['num_splits']}",
              flush=True)
        del c
        torch.cuda.empty_cache()

    # ---- eager launch host cost
    from perfmodel.kernels import rmsnorm as rn

    from ..dispatch import _host_per_call

    x = torch.randn(1, device="cuda")
    xr, wr = torch.randn(1, 64, device="cuda", dtype=torch.bfloat16), torch.ones(64, device="cuda", dtype=torch.bfloat16)
    fast = rn._kernel()
    jit = fast.fn
    args = (xr, xr, wr, None, None, 64, 64, 0, 64, 64, 1e-6)
    kw = dict(ADD=False, BLOCK=64, num_warps=1)

    def bare(launcher):
        def f():
            out = torch.empty((1, 64), dtype=xr.dtype, device="cuda")
            launcher[(1,)](*args[:3], out, out, *args[5:], **kw)
            return out
        return f

    def wrapper_via_jit():
        rn._KERNEL = jit
        try:
            return rn.rmsnorm(xr, wr)
        finally:
            rn._KERNEL = fast

    assert torch.allclose(rn.rmsnorm(xr, wr).float(), rn.rmsnorm_reference(xr, wr).float(), atol=2e-2)
    assert torch.equal(bare(jit)(), rn.rmsnorm(xr, wr)) and torch.equal(bare(fast)(), wrapper_via_jit())
    h0 = fast.hits
    print("\n## eager host cost per call (us, median of 7 x 2000 calls)", flush=True)
    for _ in range(2):
        for name, f in (("torch add_", lambda: x.add_(1.0)), ("torch.empty", lambda: torch.empty((1, 64), device="cuda")),
                        ("empty + Triton launcher", bare(jit)), ("empty + FastLauncher", bare(fast)),
                        ("rmsnorm(), Triton launcher", wrapper_via_jit), ("rmsnorm(), FastLauncher", lambda: rn.rmsnorm(xr, wr))):
            print(f"{name:28s} {_host_per_call(f, 2000, torch).median_ms * 1e3:6.2f}", flush=True)
    print(f"FastLauncher direct launches in this section: {fast.hits - h0}", flush=True)

    # ---- floor probe
    from ..floor import probe

    for _ in range(2):
        print("\n## floor probe (us):", {k: round(v, 2) for k, v in probe().items()}, flush=True)

    # ---- variants of the new path at C=1 (x0.5 / x2: the default's splits halved / doubled)
    print("\n## explore (new path, C=1 q=1): us per call", flush=True)
    for spec, variants in (
        (("mla", 8, 1, 1, 8192), [{"pdl": False}, {"num_stages": 3}]),
        (("mla", 8, 1, 1, 1024), [{"pdl": False}]),
        (("mla", 64, 1, 1, 8192), [{"pdl": False}, {"num_warps": 8}]),
        (("mla", 64, 1, 1, 1024), [{"pdl": False}]),
        (("llama", 0, 1, 1, 8192), [{"pdl": False}, {"num_stages": 2}, {"num_stages": 4}, {"block_s": 32, "num_stages": 4}]),
        (("qwen", 0, 1, 1, 8192), [{"pdl": False}, {"num_stages": 4}]),
        (("qwen", 0, 1, 1, 1024), [{"pdl": False}]),
    ):
        c = Case(spec[0], spec[1], *spec[2:])
        Hkv = 1 if c.kind == "mla" else c.Hkv
        R = c.q * (c.H if c.kind == "mla" else c.Hq // c.Hkv)
        out = [f"default {_time(c.fn(new), c):6.1f}"]
        for v, mult in [(v, 1) for v in variants]:
            dc = new.default_config(c.C, Hkv, R, c.L + c.q, 512 if c.kind == "mla" else c.D,
                                    num_sms=new._num_sms(0), block_r=v.get("block_r"))
            bs = v.get("block_s", dc["block_s"])
            kv = dict(v, num_splits=max(1, min(-(-(c.L + c.q) // bs), round(dc["num_splits"] * mult * dc["block_s"] / bs))))
            try:
                out.append(f"{kv} {_time(c.fn(new, **kv), c):6.1f}")
            except Exception as e:  # a config that does not fit
                out.append(f"{kv} failed: {type(e).__name__}")
        print(f"{c.name}: " + "; ".join(out), flush=True)
        del c


if __name__ == "__main__":
    main()
