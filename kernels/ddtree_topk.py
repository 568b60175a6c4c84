"""Vocabulary top-k as log-probs for the DDTree builders: for rows of logits [..., V], the
K largest entries (sorted descending; ties -> lower index first, as a stable argsort) as
log-probs (logit - logsumexp of the row) and their token ids, reading the logits once.

Triton path (CUDA, bf16/fp16/fp32), two kernels:
  1. grid (rows, ceil(V / CHUNK)): a program loads CHUNK logits as groups of G = 16 or 32
     consecutive tokens (whole 32-byte memory sectors of bf16), keeps each group's max, and
     selects the chunk's top min(K', CHUNK/G) groups by max (K' = next pow2 >= K) with
     tl.topk. It also stores the chunk's (max, sum exp(x - max)) for the logsumexp.
  2. grid (rows,): merges all chunks' group candidates with tl.topk into the row's top-K'
     groups, re-reads their K'*G logits (K' sectors) and selects the top-K' of those.
The top-K tokens lie in the K groups with the largest maxima: a group holding a top-K token
t has max >= t, and each group ranked above it holds a token above t, so at most K-1 groups
rank above it. Sorting G times fewer keys in stage 1 is what keeps it cheap (tl.topk is a
bitonic network: about log2(K')^2/2 compare-swaps per key).

Keys: int64 = (order-preserving int32 image of the fp32 value) << 32 | (2^32-1 - index), so
one signed integer comparison orders by value and then by LOWER index first; a group's key
is its max with the group index (groups are disjoint ranges, so this orders groups as
their best tokens' keys do). Padding is INT64_MIN, below every real key (-inf included).

Torch fallback (CPU tensors, fp64): torch.topk + torch.logsumexp in the promoted dtype.
"""
from __future__ import annotations

import torch

__all__ = ["vocab_topk_logprobs", "topk_config"]


