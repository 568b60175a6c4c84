"""Absorbed MLA decode for many heads at small C x L, in two passes over the KV tiles (issue 19).

The one-pass split kernel (`tree_attention.py`) holds a row tile's [rows, 512] fp32 output
while it computes the scores. At 64 heads and C=1 that leaves 16-row tiles (four programs read
each latent tile) and 255 registers, 2 programs per SM: Nsight Compute finds it latency-bound
at 14% of DRAM throughput (runs/tuning/session12/). Here the two products run in separate
kernels, each holding one small accumulator:

1. scores: one program per (sequence, 64-row block, KV tile of 64 positions). It computes
   S = q_latent . ckv^T + q_rope . kpe^T for all 64 rows (one wgmma-sized tile; each latent tile
   is read once), masks it, and stores P = exp2(S - m) in bf16 with the row max m and sum l.
2. values: one program per (sequence, row block, 128 output columns, split of KV tiles). It
   rescales each tile's P to the split's max, accumulates P . ckv[:, columns] (ckv is an L2 hit
   after pass 1), and writes the split's normalised o and lse in the split kernel's layout.

`tree_attention`'s combine then merges the splits. Passes 2 and 3 are dependent launches
(PDL) where available. Same inputs and result as `tree_attention_mla`
(`tree_attention_mla_reference`).
"""
from __future__ import annotations

import torch

from ._launch import cdiv, facts_of, interpreting, next_pow2

__all__ = ["mla_two_pass", "two_pass_plan"]

BLOCK_R = 64  # rows (query tokens x heads) per program: one wgmma M tile
BLOCK_S = 64  # KV positions per tile

_KERNELS = None


