"""A/B of session 16's decode attention question (issue 19), on one GPU, in one call.

Nsight Compute of the split kernel at C=1 (runs/tuning/session13/ncu_*) shows few warps per
scheduler (138 registers per thread, 2 programs per SM) with most cycles lacking an eligible one,
and DRAM at 56% of peak. Its KV tiles come through pointer loads (cp.async, every thread
computing addresses). Do KV tiles through the tensor memory accelerator (`tree_attention`'s knob
`tma`) get more bytes in flight? Per shape:

- "default": the wrapper's defaults (pointer loads);
- "tma1": descriptors made on the device (per program, in global scratch);
- "tma2": descriptors made on the host (passed as kernel parameters);
- "tma2 st3" / "tma2 st4": that with 3 or 4 stages;
- "tma1 st3": device descriptors with 3 stages.

Interleaved per round, timed as the attention bench times (CUDA graph over KV copies, cold L2:
`ab_decode._time`). Every variant is checked against the torch reference on the GPU first; one
that does not compile is reported and skipped.

With --warps: MLA with all 64 heads in one program on 8 or 16 warps (the accumulator of
64 x 512 fp32 spread over 256 or 512 threads), 32-row tiles on 8 warps, 128-position KV tiles.

    python -m perfmodel.measure.tuning.ab_session16 [--rounds 3] [--warm] [--warps]
"""

from __future__ import annotations

from . import _ab
from ._ab import p as _p
from .ab_session12 import compare

# (kind, heads, C, q, L) of ab_decode.Case: the C=1 goal shapes, a small tree, mid and
# large shapes (large-size efficiency must not drop)
SHAPES = [("mla", 8, 1, 1, 1024), ("mla", 8, 1, 1, 8192), ("mla", 64, 1, 1, 1024), ("mla", 64, 1, 1, 8192),
          ("llama", 0, 1, 1, 1024), ("llama", 0, 1, 1, 8192), ("qwen", 0, 1, 1, 8192),
          ("llama", 0, 1, 4, 8192), ("mla", 8, 1, 4, 8192),
          ("mla", 64, 8, 1, 4096), ("llama", 0, 8, 1, 4096), ("qwen", 0, 32, 1, 4096),
          ("mla", 8, 32, 1, 32768), ("llama", 0, 8, 1, 32768)]

VARIANTS = {"default": {}, "tma1": dict(tma=1), "tma2": dict(tma=2), "tma2 st3": dict(tma=2, num_stages=3),
            "tma2 st4": dict(tma=2, num_stages=4), "tma1 st3": dict(tma=1, num_stages=3)}


# --warps: many warps per program, so that one program holds every MLA head's accumulator and
# reads each KV tile once (16-row tiles read it once per 16 heads, from L2 after the first)
WARPS_SHAPES = [("mla", 64, 1, 1, 8192), ("mla", 64, 1, 1, 4096), ("mla", 64, 1, 1, 1024), ("mla", 8, 1, 1, 8192),
                ("llama", 0, 1, 1, 8192), ("mla", 64, 8, 1, 4096), ("mla", 8, 32, 1, 32768)]
WARPS_VARIANTS = {"default": {}, "r64 w16": dict(block_r=64, num_warps=16),
                  "r64 w16 x66": dict(block_r=64, num_warps=16, num_splits=66),
                  "r64 w16 x33": dict(block_r=64, num_warps=16, num_splits=33),
                  "r64 w8": dict(block_r=64, num_warps=8), "r32 w8": dict(block_r=32, num_warps=8),
                  "r32 w8 x66": dict(block_r=32, num_warps=8, num_splits=66),
                  "r16 w8": dict(block_r=16, num_warps=8), "bs128": dict(block_s=128),
                  "bs128 w8": dict(block_s=128, num_warps=8)}


def _run(a) -> None:
    import torch

    from perfmodel.kernels import tree_attention as ta

    from .ab_decode import Case

    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    shapes, variants = (WARPS_SHAPES, WARPS_VARIANTS) if a.warps else (SHAPES, VARIANTS)
    what = "row tiles and warps per program" if a.warps else "KV tiles by pointer loads or TMA"
    _p(f"\n## decode attention, {what}, us per call (CUDA graph over KV copies, cold L2)")
    for kind, H, C, q, L in shapes:
        c = Case(kind, H, C, q, L)
        if kind == "mla":
            R, dv = q * H, 512
            Hkv = 1
        else:
            R, dv, Hkv = q * (c.Hq // c.Hkv), c.D, c.Hkv
        plan = ta.split_plan(C, Hkv, R, L + q, dv, num_sms)
        g = plan["grid"]
        _p(f"plan {c.name}: {g[0] * g[1] * g[2]} programs, {plan['num_stages']} stages, block_r {plan['block_r']}, "
           f"{plan['split_len'] // plan['block_s']} tiles per split, full_tiles={plan['full_tiles']}")
        compare(c, {n: (c.fn(ta, **kw), c.kvs) for n, kw in variants.items()}, a, 11)
        del c
        torch.cuda.empty_cache()


def main(argv=None) -> None:
    _ab.main("ab_session16", __doc__, _run, argv,
             flags=(("--warps", "row tiles and warps per program instead of the TMA variants"),))


if __name__ == "__main__":
    main()
