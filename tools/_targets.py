"""The kernels the tools run, one shape at a time (GPU only; torch and the kernels are imported here).

A `Case` holds one shape's inputs, with enough copies that a CUDA graph rotating over them reads
cold data (as the benches time), and knows how to call its kernel with a variant's knobs, check
the result against the torch reference, and time it as the kernel's bench does:

    attention   kernels.tree_attention: tree_attention_mla / tree_attention_gqa (KV copies)
    moe_w4a16   kernels.moe_w4a16.fused_moe_w4a16, random kernel-layout weights, 8 routings
    moe_bf16    kernels.moe_bf16.fused_moe_bf16, random weights, 4 routings
    ddtree      kernels.ddtree.build_ddtree_gpu on random bf16 logits (copies)
"""

from __future__ import annotations

import contextlib
import importlib.util
import math
import sys
from pathlib import Path

from ._cli import shape_name, split_module_knobs

CHECK_MAX_DIFF = 1e-4  # calc_diff against the torch reference (kernels._testing); ddtree: sorted scores


def module_of(kernel: str):
    """The kernel module whose constants `@NAME` knobs set."""
    name = {"attention": "tree_attention", "moe_w4a16": "moe_w4a16", "moe_bf16": "moe_bf16", "ddtree": "ddtree"}[kernel]
    return importlib.import_module(f"perfmodel.kernels.{name}")


def load_module_copy(path: str, kernel: str):
    """A copy of the kernel's module from `path` (e.g. the file at an earlier commit), imported as
    a sibling of the installed one so that its relative imports resolve."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"--before {path}: no such file")
    name = f"perfmodel.kernels._before_{module_of(kernel).__name__.rsplit('.', 1)[1]}"
    spec = importlib.util.spec_from_file_location(name, p)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


@contextlib.contextmanager
def module_constants(mod, values: dict):
    """`mod`'s constants set to `values` inside the block (read at launch and at graph capture);
    the module's cached launch plans are dropped on the way in and out."""
    missing = [k for k in values if not hasattr(mod, k)]
    if missing:
        raise AttributeError(f"{mod.__name__} has no constant {', '.join(missing)}")
    old = {k: getattr(mod, k) for k in values}

    def drop_plans():
        for cache in ("_PLANS", "_PAIR_PLANS"):
            if isinstance(getattr(mod, cache, None), dict):
                getattr(mod, cache).clear()

    drop_plans()
    for k, v in values.items():
        setattr(mod, k, v)
    try:
        yield
    finally:
        for k, v in old.items():
            setattr(mod, k, v)
        drop_plans()


class Case:
    """One shape of one kernel: `args_list` (input copies), `call(mod, kw, args)`, `reference(i)`
    for args_list[i], `nbytes` and `flops` of one call (None where not defined)."""

    kernel: str
    name: str
    args_list: list
    nbytes: float | None = None
    flops: float | None = None
    max_seconds = 0.05

    def call(self, mod, kw: dict, args):
        raise NotImplementedError

    def reference(self, i: int):
        raise NotImplementedError

    def diff(self, out, ref) -> float:
        from perfmodel.kernels._testing import calc_diff

        return calc_diff(out.float(), ref.float())

    def bound(self, knobs: dict, mod=None):
        """(callable over one entry of args_list, the module constants to hold while it runs)."""
        kw, consts = split_module_knobs(knobs)
        mod = mod or module_of(self.kernel)
        return (lambda *args: self.call(mod, kw, args)), mod, consts

    def check(self, knobs: dict, mod=None, i: int = 0) -> float:
        """calc_diff of the variant's output against the reference (inf where they do not even
        compare, e.g. a timing-only knob that returns partial results); raises where the call fails."""
        f, m, consts = self.bound(knobs, mod)
        with module_constants(m, consts):
            out = f(*self.args_list[i])
        try:
            return self.diff(out, self.reference(i))
        except (RuntimeError, ValueError, AttributeError, TypeError):
            return float("inf")

    def time_us(self, knobs: dict, mod=None) -> float:
        """Median us per call of a CUDA graph of one call per input copy (cold inputs, no launch
        overhead), as the kernel's bench times it."""
        from perfmodel.measure.timing import time_fn

        f, m, consts = self.bound(knobs, mod)
        with module_constants(m, consts):
            t = time_fn(f, args_list=self.args_list, calls_per_graph=len(self.args_list), graph=True, cold_l2="rotate",
                        max_samples=12, max_seconds=self.max_seconds)
        return t.median_ms * 1e3


