"""Vocabulary top-k as log-probs for the DDTree builders: for rows of logits [..., V], the
K largest entries (sorted descending; ties -> lower index first, as a stable argsort) as
log-probs (logit - logsumexp of the row) and their token ids, reading the logits once.

Triton path (CUDA, bf16/fp16/fp32), two kernels and no sorting network over the vocabulary:
  1. grid (rows, ceil(V / CHUNK)): a program streams CHUNK logits as groups of G = 32
     consecutive tokens (whole memory sectors), stores each group's max, and the chunk's
     (max, sum exp(x - max)) for the logsumexp. A pure streaming pass.
  2. grid (rows,): selects the row's top-K' groups by max (K' = next pow2 >= K) with
     _compact_top, re-reads their K'*G logits (K' runs of 64 bytes), selects the top-K' of
     those, ranks them (_rank_desc) and writes the first K in descending order.
The top-K tokens lie in the K groups with the largest maxima: a group holding a top-K token
t has max >= t, and each group ranked above it holds a token above t, so at most K-1 groups
rank above it.

Selection without a sort (_compact_top): a bisection on the keys' upper 32 bits (block-wide
counts, at most 32, started from the smallest of K' bucket maxima) finds the value image t of the
K'-th largest key; the keys above t and the first ones equal to t (in array order, which
every caller lays out as index order, i.e. key order among equal values) are compacted with
a prefix sum into a per-program scratch row. _rank_desc ranks the K' survivors by counting
the larger ones. This replaced tl.topk (a bitonic network: about log2(N)^2/2 dependent
compare-exchange stages over all N keys), which made both kernels latency-bound.

Keys: int64 = (order-preserving int32 image of the fp32 value) << 32 | (2^32-1 - index), so
one signed integer comparison orders by value and then by LOWER index first; a group's key
is its max with the group index (groups are disjoint ranges, so this orders groups as
their best tokens' keys do). Padding is INT64_MIN, below every real key (-inf included).

Torch path (CPU tensors, fp64, and k too large for the Triton selection): a stable
descending torch.sort + torch.logsumexp in the promoted dtype.
"""
from __future__ import annotations

import torch

from ._launch import cdiv, next_pow2

__all__ = ["vocab_topk_logprobs", "topk_config"]


# Largest register-resident selection (keys per program) the merge kernel is built for.
MAX_SELECT = 16384


