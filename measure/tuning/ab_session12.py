"""A/B of session 12's decode attention questions (issue 19), on one GPU, in one call.

Does the KV cache's layout, not the kernel, hold GQA decode at C=1 below the read
ceiling?

The attention bench stores K and V per sequence as [S, Hkv, D] (NHD: a position's heads side by
side, as vLLM's paged cache holds a page), so one split program of one KV head reads 256-byte
pieces 2 KB apart. The same kernel takes any strides: here it also reads the same values laid out
[Hkv, S, D] (HND: each head's positions contiguous, as TensorRT-LLM's paged cache and
FlashInfer's HND layout hold a page), passed as a strided view. Also 128-position tiles in
either layout. Interleaved per round, timed as the attention bench times (CUDA graph over KV
copies, cold L2: `ab_decode._time`), at C=1, q=1 (the goal shapes) and at large shapes. Every
variant is checked against the torch reference on the GPU before it is timed.

Earlier versions of this tool timed ideas whose code is gone; their logs are in
runs/tuning/session12/, named by commit:
- dc9a88a, `--mla`: MLA decode with the split kernel's tile products swapped (`swap_qk`: the KV
  positions as the MMA's M, so that a 64-position tile fills a warpgroup MMA at 16 rows; the
  accumulator [512, rows]) against the default (rows as M: mma.sync at 16 rows), with split
  counts, tiles and warps around it, at C=1 and at large shapes;
- ae7200c, `--moe`: whether down's weight loads, issued while gate_up runs, slow gate_up's own
  (gate_up triggering down's launch after its K loop; down's programs sleeping 1-5 us before
  their first weight load);
- f0a32bd, `--epilogue`: the layer with gate_up's split-K epilogue cut to its fp32 atomic adds
  (no arrival, no activation: wrong results, timing only);
- d2bfbfb and e84fcd9, `--sums`: down making silu(gate) * up from gate_up's fp32 sums, which
  live in two halves picked by an epoch that down advances (gate_up without its arrival, its
  last-arrival read and its activation store), against gate_up making it; at e84fcd9 each also
  with down's K loop left out where K is one preloaded block.

`--gate-up`: the pair path's gate_up at one token (Kimi TP8 slice) with narrower column tiles,
fewer splits and fewer warps than the default (`GATE_UP_NARROW`): whether evening out the work
per SM (224 programs of 4 K-blocks on 132 SMs now) helps. The logs `gate_up_balance*_b18ac27.log`
ran these variants through `ab_session11.moe` from the command line, in two halves.

`--tiles`: the attention split kernel's per-tile work cut, with `full_tiles` (tiles wholly inside
the split and the prefix skip the visibility mask; the default for MLA at row tiles of <= 16
rows) on and off, at C=1 and at large shapes whose row tiles are 16 rows; with `--mid`, at the
C=8-32 shapes where GQA lost with it. At df58f91 it also timed `lazy_sum` (the softmax
denominators summed once after the loop: one cross-warp reduction less per tile), each and with
`full_tiles`; it was mixed (slower for MLA at C=1) and is gone.

    python -m perfmodel.measure.tuning.ab_session12 [--rounds 3] [--warm] [--gate-up] [--tiles [--mid]]
"""

from __future__ import annotations

from . import _ab
from ._ab import READ_GBPS
from ._ab import p as _p

# name -> (layout, tree_attention_gqa knobs)
VARIANTS = {
    "nhd": ("nhd", {}),
    "hnd": ("hnd", {}),
    "nhd bs128 st2": ("nhd", dict(block_s=128, num_stages=2)),
    "hnd bs128 st2": ("hnd", dict(block_s=128, num_stages=2)),
}
# (model, C, q, L)
SHAPES = [("llama", 1, 1, 1024), ("llama", 1, 1, 8192), ("llama", 1, 1, 32768),
          ("qwen", 1, 1, 1024), ("qwen", 1, 1, 8192), ("qwen", 1, 1, 32768),
          ("llama", 8, 1, 8192), ("qwen", 32, 1, 32768), ("llama", 32, 17, 8192)]


def hnd_copies(kvs):
    """The same K and V values stored [C, Hkv, S, D] (each head's positions contiguous), as
    [C, S, Hkv, D] views: what the kernel is given in the HND layout."""
    return [tuple(t.transpose(1, 2).contiguous().transpose(1, 2) for t in kv) for kv in kvs]


# --gate-up: name -> (kernels.moe_w4a16 constants, fused_moe_w4a16 keywords)
GATE_UP_NARROW = {"default": ({}, {})} | {
    n: ({}, dict(gate_up_config=c)) for n, c in {
        "bn32_s4": dict(block_n=32, split_k=4), "bn32_s4_w2": dict(block_n=32, split_k=4, num_warps=2),
        "bn32_s4_st4": dict(block_n=32, split_k=4, num_stages=4), "bn16_s2": dict(block_n=16, split_k=2),
        "bn16_s2_w2": dict(block_n=16, split_k=2, num_warps=2), "bn32_s8": dict(block_n=32, split_k=8),
        "bn64_s4_w8": dict(block_n=64, split_k=4, num_warps=8),
        "bn64_w2": dict(num_warps=2), "bn32_s8_w2": dict(block_n=32, split_k=8, num_warps=2),
        "bn32_s4_w1": dict(block_n=32, split_k=4, num_warps=1), "bn16_s4_w1": dict(block_n=16, split_k=4, num_warps=1),
        "bn16_s4_w2": dict(block_n=16, split_k=4, num_warps=2), "bn32_s14_w2": dict(block_n=32, split_k=14, num_warps=2),
        "bn32_s4_w2_st2": dict(block_n=32, split_k=4, num_warps=2, num_stages=2),
        "bn32_s4_w2_st4": dict(block_n=32, split_k=4, num_warps=2, num_stages=4),
    }.items()}