def _get_kernels():
    global _KERNELS
    if _KERNELS is not None:
        return _KERNELS
    import triton
    import triton.language as tl

    @triton.jit
    def _scores_kernel(q_ptr, qpe_ptr, k_ptr, kpe_ptr, mask_ptr, p_ptr, m_ptr, l_ptr,
                       L, S, R, RB, n_tiles, sm_scale,
                       sq_c, sq_i, sq_h, sqp_c, sqp_i, sqp_h, sk_c, sk_s, skp_c, skp_s, sm_c, sm_i,
                       H: tl.constexpr, DK: tl.constexpr, DPE: tl.constexpr,
                       BLOCK_R: tl.constexpr, BLOCK_S: tl.constexpr, DOT_F32: tl.constexpr, PDL: tl.constexpr):
        if PDL:  # the values pass may launch now; it waits for this grid's writes
            tl.extra.cuda.gdc_launch_dependents()
        pid = tl.program_id(0)
        t = tl.program_id(1)
        c = (pid // RB).to(tl.int64)
        rb = pid % RB
        r_loc = tl.arange(0, BLOCK_R)
        rows = rb * BLOCK_R + r_loc
        row_ok = rows < R
        qi = tl.where(row_ok, rows // H, 0)
        head = rows % H
        dk = tl.arange(0, DK)
        dp = tl.arange(0, DPE)
        offs = t * BLOCK_S + tl.arange(0, BLOCK_S)
        s_ok = offs < S
        q = tl.load(q_ptr + c * sq_c + qi[:, None] * sq_i + head[:, None] * sq_h + dk[None, :],
                    mask=row_ok[:, None], other=0.0)
        qp = tl.load(qpe_ptr + c * sqp_c + qi[:, None] * sqp_i + head[:, None] * sqp_h + dp[None, :],
                     mask=row_ok[:, None], other=0.0)
        k = tl.load(k_ptr + c * sk_c + offs[:, None] * sk_s + dk[None, :], mask=s_ok[:, None], other=0.0)
        kp = tl.load(kpe_ptr + c * skp_c + offs[:, None] * skp_s + dp[None, :], mask=s_ok[:, None], other=0.0)
        if DOT_F32:
            q, qp, k, kp = q.to(tl.float32), qp.to(tl.float32), k.to(tl.float32), kp.to(tl.float32)
        sc = tl.dot(q, tl.trans(k))
        sc = tl.dot(qp, tl.trans(kp), sc)
        vis = (row_ok[:, None] | True) & s_ok[None, :] & (offs[None, :] < L)
        if t * BLOCK_S + BLOCK_S > L:  # the tile reaches the tree tokens
            j = offs - L
            t_ok = (j >= 0) & s_ok
            tm = tl.load(mask_ptr + c * sm_c + qi[:, None] * sm_i + tl.where(t_ok, j, 0)[None, :],
                         mask=row_ok[:, None] & t_ok[None, :], other=0)
            vis = vis | (tm != 0)
        sc = tl.where(vis, sc * (sm_scale * 1.4426950408889634), float("-inf"))  # exp2 domain
        m = tl.max(sc, 1)
        p = tl.exp2(sc - tl.where(m == float("-inf"), 0.0, m)[:, None])
        base = (c * RB + rb) * n_tiles + t
        tl.store(p_ptr + (base * BLOCK_R + r_loc[:, None]) * BLOCK_S + tl.arange(0, BLOCK_S)[None, :],
                 p.to(p_ptr.dtype.element_ty))
        tl.store(m_ptr + base * BLOCK_R + r_loc, m)
        tl.store(l_ptr + base * BLOCK_R + r_loc, tl.sum(p, 1))

    @triton.jit
    def _values_kernel(p_ptr, m_ptr, l_ptr, v_ptr, o_ptr, lse_ptr,
                       S, R, RB, n_tiles, tiles_per_split,
                       sv_c, sv_s, so_c, so_p, so_r, sl_c, sl_p,
                       BLOCK_R: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_N: tl.constexpr, TPS: tl.constexpr,
                       DOT_F32: tl.constexpr, PDL: tl.constexpr):
        if PDL:  # let the combine launch now, then wait for the scores pass
            tl.extra.cuda.gdc_launch_dependents()
            tl.extra.cuda.gdc_wait()
        pid = tl.program_id(0)
        pid_n = tl.program_id(1)
        pid_p = tl.program_id(2)
        c = (pid // RB).to(tl.int64)
        rb = pid % RB
        r_loc = tl.arange(0, BLOCK_R)
        rows = rb * BLOCK_R + r_loc
        row_ok = rows < R
        s_loc = tl.arange(0, BLOCK_S)
        cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        t0 = pid_p * tiles_per_split
        n_here = tl.minimum(tiles_per_split, n_tiles - t0)
        base = (c * RB + rb) * n_tiles
        # the split's row max and sum over its tiles' (m, l)
        tt = tl.arange(0, TPS)
        t_ok = tt < n_here
        mt = tl.load(m_ptr + (base + t0 + tt)[:, None] * BLOCK_R + r_loc[None, :], mask=t_ok[:, None],
                     other=float("-inf"))
        lt = tl.load(l_ptr + (base + t0 + tt)[:, None] * BLOCK_R + r_loc[None, :], mask=t_ok[:, None], other=0.0)
        m_split = tl.max(mt, 0)
        m_safe = tl.where(m_split == float("-inf"), 0.0, m_split)
        l_split = tl.sum(lt * tl.exp2(mt - m_safe[None, :]), 0)
        acc = tl.zeros((BLOCK_R, BLOCK_N), dtype=tl.float32)
        for i in range(0, n_here):
            t = t0 + i
            scale = tl.exp2(tl.load(m_ptr + (base + t) * BLOCK_R + r_loc) - m_safe)
            p = tl.load(p_ptr + ((base + t) * BLOCK_R + r_loc[:, None]) * BLOCK_S + s_loc[None, :]).to(tl.float32)
            offs = t * BLOCK_S + s_loc
            v = tl.load(v_ptr + c * sv_c + offs[:, None] * sv_s + cols[None, :], mask=(offs < S)[:, None], other=0.0)
            if DOT_F32:
                acc = tl.dot(p * scale[:, None], v.to(tl.float32), acc)
            else:
                acc = tl.dot((p * scale[:, None]).to(v.dtype), v, acc)
        l_safe = tl.where(l_split == 0.0, 1.0, l_split)
        o = acc / l_safe[:, None]
        tl.store(o_ptr + c * so_c + pid_p * so_p + rows[:, None] * so_r + cols[None, :], o, mask=row_ok[:, None])
        if pid_n == 0:
            lse = tl.where(l_split == 0.0, float("-inf"), m_split + tl.log2(l_safe))  # log2 domain
            tl.store(lse_ptr + c * sl_c + pid_p * sl_p + rows, lse, mask=row_ok)

    _KERNELS = (_scores_kernel, _values_kernel)
    return _KERNELS


def two_pass_plan(C: int, R: int, S: int, dv: int = 512, num_sms: int = 132, *, block_n: int | None = None,
                  num_splits: int | None = None) -> dict:
    """Row blocks, KV tiles, the values pass's column block (128 columns by default) and splits
    (by default about one program per SM over row blocks x column blocks x splits), and the
    tiles per split."""
    rb = cdiv(R, BLOCK_R)
    n_tiles = cdiv(S, BLOCK_S)
    block_n = block_n or 128
    if dv % block_n or block_n & (block_n - 1):
        raise ValueError(f"block_n={block_n}: expected a power of two dividing {dv}")
    col_blocks = dv // block_n
    splits = num_splits or max(1, num_sms // (C * rb * col_blocks))
    splits = max(1, min(splits, n_tiles))
    tps = cdiv(n_tiles, splits)
    splits = cdiv(n_tiles, tps)
    return dict(row_blocks=rb, n_tiles=n_tiles, block_n=block_n, col_blocks=col_blocks, nsplit=splits,
                tiles_per_split=tps)


def mla_two_pass(q_latent, q_rope, ckv, kpe, tree_mask, sm_scale, *, block_n=None, num_splits=None,
                 num_warps=4, num_stages=2, pdl=None) -> torch.Tensor:
    """Same contract as `tree_attention.tree_attention_mla`: q_latent [C,Q,H,512], q_rope
    [C,Q,H,64], ckv [C,S,512], kpe [C,S,64], tree_mask bool [C,Q,Q] -> [C,Q,H,512]."""
    from .tree_attention import COMBINE_ONE_PASS, PDL_DEFAULT, _get_combine

    C, Q, H, DK = q_latent.shape
    S, DPE = ckv.shape[1], q_rope.shape[-1]
    L, R = S - Q, Q * H
    interpret = interpreting()
    facts = facts_of(q_latent.device)
    num_sms = facts.num_sms if facts else 132
    pdl = (PDL_DEFAULT if pdl is None else pdl) and facts is not None and not interpret and facts.cc_major >= 9
    d = two_pass_plan(C, R, S, DK, num_sms, block_n=block_n, num_splits=num_splits)
    rb, n_tiles, nsplit = d["row_blocks"], d["n_tiles"], d["nsplit"]
    dev = q_latent.device
    p = torch.empty((C * rb * n_tiles, BLOCK_R, BLOCK_S), dtype=torch.bfloat16, device=dev)
    m = torch.empty((C * rb * n_tiles, BLOCK_R), dtype=torch.float32, device=dev)
    lsum = torch.empty_like(m)
    o = torch.empty((C, 1, nsplit, R, DK), dtype=torch.float32, device=dev)
    lse = torch.empty((C, 1, nsplit, R), dtype=torch.float32, device=dev)
    out = torch.empty((C, Q, H, DK), dtype=q_latent.dtype, device=dev)
    mask = tree_mask.view(torch.int8) if tree_mask.dtype == torch.bool and tree_mask.is_contiguous() \
        else tree_mask.to(torch.int8).contiguous()
    for t in (q_latent, q_rope, ckv, kpe):
        assert t.stride(-1) == 1, "last dim must be contiguous"
    scores, values = _get_kernels()
    scores[(C * rb, n_tiles)](
        q_latent, q_rope, ckv, kpe, mask, p, m, lsum, L, S, R, rb, n_tiles, float(sm_scale),
        q_latent.stride(0), q_latent.stride(1), q_latent.stride(2), q_rope.stride(0), q_rope.stride(1),
        q_rope.stride(2), ckv.stride(0), ckv.stride(1), kpe.stride(0), kpe.stride(1), mask.stride(0), mask.stride(1),
        H=H, DK=DK, DPE=DPE, BLOCK_R=BLOCK_R, BLOCK_S=BLOCK_S, DOT_F32=interpret, PDL=pdl, num_warps=num_warps)
    values[(C * rb, d["col_blocks"], nsplit)](
        p, m, lsum, ckv, o, lse, S, R, rb, n_tiles, d["tiles_per_split"],
        ckv.stride(0), ckv.stride(1), o.stride(0), o.stride(2), o.stride(3), lse.stride(0), lse.stride(2),
        BLOCK_R=BLOCK_R, BLOCK_S=BLOCK_S, BLOCK_N=d["block_n"], TPS=max(2, next_pow2(d["tiles_per_split"])),
        DOT_F32=interpret, PDL=pdl, num_warps=num_warps, num_stages=num_stages, **({"launch_pdl": True} if pdl else {}))
    # the split kernel's combine, as tree_attention launches it
    block_d = DK
    while block_d > 32 and C * R * (DK // block_d) < 4 * num_sms:
        block_d //= 2
    block_p = min(next_pow2(nsplit), max(2, 8192 // block_d))
    tile = block_p * block_d
    _get_combine()[(C, R, DK // block_d)](
        o, lse, out, nsplit, R, 1, o.stride(0), o.stride(1), o.stride(2), o.stride(3),
        lse.stride(0), lse.stride(1), lse.stride(2), out.stride(0), out.stride(1), out.stride(2),
        G=H, BLOCK_D=block_d, BLOCK_P=max(2, block_p), PDL=pdl,
        ONE_PASS=COMBINE_ONE_PASS and nsplit <= block_p and block_p <= 64,
        num_warps=8 if tile >= 8192 else 4 if tile >= 2048 else 2, launch_pdl=pdl)
    return out
