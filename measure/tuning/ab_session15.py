"""A/B of the two-pass MLA decode (kernels/mla_two_pass.py) against the one-pass split kernel
(issue 19), on one GPU, in one call.

MLA with 64 heads at C=1 is the slowest decode attention shape (17 us at L=8192; goal 12): the
split kernel holds a 16-row tile's [16, 512] fp32 output beside its scores, runs at 255
registers and 2 programs per SM, and Nsight Compute finds it latency-bound. The two-pass variant
computes all 64 heads' scores per KV tile in one program (one wgmma-sized tile), then P . V in
column blocks over splits of tiles, then the same combine. Per shape:

- "default": `tree_attention_mla` as the wrapper runs it;
- "2pass": `mla_two_pass` with its defaults (128 output columns per program, about one program
  per SM);
- "2pass bn256" / "bn64": 256 or 64 output columns per program;
- "2pass x2": twice the default splits; "2pass w8": 8 warps per program.

Interleaved per round, timed as the attention bench times (CUDA graph over KV copies, cold L2:
`ab_decode._time`); every variant is checked against the torch reference on the GPU first.

--verify: tree-verify shapes instead (q = 4-65 query tokens per sequence), where the first run
found the two passes faster (64 heads, C=1, q=4, L=4096: 37.0 -> 27.3 us).

    python -m perfmodel.measure.tuning.ab_session15 [--rounds 3] [--warm] [--verify]
"""

from __future__ import annotations

import math

from . import _ab
from ._ab import p as _p
from .ab_session12 import compare

# (heads, C, q, L) of MLA cases
SHAPES = [(64, 1, 1, 8192), (64, 1, 1, 4096), (64, 1, 1, 1024), (8, 1, 1, 8192), (64, 2, 1, 4096),
          (64, 1, 4, 4096), (8, 8, 1, 8192)]
VERIFY_SHAPES = [(64, 1, 9, 4096), (64, 1, 17, 1024), (64, 1, 17, 8192), (64, 1, 65, 8192), (64, 2, 9, 8192),
                 (64, 8, 17, 8192), (64, 32, 17, 8192), (8, 1, 65, 8192), (8, 8, 17, 8192), (8, 32, 65, 4096)]


def _run(a) -> None:
    import torch

    from perfmodel.kernels import tree_attention as ta
    from perfmodel.kernels.mla_two_pass import mla_two_pass, two_pass_plan

    from .ab_decode import Case

    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    sm = 1.0 / math.sqrt(192)
    _p("\n## MLA decode, one pass against two, us per call (CUDA graph over KV copies, cold L2)")
    for H, C, q, L in (VERIFY_SHAPES if a.verify else SHAPES):
        c = Case("mla", H, C, q, L)
        d = two_pass_plan(C, q * H, L + q, 512, num_sms)
        _p(f"plan {c.name}: 2pass {C * d['row_blocks'] * d['n_tiles']} score programs, "
           f"{C * d['row_blocks'] * d['col_blocks'] * d['nsplit']} value programs ({d['nsplit']} splits of "
           f"{d['tiles_per_split']} tiles)")

        def two(c=c, **kw):
            return lambda ckv, kpe: mla_two_pass(c.ql, c.qr, ckv, kpe, c.mask, sm, **kw)

        runs = {"default": (c.fn(ta), c.kvs), "2pass": (two(), c.kvs), "2pass bn256": (two(block_n=256), c.kvs),
                "2pass bn64": (two(block_n=64), c.kvs), "2pass x2": (two(num_splits=2 * d["nsplit"]), c.kvs),
                "2pass w8": (two(num_warps=8), c.kvs)}
        compare(c, runs, a, 12)
        del c, runs
        torch.cuda.empty_cache()


def main(argv=None) -> None:
    _ab.main("ab_session15", __doc__, _run, argv, flags=(("--verify", "tree-verify shapes (q > 1)"),))


if __name__ == "__main__":
    main()