def topk_config(V: int, k: int, chunk: int | None = None) -> dict:
    """Static sizes of the two kernels for a vocabulary V and k = min(B, V): group length G,
    chunk length, groups per chunk NGC, candidates per chunk KG, chunks NCH (NCHP padded),
    padded top-k KP, stage-2 candidate list NCAND (all powers of two except NCH), warps.

    Measured on an H200 (bf16, V = 163840, graph replay; C = 8 / 32 sequences x 15 rows):
    stage 1 is bound by each program's latency (its tl.topk is a chain of barriers), so
    for K' <= 64, G = 32 and 8192-token chunks (73 / 251 us at K' = 64, against 87 / 298
    with G = 16); for larger K', G = 16 (K'*G tokens re-read and sorted in stage 2) and
    16384-token chunks with 16 warps (212 / 641 us at K' = 256, against 250 / 858 with
    8192 and 8 warps). `chunk` overrides the chunk length (tests: many chunks at small V)."""
    import triton

    assert 1 <= k <= V, (k, V)
    kp = max(2, triton.next_power_of_2(k))  # tl.topk(x, 1) would reduce to a scalar
    g, default_chunk, warps = (32, 8192, 8) if kp <= 64 else (16, 16384, 16)
    chunk = max(g, min(chunk or default_chunk, triton.next_power_of_2(V)))
    ngc = chunk // g
    kg = min(kp, ngc)
    nch = triton.cdiv(V, chunk)
    return dict(G=g, CHUNK=chunk, NGC=ngc, KG=kg, NCH=nch, NCHP=triton.next_power_of_2(nch), KP=kp,
                NCAND=max(triton.next_power_of_2(nch * kg), kp), WARPS_CHUNK=min(warps, max(1, chunk // 512)))


def vocab_topk_logprobs(logits: torch.Tensor, k: int, impl: str | None = None, chunk: int | None = None):
    """logits [..., V] -> (log-probs [..., k] sorted descending, token ids [..., k] int64).

    impl: "triton" or "torch"; None picks Triton for CUDA tensors that are not fp64. Log-probs
    are fp32 on the Triton path and promote_types(dtype, fp32) on the torch path. No host
    sync and static shapes on the Triton path (CUDA-graph safe)."""
    if impl is None:
        impl = "triton" if logits.is_cuda and logits.dtype != torch.float64 else "torch"
    if impl == "torch":
        x = logits.to(torch.promote_types(logits.dtype, torch.float32))
        vals, ids = torch.topk(x, k, dim=-1)  # ties: CUDA and CPU topk both take the lower index
        return vals - torch.logsumexp(x, dim=-1, keepdim=True), ids
    assert impl == "triton", impl
    V = logits.shape[-1]
    rows = logits.reshape(-1, V)
    if rows.stride(-1) != 1:
        rows = rows.contiguous()
    R = rows.shape[0]
    cfg = topk_config(V, k, chunk)
    dev = logits.device
    gkeys = torch.empty((R, cfg["NCH"] * cfg["KG"]), dtype=torch.int64, device=dev)
    part_max = torch.empty((R, cfg["NCH"]), dtype=torch.float32, device=dev)
    part_sum = torch.empty((R, cfg["NCH"]), dtype=torch.float32, device=dev)
    lp = torch.empty((R, k), dtype=torch.float32, device=dev)
    ids = torch.empty((R, k), dtype=torch.int64, device=dev)
    kern = _kernels()
    kern.chunk[(R, cfg["NCH"])](rows, gkeys, part_max, part_sum, V, rows.stride(0), cfg["NCH"], G=cfg["G"],
                                NGC=cfg["NGC"], KG=cfg["KG"], num_warps=cfg["WARPS_CHUNK"])
    kern.merge[(R,)](rows, gkeys, part_max, part_sum, lp, ids, V, rows.stride(0), k, cfg["NCH"], G=cfg["G"],
                     KG=cfg["KG"], KP=cfg["KP"], NCAND=cfg["NCAND"], NCHP=cfg["NCHP"], num_warps=8)
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

        # The interpreter looks a kernel's callees up among its module's globals only (it
        # drops closures), so the helpers are published there.
        globals().update(_key=_key, _key_value=_key_value, _key_index=_key_index, _finite_or_zero=_finite_or_zero)

        @triton.jit
        def _chunk_topk_groups(x_ptr, gkey_ptr, pmax_ptr, psum_ptr, V, stride_r, NCH, G: tl.constexpr,
                               NGC: tl.constexpr, KG: tl.constexpr):
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
            top = tl.topk(_key(gmax, gid), KG)
            tl.store(gkey_ptr + (r * NCH + ch) * KG + tl.arange(0, KG), top)

        @triton.jit
        def _merge_topk(x_ptr, gkey_ptr, pmax_ptr, psum_ptr, lp_ptr, ids_ptr, V, stride_r, K, NCH,
                        G: tl.constexpr, KG: tl.constexpr, KP: tl.constexpr, NCAND: tl.constexpr,
                        NCHP: tl.constexpr):
            r = tl.program_id(0).to(tl.int64)
            ci = tl.arange(0, NCAND)
            cand = tl.load(gkey_ptr + r * NCH * KG + ci, mask=ci < NCH * KG, other=-(2**63))
            gid = _key_index(tl.topk(cand, KP))  # padding decodes to 2^32-1: past the vocabulary
            offs = gid[:, None] * G + tl.arange(0, G)[None, :]
            inside = offs < V
            x = tl.load(x_ptr + r * stride_r + offs, mask=inside, other=float("-inf")).to(tl.float32)
            ekey = tl.where(inside, _key(x, offs), -(2**63))
            top = tl.topk(tl.reshape(ekey, [KP * G]), KP)
            ch = tl.arange(0, NCHP)
            pm = tl.load(pmax_ptr + r * NCH + ch, mask=ch < NCH, other=float("-inf"))
            ps = tl.load(psum_ptr + r * NCH + ch, mask=ch < NCH, other=0.0)
            m = tl.max(pm, axis=0)
            lse = m + tl.log(tl.sum(ps * tl.exp(pm - _finite_or_zero(m)), axis=0))
            kk = tl.arange(0, KP)
            tl.store(lp_ptr + r * K + kk, _key_value(top) - lse, mask=kk < K)
            tl.store(ids_ptr + r * K + kk, _key_index(top), mask=kk < K)

        _KERNELS = types.SimpleNamespace(key=_key, key_value=_key_value, key_index=_key_index,
                                         chunk=_chunk_topk_groups, merge=_merge_topk)
    return _KERNELS
