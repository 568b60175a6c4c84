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

    python -m perfmodel.measure.tuning.ab_session16 [--rounds 3] [--warm]
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


def _run(a) -> None:
    import torch

    from perfmodel.kernels import tree_attention as ta

    from .ab_decode import Case

    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    _p("\n## decode attention, KV tiles by pointer loads or TMA, us per call (CUDA graph over KV copies, cold L2)")
    for kind, H, C, q, L in SHAPES:
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
        compare(c, {n: (c.fn(ta, **kw), c.kvs) for n, kw in VARIANTS.items()}, a, 9)
        del c
        torch.cuda.empty_cache()


def main(argv=None) -> None:
    _ab.main("ab_session16", __doc__, _run, argv)


if __name__ == "__main__":
    main()