def topk_config(V: int, k: int, chunk: int | None = None) -> dict | None:
    """Static sizes of the two kernels for a vocabulary V and k = min(B, V): group length G,
    chunk length, groups per chunk NGC, groups NG (NGP padded to a power of two >= KP),
    chunks NCH (NCHP padded), padded top-k KP, rank chunk CH, warps. None when the
    selection would not fit in registers (k beyond a few hundred at Kimi's vocabulary):
    vocab_topk_logprobs then takes the torch path. `chunk` overrides the chunk length
    (tests: many chunks at small V).

    H200, bf16, V = 163840, C = 8 sequences x 15 rows, graph replay: 41 / 46 / 68 us at
    k = 64 / 128 / 256, against 73 / - / 212 with tl.topk in both kernels and 46 / 51 / 79
    with a fixed 32-step bisection. Counting 2^b - 1 thresholds per step as one [N, 2^b]
    reduction instead (b = 1..3) is 2.6-11x slower (evidence/kernel-defaults/ddtree-builder/)."""
    assert 1 <= k <= V, (k, V)
    kp = max(2, next_pow2(k))  # the helpers work on powers of two >= 2
    g = 32 if kp <= 256 else 16  # K'*G logits re-read and selected in the merge
    chunk = max(g, min(chunk or 8192, next_pow2(V)))
    ng = cdiv(V, g)
    ngp = max(next_pow2(ng), kp)
    n_sel = max(ngp, kp * g)  # keys per merge program: the groups, then the K' groups' tokens
    if n_sel > MAX_SELECT:
        return None
    nch = cdiv(V, chunk)
    return dict(G=g, CHUNK=chunk, NGC=chunk // g, NG=ng, NGP=ngp, NCH=nch, NCHP=next_pow2(nch), KP=kp,
                CH=min(kp, 32), WARPS_CHUNK=min(8, max(1, chunk // 512)), WARPS_MERGE=8 if n_sel <= 8192 else 16)


def vocab_topk_logprobs(logits: torch.Tensor, k: int, impl: str | None = None, chunk: int | None = None):
    """logits [..., V] -> (log-probs [..., k] sorted descending, token ids [..., k] int64).

    impl: "triton" or "torch"; None picks Triton for CUDA tensors that are not fp64. Log-probs
    are fp32 on the Triton path and promote_types(dtype, fp32) on the torch path. No host
    sync and static shapes on the Triton path (CUDA-graph safe)."""
    if impl is None:
        impl = "triton" if logits.is_cuda and logits.dtype != torch.float64 else "torch"
    V = logits.shape[-1]
    cfg = topk_config(V, k, chunk) if impl == "triton" else None
    if impl == "torch" or cfg is None:
        x = logits.to(torch.promote_types(logits.dtype, torch.float32))
        vals, ids = torch.sort(x, dim=-1, descending=True, stable=True)  # ties -> lower index (topk: unspecified)
        vals, ids = vals[..., :k], ids[..., :k]
        lp = vals - torch.logsumexp(x, dim=-1, keepdim=True)
        return (lp, ids) if impl == "torch" else (lp.float(), ids)
    assert impl == "triton", impl
    rows = logits.reshape(-1, V)
    if rows.stride(-1) != 1:
        rows = rows.contiguous()
    R = rows.shape[0]
    dev = logits.device
    gmax = torch.empty((R, cfg["NG"]), dtype=torch.float32, device=dev)
    part_max = torch.empty((R, cfg["NCH"]), dtype=torch.float32, device=dev)
    part_sum = torch.empty((R, cfg["NCH"]), dtype=torch.float32, device=dev)
    scratch = torch.empty((R, cfg["KP"]), dtype=torch.int64, device=dev)
    lp = torch.empty((R, k), dtype=torch.float32, device=dev)
    ids = torch.empty((R, k), dtype=torch.int64, device=dev)
    kern = _kernels()
    kern.chunk[(R, cfg["NCH"])](rows, gmax, part_max, part_sum, V, rows.stride(0), cfg["NCH"], cfg["NG"], G=cfg["G"],
                                NGC=cfg["NGC"], num_warps=cfg["WARPS_CHUNK"])
    kern.merge[(R,)](rows, gmax, part_max, part_sum, lp, ids, scratch, V, rows.stride(0), k, cfg["NCH"], cfg["NG"],
                     G=cfg["G"], NGP=cfg["NGP"], KP=cfg["KP"], NCHP=cfg["NCHP"], CH=cfg["CH"],
                     num_warps=cfg["WARPS_MERGE"])
    return lp.reshape(*logits.shape[:-1], k), ids.reshape(*logits.shape[:-1], k)


# ------------------------------------------------------------------------------ Triton
# Built on first use, so that a test can set TRITON_INTERPRET=1 before anything is jitted.
_KERNELS = None


def _kernels():
    """The jit functions: key helpers (shared with the tree kernels in ddtree.py) and the
    two top-k kernels. _key(v fp32, idx) -> int64 key; _key_value / _key_index invert it."""
    global _KERNELS
    if _KERNELS is None:
        import types

        import triton
        import triton.language as tl

        @triton.jit
        def _key(v, idx):
            bits = v.to(tl.int32, bitcast=True)
            img = bits ^ ((bits >> 31) & 0x7FFFFFFF)  # negative floats: reverse their order
            return (img.to(tl.int64) << 32) | (0xFFFFFFFF - idx.to(tl.int64))

        @triton.jit
        def _key_value(k):
            img = (k >> 32).to(tl.int32)
            return (img ^ ((img >> 31) & 0x7FFFFFFF)).to(tl.float32, bitcast=True)

        @triton.jit
        def _key_index(k):
            return 0xFFFFFFFF - (k & 0xFFFFFFFF)

        @triton.jit
        def _finite_or_zero(m):  # a max to subtract before exp: 0 for all -inf (no nan)
            return tl.where(m > float("-inf"), m, 0.0)

        @triton.jit
        def _compact_top(keys, scr, N: tl.constexpr, KP: tl.constexpr):
            """keys int64 [N], N >= KP: writes the KP largest to scr[0:KP] and returns them,
            in array order (not sorted). Keys equal in their upper 32 bits are taken in
            array order, so callers lay keys out in index order (keys unique but padding)."""
            hv = keys >> 32  # the value image, signed
            # count(hv >= lo) >= KP: the smallest of KP bucket maxima (any partition will do)
            lo = tl.min(tl.max(tl.reshape(hv, [KP, N // KP], can_reorder=True), 1), 0)
            hi = tl.max(hv, 0) + 1  # count(hv >= hi) = 0
            while hi - lo > 1:  # at most 32 halvings, fewer from the tight lower bound
                mid = lo + ((hi - lo) >> 1)
                enough = tl.sum((hv >= mid).to(tl.int32), 0) >= KP
                lo = tl.where(enough, mid, lo)
                hi = tl.where(enough, hi, mid)
            gt = hv > lo
            eq = hv == lo
            need = KP - tl.sum(gt.to(tl.int32), 0)
            sel = gt | (eq & (tl.cumsum(eq.to(tl.int32), 0) <= need))
            pos = tl.cumsum(sel.to(tl.int32), 0) - 1
            tl.debug_barrier()  # earlier readers of scr are done
            tl.store(scr + pos, keys, mask=sel)
            tl.debug_barrier()
            return tl.load(scr + tl.arange(0, KP), cache_modifier=".cg")

        @triton.jit
        def _rank_desc(ck, scr, KP: tl.constexpr, CH: tl.constexpr):
            """ck [KP] as _compact_top left it in scr: each key's rank in descending order
            (equal keys, i.e. padding, by position), CH columns at a time."""
            i = tl.arange(0, KP)
            rank = tl.zeros([KP], tl.int32)
            for c0 in tl.static_range(0, KP, CH):
                jj = c0 + tl.arange(0, CH)
                kj = tl.load(scr + jj, cache_modifier=".cg")
                above = (kj[None, :] > ck[:, None]) | ((kj[None, :] == ck[:, None]) & (jj[None, :] < i[:, None]))
                rank += tl.sum(above.to(tl.int32), 1)
            return rank

        # The interpreter looks a kernel's callees up among its module's globals only (it
        # drops closures), so the helpers are published there.
        globals().update(_key=_key, _key_value=_key_value, _key_index=_key_index, _finite_or_zero=_finite_or_zero,
                         _compact_top=_compact_top, _rank_desc=_rank_desc)

        @triton.jit
        def _chunk_group_max(x_ptr, gmax_ptr, pmax_ptr, psum_ptr, V, stride_r, NCH, NG, G: tl.constexpr,
                             NGC: tl.constexpr):
            r = tl.program_id(0).to(tl.int64)
            ch = tl.program_id(1)
            gid = ch * NGC + tl.arange(0, NGC)  # global group ids
            offs = gid[:, None] * G + tl.arange(0, G)[None, :]
            x = tl.load(x_ptr + r * stride_r + offs, mask=offs < V, other=float("-inf")).to(tl.float32)
            gmax = tl.max(x, axis=1)
            gsum = tl.sum(tl.exp(x - _finite_or_zero(gmax)[:, None]), axis=1)
            m = tl.max(gmax, axis=0)
            s = tl.sum(gsum * tl.exp(gmax - _finite_or_zero(m)), axis=0)
            tl.store(pmax_ptr + r * NCH + ch, m)
            tl.store(psum_ptr + r * NCH + ch, s)
            tl.store(gmax_ptr + r * NG + gid, gmax, mask=gid < NG)

        @triton.jit
        def _merge_topk(x_ptr, gmax_ptr, pmax_ptr, psum_ptr, lp_ptr, ids_ptr, scr_ptr, V, stride_r, K, NCH, NG,
                        G: tl.constexpr, NGP: tl.constexpr, KP: tl.constexpr, NCHP: tl.constexpr, CH: tl.constexpr):
            r = tl.program_id(0).to(tl.int64)
            scr = scr_ptr + r * KP
            gi = tl.arange(0, NGP)
            gm = tl.load(gmax_ptr + r * NG + gi, mask=gi < NG, other=float("-inf"))
            gkey = tl.where(gi < NG, _key(gm, gi), -(2**63))
            gid = _key_index(_compact_top(gkey, scr, NGP, KP))  # ascending; padding decodes past V
            offs = gid[:, None] * G + tl.arange(0, G)[None, :]  # so token order = array order
            inside = offs < V
            x = tl.load(x_ptr + r * stride_r + offs, mask=inside, other=float("-inf")).to(tl.float32)
            ekey = tl.where(inside, _key(x, offs), -(2**63))
            top = _compact_top(tl.reshape(ekey, [KP * G]), scr, KP * G, KP)
            rank = _rank_desc(top, scr, KP, CH)
            ch = tl.arange(0, NCHP)
            pm = tl.load(pmax_ptr + r * NCH + ch, mask=ch < NCH, other=float("-inf"))
            ps = tl.load(psum_ptr + r * NCH + ch, mask=ch < NCH, other=0.0)
            m = tl.max(pm, axis=0)
            lse = m + tl.log(tl.sum(ps * tl.exp(pm - _finite_or_zero(m)), axis=0))
            tl.store(lp_ptr + r * K + rank, _key_value(top) - lse, mask=rank < K)
            tl.store(ids_ptr + r * K + rank, _key_index(top), mask=rank < K)

        _KERNELS = types.SimpleNamespace(key=_key, key_value=_key_value, key_index=_key_index,
                                         compact_top=_compact_top, rank_desc=_rank_desc,
                                         chunk=_chunk_group_max, merge=_merge_topk)
    return _KERNELS
