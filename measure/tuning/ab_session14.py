"""A/B of session 14's decode attention questions (issue 19), on one GPU, in one call.

GQA at C=1, L=8192 (Llama) stays near 13.7 us with its split kernel at 56% of DRAM throughput and
75% of scheduler cycles without an eligible warp (runs/tuning/session13/ncu_*). Do other per-
program shapes of the same work get more bytes in flight? Per shape:

- "default": the wrapper's defaults (2 stages where a split has at most 3 KV tiles, else 3);
- "w8" / "w2": 8 or 2 warps per program;
- "bs32": 32-position KV tiles (the splits' lengths are rounded to them; twice the tiles);
- "bs32 st4": that with 4 stages;
- "st3" / "st2": 3 or 2 stages whatever the tiles per split.

Interleaved per round, timed as the attention bench times (CUDA graph over KV copies, cold L2:
`ab_decode._time`). Every variant is checked against the torch reference on the GPU first.

    python -m perfmodel.measure.tuning.ab_session14 [--rounds 3] [--warm]
"""

from __future__ import annotations

from . import _ab
from ._ab import p as _p
from .ab_session12 import compare

# (kind, heads, C, q, L) of ab_decode.Case
SHAPES = [("llama", 0, 1, 1, 8192), ("qwen", 0, 1, 1, 8192), ("llama", 0, 1, 1, 1024),
          ("llama", 0, 2, 1, 1024), ("llama", 0, 1, 4, 8192), ("qwen", 0, 8, 1, 1024)]

VARIANTS = {"default": {}, "w8": dict(num_warps=8), "w2": dict(num_warps=2), "bs32": dict(block_s=32),
            "bs32 st4": dict(block_s=32, num_stages=4), "st3": dict(num_stages=3), "st2": dict(num_stages=2)}


def _run(a) -> None:
    import torch

    from perfmodel.kernels import tree_attention as ta

    from .ab_decode import Case

    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    _p("\n## GQA decode attention per-program shapes, us per call (CUDA graph over KV copies, cold L2)")
    for kind, H, C, q, L in SHAPES:
        c = Case(kind, H, C, q, L)
        plan = ta.split_plan(c.C, c.Hkv, c.q * (c.Hq // c.Hkv), c.L + c.q, c.D, num_sms)
        g = plan["grid"]
        _p(f"plan {c.name}: {g[0] * g[1] * g[2]} programs, {plan['num_stages']} stages, "
           f"{plan['split_len'] // plan['block_s']} tiles per split, full_tiles={plan['full_tiles']}")
        compare(c, {n: (c.fn(ta, **kw), c.kvs) for n, kw in VARIANTS.items()}, a, 9)
        del c
        torch.cuda.empty_cache()


def main(argv=None) -> None:
    _ab.main("ab_session14", __doc__, _run, argv)


if __name__ == "__main__":
    main()