# --tiles: name -> knobs of both attention wrappers (its log at df58f91 also has lazy_sum); (kind, heads, C, q, L) of ab_decode.Case
TILE_VARIANTS = {
    "base": dict(full_tiles=False),
    "full": dict(full_tiles=True),
}
TILE_SHAPES = [("mla", 64, 1, 1, 1024), ("mla", 64, 1, 1, 8192), ("mla", 8, 1, 1, 1024), ("mla", 8, 1, 1, 8192),
               ("llama", 0, 1, 1, 1024), ("llama", 0, 1, 1, 8192), ("llama", 0, 1, 1, 32768),
               ("qwen", 0, 1, 1, 1024), ("qwen", 0, 1, 1, 8192),
               ("llama", 0, 8, 1, 8192), ("qwen", 0, 32, 1, 32768), ("mla", 8, 128, 1, 32768)]
# --tiles --mid: the shapes where measure_961abc3 was slower than session 11's run (another machine)
MID_SHAPES = [("qwen", 0, 8, 1, 4096), ("qwen", 0, 8, 1, 1024), ("qwen", 0, 8, 1, 8192), ("llama", 0, 8, 1, 1024),
              ("qwen", 0, 32, 1, 1024), ("llama", 0, 1, 17, 32768), ("mla", 8, 8, 1, 4096)]


def _check(c, name, fn, kvs, ref, extra="") -> bool:
    """Variant `name` (fn on the KV copy kvs[0]) against the torch reference on the GPU, printed;
    a variant that does not compile (full_tiles at 64-row tiles) is reported and fails."""
    from perfmodel.kernels._testing import calc_diff

    try:
        d = calc_diff(fn(*kvs[0]).float(), ref)
    except Exception as e:  # noqa: BLE001 -- report, skip
        _p(f"check {c.name} {name}: failed: {type(e).__name__}: {str(e)[:160]}")
        return False
    _p(f"check {c.name} {name}: {extra}calc_diff {d:.1e} ({'ok' if d < 1e-4 else 'FAIL'})")
    return d < 1e-4


def _interleaved(c, runs: dict, rounds: int) -> dict:
    """name -> its times (us) over `rounds` interleaved rounds of the variants runs: name -> (fn,
    its KV copies), timed as the attention bench times (`ab_decode._time`)."""
    from .ab_decode import _time

    res = {n: [] for n in runs}
    for _ in range(rounds):
        for n, (fn, kvs) in runs.items():
            c.kvs = kvs
            res[n].append(_time(fn, c))
    return res


def compare(c, runs: dict, a, width: int, gbps: bool = False, extra=None) -> None:
    """One shape's A/B: each variant (name -> (fn, its KV copies)) checked against the torch
    reference (`extra(fn, kvs)`: text for its check line); unless --warm, the passing ones timed
    over a.rounds interleaved rounds, one line each: its times, the best, and its share of the
    read ceiling (after its GB/s if gbps)."""
    ref = c.ref().float()
    runs = {n: r for n, r in runs.items() if _check(c, n, *r, ref, extra(*r) if extra else "")}
    if a.warm:
        return
    nb = c.nbytes()
    for n, ts in _interleaved(c, runs, a.rounds).items():
        rate = f"{nb / min(ts) / 1e3:5.0f} GB/s = " if gbps else ""
        _p(f"{c.name:26s} {n:{width}s} {' '.join(f'{x:7.1f}' for x in ts)} | best {min(ts):7.1f} us, "
           f"{rate}{100 * nb / min(ts) / 1e3 / READ_GBPS:3.0f}% of read")


def tiles(a) -> None:
    import torch

    from perfmodel.kernels import tree_attention as ta

    from .ab_decode import Case

    _p("\n## attention split kernel's per-tile work, us per call (CUDA graph over KV copies, cold L2), per round")
    for kind, H, C, q, L in (MID_SHAPES if a.mid else TILE_SHAPES):
        c = Case(kind, H, C, q, L)
        compare(c, {n: (c.fn(ta, **kw), c.kvs) for n, kw in TILE_VARIANTS.items()}, a, 10)
        del c
        torch.cuda.empty_cache()


def _run(a) -> None:
    if a.tiles:
        tiles(a)
        return
    if a.gate_up:
        from . import ab_session11

        ab_session11.PLAN = [("kimi_tp8", 1)]
        ab_session11.moe(a.rounds, a.warm, GATE_UP_NARROW, ("default", "bn32_s8_w2"))
        return
    import torch

    from perfmodel.kernels import tree_attention as ta

    from .ab_decode import Case

    _p("\n## GQA decode attention, us per call (CUDA graph over KV copies, cold L2), per round")
    for model, C, q, L in SHAPES:
        c = Case(model, 0, C, q, L)
        layouts = {"nhd": c.kvs, "hnd": hnd_copies(c.kvs)}
        compare(c, {n: (c.fn(ta, **kw), layouts[lay]) for n, (lay, kw) in VARIANTS.items()}, a, 14, gbps=True,
                extra=lambda fn, kvs: f"strides {tuple(kvs[0][0].stride())} ")
        del c, layouts
        torch.cuda.empty_cache()


def main(argv=None) -> None:
    _ab.main("ab_session12", __doc__, _run, argv,
             flags=(("--gate-up", "gate_up's narrower tiles, fewer splits and warps (GATE_UP_NARROW)"),
                    ("--tiles", "the attention split kernel's per-tile work cut (TILE_VARIANTS)"),
                    ("--mid", "with --tiles: MID_SHAPES instead of TILE_SHAPES")))


if __name__ == "__main__":
    main()