class AttentionCase(Case):
    kernel = "attention"

    def __init__(self, shape: dict):
        from perfmodel.kernels import tree_attention as ta
        from perfmodel.measure.attention import random_tree_mask
        from perfmodel.measure.common import randn
        from perfmodel.measure.shapes import LLAMA3_8B, QWEN3_30B
        from perfmodel.measure.timing import rotation_copies

        self.name = shape_name(shape)
        kind, C, q, L = shape["kind"], shape["C"], shape["q"], shape["L"]
        self.kind, S = kind, L + q
        self.mask = random_tree_mask(C, q, seed=C * 1000 + q)
        if kind == "mla":
            H = shape["H"]
            self.ql, self.qr = randn(C, q, H, 512), randn(C, q, H, 64)
            kv_bytes = C * S * 576 * 2
            copy = lambda: (randn(C, S, 512), randn(C, S, 64))  # noqa: E731
            self.nbytes, self.flops = ta.mla_bytes_moved(C, q, L, H), ta.mla_flops(C, q, L, H)
            self.plan_args = (C, 1, q * H, S, 512)
        else:
            m = QWEN3_30B if kind == "qwen" else LLAMA3_8B
            Hq, Hkv, D = m["n_heads"], m["n_kv_heads"], m["head_dim"]
            self.qq = randn(C, q, Hq, D)
            kv_bytes = 2 * C * S * Hkv * D * 2
            copy = lambda: (randn(C, S, Hkv, D), randn(C, S, Hkv, D))  # noqa: E731
            self.nbytes, self.flops = ta.gqa_bytes_moved(C, q, L, Hq, Hkv, D), ta.gqa_flops(C, q, L, Hq, D)
            self.plan_args = (C, Hkv, q * (Hq // Hkv), S, D)
        n = max(1, min(rotation_copies(kv_bytes, max_copies=16), int(12e9 // kv_bytes)))
        self.args_list = [copy() for _ in range(n)]

    def call(self, mod, kw, args):
        if self.kind == "mla":
            return mod.tree_attention_mla(self.ql, self.qr, *args, self.mask, 1.0 / math.sqrt(192), **kw)
        return mod.tree_attention_gqa(self.qq, *args, self.mask, **kw)

    def reference(self, i):
        from perfmodel.kernels import tree_attention as ta

        if self.kind == "mla":
            return ta.tree_attention_mla_reference(self.ql, self.qr, *self.args_list[i], self.mask, 1.0 / math.sqrt(192))
        return ta.tree_attention_gqa_reference(self.qq, *self.args_list[i], self.mask)

    def plan(self, num_sms: int) -> str:
        """The default launch plan of the split kernel at this shape (`split_plan`)."""
        from perfmodel.kernels import tree_attention as ta

        p = ta.split_plan(*self.plan_args, num_sms)
        g = p["grid"]
        return (f"{g[0] * g[1] * g[2]} programs, block_r {p['block_r']}, {p['num_splits']} splits of "
                f"{p['split_len'] // p['block_s']} tiles, {p['num_stages']} stages, full_tiles={p['full_tiles']}")


def _moe_dims(shape: dict) -> tuple[int, int, int, int]:
    """(H, I, E, k) of a MoE shape: the model's, with the shape's non-zero overrides."""
    from perfmodel.measure.shapes import KIMI, QWEN3_30B

    m = QWEN3_30B if shape["kind"] == "qwen3" else KIMI
    I = m["moe_inter"] // (8 if shape["kind"] == "kimi_tp8" else 1)  # noqa: E741 (the model's name for it)
    dims = dict(H=m["hidden"], I=I, E=m["n_experts"], k=m["top_k"])
    dims.update({k: shape[k] for k in dims if shape.get(k)})
    return dims["H"], dims["I"], dims["E"], dims["k"]


_WEIGHTS: dict = {}  # one MoE shape's random weights, kept while the next case has the same dimensions


def _weights(key, make):
    if key not in _WEIGHTS:
        import torch

        _WEIGHTS.clear()
        torch.cuda.empty_cache()
        _WEIGHTS[key] = make()
    return _WEIGHTS[key]


class MoEW4A16Case(Case):
    kernel = "moe_w4a16"
    max_seconds = 0.08

    def __init__(self, shape: dict, routings: int = 8):
        from perfmodel.kernels import moe_w4a16 as m
        from perfmodel.measure.common import randn, uniform_topk

        self.name = shape_name(shape)
        T = shape["T"]
        H, I, E, k = self.dims = _moe_dims(shape)
        self.w = _weights(("w4a16", E, H, I), lambda: (*m.random_kernel_weights(E, 2 * I, H),
                                                       *m.random_kernel_weights(E, H, I)))
        self.x = randn(T, H)
        self.args_list = [uniform_topk(T, E, k) for _ in range(routings)]
        self.nbytes, self.flops = m.bytes_moved(self.args_list[0][0], E, H, I), m.flops(T, k, H, I)

    def call(self, mod, kw, args):
        return mod.fused_moe_w4a16(self.x, *self.w, *args, **kw)

    def reference(self, i):
        """fused_moe_w4a16_reference over the touched experts only (unpacked from the kernel layout)."""
        import torch

        from perfmodel.kernels import moe_w4a16 as m

        H, I, _, _ = self.dims
        ids, tw = self.args_list[i]
        used, local = torch.unique(ids, return_inverse=True)
        w13 = m.unpack_from_kernel(self.w[0][used], self.w[1][used], 2 * I, H)
        w2 = m.unpack_from_kernel(self.w[2][used], self.w[3][used], H, I)
        return m.fused_moe_w4a16_reference(self.x.float(), *w13, *w2, local.to(ids.dtype), tw)


class MoEBF16Case(Case):
    kernel = "moe_bf16"

    def __init__(self, shape: dict, routings: int = 4):
        from perfmodel.kernels import moe_bf16
        from perfmodel.measure.common import randn, uniform_topk

        self.name = shape_name(shape)
        T = shape["T"]
        H, I, E, k = _moe_dims(shape)
        self.w = _weights(("bf16", E, H, I), lambda: (randn(E, 2 * I, H, scale=0.02), randn(E, H, I, scale=0.02)))
        self.x = randn(T, H)
        self.args_list = [uniform_topk(T, E, k) for _ in range(routings)]
        self.nbytes, self.flops = moe_bf16.bytes_moved(self.args_list[0][0], E, H, I), moe_bf16.flops(T, k, H, I)

    def call(self, mod, kw, args):
        return mod.fused_moe_bf16(self.x, *self.w, *args, **kw)

    def reference(self, i):
        from perfmodel.kernels import moe_bf16

        return moe_bf16.fused_moe_bf16_reference(self.x, *self.w, *self.args_list[i])


class DDTreeCase(Case):
    """The GPU DDTree builder; checked against its torch path (`impl="torch"`), whose scores the GPU
    tests check against the CPU reference: the sorted node scores per sequence must match."""

    kernel = "ddtree"

    def __init__(self, shape: dict, copies: int = 4):
        import torch

        self.name = shape_name(shape)
        C, self.B, D, V = shape["C"], shape["B"], shape["D"], shape["V"]
        self.args_list = [(torch.randn(C, D, V, device="cuda", dtype=torch.bfloat16) * 3,) for _ in range(copies)]
        self.nbytes = C * D * V * 2.0

    def call(self, mod, kw, args):
        return mod.build_ddtree_gpu(args[0], self.B, **kw)

    def reference(self, i):
        from perfmodel.kernels import ddtree

        return ddtree.build_ddtree_gpu(self.args_list[i][0], self.B, impl="torch")

    def diff(self, out, ref) -> float:
        from perfmodel.kernels._testing import calc_diff

        if not bool((out.num_nodes == ref.num_nodes).all()):
            return float("inf")
        return calc_diff(out.scores.float().sort(-1).values, ref.scores.float().sort(-1).values)


CASES = {"attention": AttentionCase, "moe_w4a16": MoEW4A16Case, "moe_bf16": MoEBF16Case, "ddtree": DDTreeCase}


def make_case(kernel: str, shape: dict) -> Case:
    return CASES[kernel](shape)


def read_ceiling_GBps(given: float | None) -> tuple[float | None, str]:
    """The read ceiling the tools' '% of read' divides by: `given`, else the shipped profile's
    where this GPU is the profile's (an H200), else none."""
    if given:
        return given, "given"
    import json

    import torch

    import perfmodel

    path = Path(perfmodel.__file__).parent / "data" / "h200-sxm.json"
    prof = json.loads(path.read_text())
    if torch.cuda.get_device_name(0) == prof["provenance"]["gpu_name"]:
        return prof["ceilings"]["read_GBps"], "the shipped profile perfmodel/data/h200-sxm.json"
    return None, "none (another GPU than the shipped profile's; give --read-GBps)"


def start(tool: str) -> None:
    """Exit with one line unless a CUDA GPU is present; print the GPU, torch and triton."""
    from perfmodel.measure.runner import exit_unless_cuda

    exit_unless_cuda(tool)
    import torch
    import triton

    print(f"# {torch.cuda.get_device_name(0)}, torch {torch.__version__}, triton {triton.__version__}", flush=True)


def profiled_replays(fn, args_list, reps: int = 20):
    """The profiler's CUDA kernel events of `reps` replays of one CUDA graph calling fn over
    args_list (fn run eagerly first, as warm-up)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    for a in args_list[:2]:
        fn(*a)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for a in args_list:
            fn(*a)
    for _ in range(3):
        g.replay()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as p:
        for _ in range(reps):
            g.replay()
        torch.cuda.synchronize()
    return [e for e in p.events() if e.device_type.name == "CUDA"]


def kernel_times(case: Case, knobs: dict, mod=None, reps: int = 20) -> str:
    """Per-kernel mean duration per call (us), in launch order, of a variant under graph replay;
    kernels launched with PDL overlap, so their sum can exceed the call's time."""
    f, m, consts = case.bound(knobs, mod)
    with module_constants(m, consts):
        events = profiled_replays(f, case.args_list, reps)
    n = reps * len(case.args_list)
    ev = sorted(events, key=lambda e: e.time_range.start)
    per_call = max(1, len(ev) // n)
    per: dict[str, list[float]] = {}
    for i, e in enumerate(ev[:per_call * n]):
        per.setdefault(f"{i % per_call}:{e.name.split('(')[0][:40]}", []).append(e.device_time)
    parts = [f"{name} {sum(v) / n:.2f}" for name, v in per.items()]
    return "; ".join(parts) + f" | sum {sum(sum(v) for v in per.values()) / n:.2f} us"
