"""A/B of session 13's decode attention question (issue 19), on one GPU, in one call.

Where should GQA skip the visibility mask on full KV tiles (the split kernel's `FULL_TILES`)?
Session 12 found it faster at C=1 and at large shapes but slower at C=8-32 in the 3-stage
small-C x L plan, where the branch's 2 KB more shared memory fits 2 programs per SM instead of 3
(runs/tuning/session12/offline_compile_gqa_smem_5b626b9.txt) and the plan's split count, rounded
up to fill 2 programs per SM, made 288-384 programs: a second wave.

At f3f18e2 (`ab_session13_f3f18e2.log`) the wrapper's first rule ("rule": the mask unless the plan
ran 3 stages with more programs than 2 per SM fit in one wave) was timed against "mask" (every
tile masked: session 11's kernels), "full" (no mask on full tiles, whatever the plan), "full st2"
(that at 2 stages) and "full fit" (that with the splits cut to one wave of 2 per SM). "full fit"
beat the mask at every 3-stage shape past one wave, so the plan now rounds those splits down
(`default_config`) and GQA skips the mask at every <= 16-row tile. Now, per shape:

- "default": the wrapper's defaults;
- "s11": session 11's kernels (the mask on every tile, the splits rounded up);
- "st2": the defaults at 2 stages.

Interleaved per round, timed as the attention bench times (CUDA graph over KV copies, cold L2:
`ab_decode._time`). Every variant is checked against the torch reference on the GPU first.

    python -m perfmodel.measure.tuning.ab_session13 [--rounds 3] [--warm]
"""

from __future__ import annotations

from . import _ab
from ._ab import p as _p
from .ab_session12 import compare

# (kind, heads, C, q, L) of ab_decode.Case: session 12's tiles and mid shapes (GQA), more C=2-32
# points, and small trees (q = 2-4: row tiles of <= 16 rows)
SHAPES = [("llama", 0, 1, 1, 1024), ("llama", 0, 1, 1, 8192), ("llama", 0, 1, 1, 32768),
          ("qwen", 0, 1, 1, 1024), ("qwen", 0, 1, 1, 8192), ("qwen", 0, 1, 1, 32768),
          ("qwen", 0, 8, 1, 1024), ("qwen", 0, 8, 1, 4096), ("qwen", 0, 8, 1, 8192),
          ("llama", 0, 8, 1, 1024), ("llama", 0, 8, 1, 4096), ("llama", 0, 8, 1, 8192),
          ("qwen", 0, 32, 1, 1024), ("qwen", 0, 32, 1, 4096), ("qwen", 0, 32, 1, 32768),
          ("llama", 0, 32, 1, 1024), ("llama", 0, 4, 1, 2048), ("qwen", 0, 16, 1, 2048),
          ("llama", 0, 2, 1, 1024), ("llama", 0, 1, 4, 8192), ("llama", 0, 4, 4, 4096), ("qwen", 0, 8, 2, 2048)]


def variants(c, num_sms: int) -> dict:
    """name -> tree_attention_gqa knobs for case c; the default plan is printed."""
    from perfmodel.kernels import tree_attention as ta

    R = c.q * (c.Hq // c.Hkv)
    S = c.L + c.q
    plan = ta.split_plan(c.C, c.Hkv, R, S, c.D, num_sms)
    g = plan["grid"]
    small = plan["num_stages"] == 3  # the small-C x L plan: session 11 rounded its splits up
    s11_splits = min(-(-S // plan["block_s"]), -(-2 * num_sms // (g[0] * g[1]))) if small else plan["num_splits"]
    _p(f"plan {c.name}: {g[0] * g[1] * g[2]} programs, {plan['num_stages']} stages, block_r {plan['block_r']}, "
       f"splits {plan['num_splits']} (s11 {s11_splits}), full_tiles={plan['full_tiles']}")
    return {"default": {}, "s11": dict(full_tiles=False, num_splits=s11_splits), "st2": dict(num_stages=2)}


def _run(a) -> None:
    import torch

    from perfmodel.kernels import tree_attention as ta

    from .ab_decode import Case

    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    _p("\n## GQA decode attention, full tiles without the mask, us per call (CUDA graph over KV copies, cold L2)")
    for kind, H, C, q, L in SHAPES:
        c = Case(kind, H, C, q, L)
        compare(c, {n: (c.fn(ta, **kw), c.kvs) for n, kw in variants(c, num_sms).items()}, a, 8)
        del c
        torch.cuda.empty_cache()


def main(argv=None) -> None:
    _ab.main("ab_session13", __doc__, _run, argv)


if __name__ == "__main__":
    main()
