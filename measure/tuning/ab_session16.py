"""A/B of session 16's decode attention questions (issue 19), on one GPU, in one call.

Nsight Compute of the split kernel at C=1 (runs/tuning/session13/ncu_*) shows few warps per
scheduler and most cycles lacking an eligible one. The modes:

- (none): the many-head MLA plan's split count rounded down to its one resident wave (the
  default now) against rounded up (`old`: 16-row tiles, ceil(2 x SMs / programs per split));
- --warps: many warps per program, 64-row tiles on 8 or 16 warps (one program holds every MLA
  head's accumulator and reads each KV tile once), 32-row tiles on 8 warps, 128-position KV tiles;
- --wgmma: 64-row tiles (wgmma) at MLA shapes that are compute-bound (64 heads at C >= 8, tree
  tokens q = 9-65), in the variants that compile without spills offline;
- --sweep: 8 warps and 16-row tiles for 64-head MLA over C = 2-128 and L = 1024-32768, and for
  tree verification (q = 9, 17);
- --wave: the many-head plan (16-row tiles, splits rounded down to one resident wave of two
  programs per SM) at larger C x L and at trees, against the default's 32-row tiles.

The first A/B of the session, KV tiles through TMA descriptors (device- or host-made) against
pointer loads, ran at 4eebc24 with that commit's version of this tool and of the kernel (the knob
`tma`, since removed: `ab_session16_4eebc24.log`).

Interleaved per round, timed as the attention bench times (CUDA graph over KV copies, cold L2:
`ab_decode._time`). Every variant is checked against the torch reference on the GPU first; one
that does not compile is reported and skipped.

    python -m perfmodel.measure.tuning.ab_session16 [--rounds 3] [--warm] [--warps | --wgmma | --sweep | --wave]
"""

from __future__ import annotations

from . import _ab
from ._ab import p as _p
from .ab_session12 import compare

# (kind, heads, C, q, L) of ab_decode.Case: 64 heads at C where the rounding changes the plan, and
# two where it does not (C=1, C=2)
SHAPES = [("mla", 64, C, 1, L) for C in (4, 5, 8, 16, 32) for L in (1024, 4096)] + [
    ("mla", 64, 4, 1, 8192), ("mla", 64, 1, 1, 8192), ("mla", 64, 2, 1, 4096)]


def rule_variants(C: int, S: int, num_sms: int) -> dict:
    """default (splits rounded down to the wave) and old (rounded up) for 64 heads at q=1."""
    base = C * 4  # 16-row tiles: 4 row blocks of 64 heads per sequence
    old = max(1, min(-(-S // 64), -(-2 * num_sms // base)))
    return {"default": {}, "old": dict(block_r=16, num_splits=old)}


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

# --wgmma: MLA where it is compute-bound (many heads or tree tokens per program: 64 heads at C >= 8,
# q = 9-65) is at 1-42% of read and ~200 TFLOP/s in the embedded profile: its <= 32-row tiles run
# mma.sync. 64-row tiles run wgmma (one warpgroup per 64 rows); in an offline sm_90 compile these
# variants use 246-255 registers, the two 8-warp column slices without spills
# (runs/tuning/session16/offline_compile_mla_24ddd9b.txt; the 64-row tile cannot skip the mask:
# Triton's pipeliner fails on the branch there)
WGMMA_SHAPES = [("mla", 64, 8, 1, 8192), ("mla", 64, 32, 1, 8192), ("mla", 64, 128, 1, 8192),
                ("mla", 8, 8, 17, 8192), ("mla", 8, 32, 9, 4096), ("mla", 64, 1, 17, 8192), ("mla", 8, 1, 65, 8192),
                ("mla", 8, 8, 65, 4096), ("mla", 64, 1, 1, 8192), ("mla", 8, 128, 1, 32768)]
_R64 = dict(block_r=64, full_tiles=False)
WGMMA_VARIANTS = {"default": {}, "r64 w8": dict(_R64, num_warps=8), "r64 w8 bs32": dict(_R64, num_warps=8, block_s=32),
                  "r64 w8 dv256 bs32": dict(_R64, num_warps=8, block_dv=256, block_s=32),
                  "r64 w4 dv256 bs32": dict(_R64, num_warps=4, block_dv=256, block_s=32),
                  "r64 w8 dv128 bs32": dict(_R64, num_warps=8, block_dv=128, block_s=32)}

# --sweep: 8 warps per 16-row program for many-head MLA (the --warps run: 64 heads C=8 L=4096
# 58.8 -> 52.5 us, but C=1 L=8192 16.5 -> 20.3) and 16-row tiles for tree verification, over C and L
SWEEP_SHAPES = ([("mla", 64, C, 1, L) for C in (2, 8, 32, 128) for L in (1024, 4096, 8192, 32768)]
                + [("mla", 8, 8, 9, 4096), ("mla", 8, 32, 9, 8192), ("mla", 8, 8, 17, 8192), ("mla", 64, 1, 17, 8192)])
SWEEP_VARIANTS = {"default": {}, "w8": dict(num_warps=8), "r16": dict(block_r=16), "r16 w8": dict(block_r=16, num_warps=8)}

# --wave: the many-head plan (16-row tiles, splits rounded down to one resident wave of two
# programs per SM) past the small C x L where the default uses it, against the default's 32-row
# tiles; and for trees (q = 9, 17)
WAVE_SHAPES = ([("mla", 64, C, 1, L) for C, L in ((2, 32768), (4, 32768), (8, 8192), (8, 32768), (16, 4096),
                                                   (16, 8192), (32, 4096), (32, 8192), (32, 32768), (64, 4096),
                                                   (128, 8192))]
               + [("mla", 8, 1, 9, 8192), ("mla", 8, 8, 9, 4096), ("mla", 8, 32, 9, 8192), ("mla", 8, 8, 17, 8192),
                  ("mla", 64, 1, 17, 8192), ("mla", 8, 1, 65, 8192)])


def wave_variants(C: int, R: int, num_sms: int) -> dict:
    """default, and 16-row tiles with the splits rounded down to 2 programs per SM (`wave16`)."""
    base = C * -(-R // 16)
    return {"default": {}, "wave16": dict(block_r=16, num_splits=max(1, 2 * num_sms // base))}


# mode -> (shapes, variants of one shape: f(C, R, S, num_sms) -> name -> knobs, what it times)
MODES = {
    "rule": (SHAPES, lambda C, R, S, sms: rule_variants(C, S, sms), "the many-head plan's splits rounded down or up"),
    "warps": (WARPS_SHAPES, lambda *_: WARPS_VARIANTS, "row tiles and warps per program"),
    "wgmma": (WGMMA_SHAPES, lambda *_: WGMMA_VARIANTS, "64-row tiles (wgmma) where MLA is compute-bound"),
    "sweep": (SWEEP_SHAPES, lambda *_: SWEEP_VARIANTS, "8 warps and 16-row tiles over C and L"),
    "wave": (WAVE_SHAPES, lambda C, R, S, sms: wave_variants(C, R, sms),
             "16-row tiles in one resident wave past small C x L"),
}


def _run(a) -> None:
    import torch

    from perfmodel.kernels import tree_attention as ta

    from .ab_decode import Case

    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    shapes, variants, what = MODES[next((m for m in ("warps", "sweep", "wave", "wgmma") if getattr(a, m)), "rule")]
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
        if kind == "mla":  # the work the kernel computes (ta.mla_flops): its time at 1 PFLOP/s, a scale
            gflop = ta.mla_flops(C, q, L, H) / 1e9
            _p(f"flops {c.name}: {gflop:.1f} GFLOP = {gflop:.1f} us at 1000 TFLOP/s")
        vs = variants(C, R, L + q, num_sms)
        compare(c, {n: (c.fn(ta, **kw), c.kvs) for n, kw in vs.items()}, a, 17, gbps=True)
        del c
        torch.cuda.empty_cache()


def main(argv=None) -> None:
    _ab.main("ab_session16", __doc__, _run, argv,
             flags=(("--warps", "row tiles and warps per program"),
                    ("--wgmma", "64-row tiles at compute-bound MLA shapes"),
                    ("--sweep", "8 warps and 16-row tiles for many-head MLA and tree verification, over C and L"),
                    ("--wave", "16-row tiles in one resident wave past the small C x L plan")))


if __name__ == "__main__":
    main()
