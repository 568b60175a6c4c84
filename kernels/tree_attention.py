"""Tree-verify decode attention (GQA and absorbed MLA), split-KV / flash-decoding.

C sequences each verify Q tree tokens over an L-token KV prefix. K/V hold S = L + Q
positions, the last Q being the tree. Query i sees every prefix position p < L, and tree
position L+j iff tree_mask[c, i, j] (ancestor-or-self). Q=1 with [[True]] is plain decode.

Kernel shape: one program per (sequence, KV head, row block, KV split). A program's rows are
all (query token, query head of this KV group) pairs -> Q*G rows (G = Hq/Hkv; for MLA the one
latent head is shared by all H heads, G = H), so each KV tile is loaded once and used by
every row: the prefix is read once per (sequence, kv head) when Q*G <= block_r. Splits along
S write (o, lse) partials in fp32, merged by a log-sum-exp combine.

Bytes (bf16, 2 B): GQA  q in + out: 2*C*Q*Hq*D*2; K,V: 2*C*S*Hkv*D*2.
                   MLA  q in: C*Q*H*(512+64)*2, out: C*Q*H*512*2; ckv+kpe: C*S*(512+64)*2.
FLOPs (2/MAC; tree masking not subtracted, matches what the kernel computes):
                   GQA  4*C*Q*Hq*S*D;  MLA  2*C*Q*H*S*(576 + 512).
"""
from __future__ import annotations

import itertools
import math
from typing import NamedTuple

import torch

from ._launch import FastLauncher, cdiv, device_facts, facts_of, interpreting, next_pow2

__all__ = [
    "tree_attention_gqa",
    "tree_attention_gqa_reference",
    "tree_attention_mla",
    "tree_attention_mla_reference",
    "gqa_bytes_moved",
    "gqa_flops",
    "mla_bytes_moved",
    "mla_flops",
    "default_config",
]


# ------------------------------------------------------------------------------ reference
def _visibility(tree_mask: torch.Tensor, L: int) -> torch.Tensor:
    """[C, Q, S] bool: prefix always visible, tree part from the ancestor-or-self mask."""
    C, Q, _ = tree_mask.shape
    prefix = torch.ones((C, Q, L), dtype=torch.bool, device=tree_mask.device)
    return torch.cat([prefix, tree_mask.bool()], dim=2)


def tree_attention_gqa_reference(q, k, v, tree_mask, sm_scale=None) -> torch.Tensor:
    C, Q, Hq, D = q.shape
    S, Hkv = k.shape[1], k.shape[2]
    G = Hq // Hkv
    scale = sm_scale if sm_scale is not None else 1.0 / math.sqrt(D)
    kf = k.float().repeat_interleave(G, dim=2)  # [C, S, Hq, D]
    vf = v.float().repeat_interleave(G, dim=2)
    s = torch.einsum("cqhd,cshd->chqs", q.float(), kf) * scale
    vis = _visibility(tree_mask, S - Q)[:, None]  # [C, 1, Q, S]
    p = torch.softmax(s.masked_fill(~vis, float("-inf")), dim=-1)
    return torch.einsum("chqs,cshd->cqhd", p, vf).to(q.dtype)


def tree_attention_mla_reference(q_latent, q_rope, ckv, kpe, tree_mask, sm_scale) -> torch.Tensor:
    C, Q, H, _ = q_latent.shape
    S = ckv.shape[1]
    s = torch.einsum("cqhd,csd->chqs", q_latent.float(), ckv.float())
    s = (s + torch.einsum("cqhd,csd->chqs", q_rope.float(), kpe.float())) * sm_scale
    vis = _visibility(tree_mask, S - Q)[:, None]
    p = torch.softmax(s.masked_fill(~vis, float("-inf")), dim=-1)
    return torch.einsum("chqs,csd->cqhd", p, ckv.float()).to(q_latent.dtype)


# ------------------------------------------------------------------------------ kernel
_KERNEL = None


def _get_kernel():
    global _KERNEL
    if _KERNEL is not None:
        return _KERNEL
    import triton
    import triton.language as tl

    @triton.jit
    def _tree_attn_kernel(
        q_ptr, qpe_ptr, k_ptr, kpe_ptr, v_ptr, mask_ptr, o_ptr, lse_ptr,
        L, S, R, HKV, split_len, sm_scale,
        sq_c, sq_i, sq_h, sqp_c, sqp_i, sqp_h,
        sk_c, sk_s, sk_h, skp_c, skp_s, sv_c, sv_s, sv_h,
        sm_c, sm_i,
        so_c, so_h, so_p, so_r, sl_c, sl_h, sl_p,
        G: tl.constexpr,
        DK: tl.constexpr, DPE: tl.constexpr, DV: tl.constexpr, V_IS_K: tl.constexpr,
        BLOCK_R: tl.constexpr, BLOCK_S: tl.constexpr, DOT_F32: tl.constexpr,
        BLOCK_DV: tl.constexpr, RESCALE_LOG2: tl.constexpr = 8.0, PDL: tl.constexpr = False,
        Q_IN_LOOP: tl.constexpr = False,
        # tiles wholly inside the split and the prefix skip the visibility mask (`default_full_tiles`)
        FULL_TILES: tl.constexpr = False,
    ):
        if PDL:  # let the combine grid launch now; it waits (griddepcontrol.wait) for this grid's writes
            tl.extra.cuda.gdc_launch_dependents()
        pid_ch = tl.program_id(0)
        pid_s = tl.program_id(2)
        c = (pid_ch // HKV).to(tl.int64)  # pid_ch = c * HKV + hkv
        hkv = pid_ch % HKV
        if BLOCK_DV == DV:  # each program accumulates all DV output columns
            pid_r = tl.program_id(1)
            dv = tl.arange(0, DV)
        else:  # output columns split over programs (axis 1 = row block x column block): a
            # BLOCK_DV-wide accumulator lets a tile hold all 64 heads of MLA in registers; the
            # scores are recomputed per column block (the KV tile is then an L2 hit)
            pid_r = tl.program_id(1) // (DV // BLOCK_DV)
            dv = (tl.program_id(1) % (DV // BLOCK_DV)) * BLOCK_DV + tl.arange(0, BLOCK_DV)

        rows = pid_r * BLOCK_R + tl.arange(0, BLOCK_R)
        row_ok = rows < R
        qi = tl.where(row_ok, rows // G, 0)  # query (tree) token
        head = hkv * G + rows % G
        dk = tl.arange(0, DK)
        dp = tl.arange(0, DPE if DPE > 0 else 16)
        if not Q_IN_LOOP:
            q = tl.load(q_ptr + c * sq_c + qi[:, None] * sq_i + head[:, None] * sq_h + dk[None, :],
                        mask=row_ok[:, None], other=0.0)
            if DPE > 0:
                qp = tl.load(qpe_ptr + c * sqp_c + qi[:, None] * sqp_i + head[:, None] * sqp_h + dp[None, :],
                             mask=row_ok[:, None], other=0.0)
            if DOT_F32:
                q = q.to(tl.float32)
                if DPE > 0:
                    qp = qp.to(tl.float32)
        qk_scale = sm_scale * 1.4426950408889634  # exp2 domain

        m_i = tl.full((BLOCK_R,), float("-inf"), dtype=tl.float32)
        l_i = tl.zeros((BLOCK_R,), dtype=tl.float32)
        acc = tl.zeros((BLOCK_R, BLOCK_DV), dtype=tl.float32)
        s_begin = pid_s * split_len
        s_stop = tl.minimum(s_begin + split_len, S)
        for s0 in range(s_begin, s_begin + split_len, BLOCK_S):
            offs = s0 + tl.arange(0, BLOCK_S)
            s_ok = offs < s_stop
            if Q_IN_LOOP:  # q reloaded with each tile (an L2 hit after the first): its copy is
                # issued with the tile's, one memory round trip before the first tile instead of two
                q_ok = row_ok[:, None] & (s0 < s_stop)
                q = tl.load(q_ptr + c * sq_c + qi[:, None] * sq_i + head[:, None] * sq_h + dk[None, :],
                            mask=q_ok, other=0.0)
                if DPE > 0:
                    qp = tl.load(qpe_ptr + c * sqp_c + qi[:, None] * sqp_i + head[:, None] * sqp_h + dp[None, :],
                                 mask=q_ok, other=0.0)
                if DOT_F32:
                    q = q.to(tl.float32)
                    if DPE > 0:
                        qp = qp.to(tl.float32)
            kt = tl.load(k_ptr + c * sk_c + offs[:, None] * sk_s + hkv * sk_h + dk[None, :],
                         mask=s_ok[:, None], other=0.0)
            if DOT_F32:
                kt = kt.to(tl.float32)
            sc = tl.dot(q, tl.trans(kt))
            if DPE > 0:
                kp = tl.load(kpe_ptr + c * skp_c + offs[:, None] * skp_s + dp[None, :],
                             mask=s_ok[:, None], other=0.0)
                if DOT_F32:
                    kp = kp.to(tl.float32)
                sc = tl.dot(qp, tl.trans(kp), sc)
            if FULL_TILES and (s0 + BLOCK_S <= s_stop) and (s0 + BLOCK_S <= L):
                sc = sc * qk_scale
            else:
                # Full [BLOCK_R, BLOCK_S] shape up front: the tree branch below must not change it.
                vis = (row_ok[:, None] | True) & s_ok[None, :] & (offs[None, :] < L)
                if s0 + BLOCK_S > L:  # the tile reaches the tree tokens
                    j = offs - L
                    t_ok = (j >= 0) & s_ok
                    tm = tl.load(mask_ptr + c * sm_c + qi[:, None] * sm_i + tl.where(t_ok, j, 0)[None, :],
                                 mask=row_ok[:, None] & t_ok[None, :], other=0)
                    vis = vis | (tm != 0)
                sc = tl.where(vis, sc * qk_scale, float("-inf"))
            # Lazy rescaling (FlashAttention-4): the running max m_i moves, and the [BLOCK_R, DV]
            # accumulator is rescaled, only when some row's max grew by more than RESCALE_LOG2
            # (p then stays <= 2^RESCALE_LOG2, safe in fp32 and bf16). Rescaling every tile cost
            # DV multiplies per (row, position) on the CUDA cores, more than the MMAs' time.
            m_new = tl.maximum(m_i, tl.max(sc, 1))
            grow = tl.where(m_new > m_i, m_new - tl.maximum(m_i, -3.0e38), 0.0)  # huge on a row's first visible tile
            if tl.max(grow, 0) > RESCALE_LOG2:
                alpha = tl.exp2(m_i - tl.where(m_new == float("-inf"), 0.0, m_new))
                acc = acc * alpha[:, None]
                l_i = l_i * alpha
                m_i = m_new
            p = tl.exp2(sc - tl.where(m_i == float("-inf"), 0.0, m_i)[:, None])
            l_i = l_i + tl.sum(p, 1)
            if V_IS_K and BLOCK_DV == DV:
                vt = kt
            else:
                vt = tl.load(v_ptr + c * sv_c + offs[:, None] * sv_s + hkv * sv_h + dv[None, :],
                             mask=s_ok[:, None], other=0.0)
                if DOT_F32:
                    vt = vt.to(tl.float32)
            acc = tl.dot(p.to(vt.dtype), vt, acc)

        l_safe = tl.where(l_i == 0.0, 1.0, l_i)
        o = acc / l_safe[:, None]
        lse = tl.where(l_i == 0.0, float("-inf"), m_i + tl.log2(l_safe))  # log2 domain
        base = c * so_c + hkv * so_h + pid_s * so_p
        tl.store(o_ptr + base + rows[:, None] * so_r + dv[None, :], o.to(o_ptr.dtype.element_ty), mask=row_ok[:, None])
        tl.store(lse_ptr + c * sl_c + hkv * sl_h + pid_s * sl_p + rows, lse, mask=row_ok)

    _KERNEL = FastLauncher(_tree_attn_kernel)
    return _KERNEL


# ------------------------------------------------------------------------------ wrapper
def max_block_r(dv: int) -> int:
    """Largest row tile (query tokens x heads of one KV group per program): beyond it the
    fp32 accumulator spills. With more rows than this, each row tile reads the KV prefix
    again (mostly from L2: see measure/attention.py fit_attention)."""
    return 64 if dv <= 128 else 32


def default_config(C: int, Hkv: int, rows: int, S: int, dv: int, num_sms: int = 132,
                   block_r: int | None = None) -> dict:
    """Knobs: block_r rows (query tokens x heads of one KV group) per program, block_s KV
    positions per step, num_splits along S, num_warps, num_stages.

    Splits are chosen so that programs >= 2 per SM (GQA; 4-8 for MLA) while each split
    keeps >= 8 tiles of block_s (below that the combine and the q reload dominate). When
    that rule leaves part of the GPU idle (small C x L: decode at C=1), the splits grow to
    one resident wave (MLA 1 program per SM, its two 72 KB stages fill the shared memory;
    GQA 2), down to one tile per split: a 1 MB cache is then read by ~100 programs at once
    instead of streamed by 2-8 programs 8 tiles deep. A given block_r (tuning) replaces the
    row-tile choice; the splits follow from it.
    """
    given_block_r = block_r
    if block_r is None:
        block_r = 16
        while block_r < rows and block_r < max_block_r(dv):
            block_r *= 2
    row_blocks = -(-rows // block_r)
    base = C * Hkv * row_blocks
    if dv <= 128:  # GQA: >= 2 programs per SM when the sequences alone don't fill the GPU
        block_s, per_sm, stages, resident = 64, 2, 2, 2
    else:  # MLA (dv 512): 64-position tiles, 2 stages, 4-8 programs per SM. H200 sweep
        # (evidence/kernel-defaults/tree-attention-mla-tiles/): 98% of read at C=128, L=32768.
        block_s, per_sm, stages, resident = 64, (8 if base >= 64 else 4), 2, 1
    # each split keeps >= 8 tiles so that each program still pipelines its loads
    max_splits = max(1, S // (8 * block_s))
    splits = max(1, min(max_splits, -(-per_sm * num_sms // base)))
    if base * splits < resident * num_sms:  # small C x L: fill one resident wave instead
        wave = resident * num_sms
        # GQA tiles of <= 16 rows skip the mask on full tiles (`default_full_tiles`), which fits
        # only 2 programs per SM at 3 stages: their splits stay within the wave (rounded down)
        fill = wave // base if dv <= 128 and block_r <= FULL_TILES_MAX_ROWS else -(-wave // base)
        splits = max(splits, min(-(-S // block_s), fill))
        if dv <= 128:  # GQA: a third stage (96 KB, still 2 programs per SM) where a split has
            # more than GQA_3STAGE_MIN_TILES - 1 tiles (evidence/kernel-defaults/tree-attention-small-batch-wave/):
            # with one to three tiles per program it only cost shared memory (`GQA_3STAGE_MIN_TILES`)
            tiles = -(-(-(-S // splits)) // block_s)
            stages = 3 if tiles >= GQA_3STAGE_MIN_TILES else 2
        elif given_block_r is None and block_r > 16:
            # MLA with many heads (64 at C=1): 16-row tiles, MLA_SMALL_WAVES programs per SM (one
            # resident wave: two 96 KB programs fit), one or two tiles each, beat 32-row tiles at
            # one program per SM (evidence/kernel-defaults/tree-attention-mla-many-heads/). The
            # splits round *down* to that wave: rounded up, 64 heads at C=8 made 288 programs for 264
            # places, and the 24 left over ran as a second wave (L=4096: 58.3 against 44.6 us at 256
            # programs; evidence/kernel-defaults/tree-attention-mla-many-heads/ab_warps_and_row_tiles_e9a213b.log)
            block_r = 16
            base = C * Hkv * -(-rows // block_r)
            splits = max(1, min(-(-S // block_s), MLA_SMALL_WAVES * num_sms // base))
    return dict(block_r=block_r, block_s=block_s, num_splits=splits, num_warps=4, num_stages=stages)


# partial outputs above this many bytes are stored in bf16 (bf16 inputs only; the (m, lse) stay
# fp32). None: always fp32, the default, because bf16 partials were slower on the H200 even for
# MLA with 64 heads at C=1, whose fp32 partials are as many bytes as its KV cache at L=8192
# (evidence/kernel-defaults/tree-attention-mla-many-heads/sweep_decode_347cc9d.log). The `partials`
# knob still picks either.
PARTIALS_BF16_ABOVE = None


def default_partials(C: int, Hkv: int, R: int, nsplit: int, dv: int) -> str:
    big = PARTIALS_BF16_ABOVE is not None and C * Hkv * nsplit * R * dv * 4 > PARTIALS_BF16_ABOVE
    return "bf16" if big else "fp32"


MLA_SMALL_WAVES = 2  # programs per SM for many-head MLA at small C x L, one resident wave (see default_config)
# GQA's small-C x L plan runs 3 stages only where each split has at least this many KV tiles. On
# the H200, the defaults at 2 stages against 3, best of 3 interleaved rounds ("st2" in
# evidence/kernel-defaults/tree-attention-full-tiles/ab_gqa_full_tiles_7ef5d38.log): faster at every
# shape with 1-3 tiles per split but one (Llama C=2 L=1024, 2 tiles: 8.4 -> 8.0 us; Qwen3 C=8
# L=1024, 3 tiles: 11.4 -> 11.0; Qwen3 C=1 L=8192, 2 tiles: 9.7 -> 9.5; L=1024, 1 tile: 5.0 -> 4.8;
# Llama C=1 L=1024, 1 tile: 6.2 -> 6.3), slower or level at every shape with 4 or more (Llama C=4
# L=2048, 5 tiles: 14.6 -> 15.3; C=1 L=8192, 4 tiles: 13.7 -> 13.8)
GQA_3STAGE_MIN_TILES = 4


def _num_sms(device_index: int) -> int:
    return device_facts(device_index).num_sms


_COMBINE = None


def _get_combine():
    """One Triton launch for the log-sum-exp merge of the KV splits (instead of ~8 torch ops,
    which dominated the latency floor at decode). One program per (sequence and KV head, row,
    BLOCK_D columns), looping over the splits BLOCK_P at a time: a [P, 512] fp32 tile in one
    program spilled at the many splits of small-C decode."""
    global _COMBINE
    if _COMBINE is not None:
        return _COMBINE
    import triton
    import triton.language as tl

    @triton.jit
    def _combine_kernel(o_ptr, lse_ptr, out_ptr, P, R, HKV,
                        so_c, so_h, so_p, so_r, sl_c, sl_h, sl_p,
                        sout_c, sout_i, sout_h,
                        G: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_P: tl.constexpr,
                        PDL: tl.constexpr = False, ONE_PASS: tl.constexpr = False):
        if PDL:  # launched early (programmatic dependent launch): wait for the partials
            tl.extra.cuda.gdc_wait()
        pid_ch = tl.program_id(0)
        r = tl.program_id(1)
        d0 = tl.program_id(2) * BLOCK_D
        c = (pid_ch // HKV).to(tl.int64)
        hkv = pid_ch % HKV
        lse_base = lse_ptr + c * sl_c + hkv * sl_h + r
        dv = d0 + tl.arange(0, BLOCK_D)
        o_base = o_ptr + c * so_c + hkv * so_h + r * so_r
        if ONE_PASS:  # every split in one tile: the lse and o loads go out together (one round trip)
            offs_p = tl.arange(0, BLOCK_P)
            p_ok = offs_p < P
            lse = tl.load(lse_base + offs_p * sl_p, mask=p_ok, other=float("-inf"))
            o = tl.load(o_base + offs_p[:, None] * so_p + dv[None, :], mask=p_ok[:, None], other=0.0).to(tl.float32)
            m_all = tl.max(lse, axis=0)
            m_all = tl.where(m_all == float("-inf"), 0.0, m_all)
            wsum = tl.where(p_ok, tl.exp2(lse - m_all), 0.0)
            acc = tl.sum(o * wsum[:, None], axis=0)
        else:
            m = tl.full((BLOCK_P,), float("-inf"), dtype=tl.float32)
            for p0 in range(0, P, BLOCK_P):
                offs_p = p0 + tl.arange(0, BLOCK_P)
                m = tl.maximum(m, tl.load(lse_base + offs_p * sl_p, mask=offs_p < P, other=float("-inf")))
            m_all = tl.max(m, axis=0)
            m_all = tl.where(m_all == float("-inf"), 0.0, m_all)
            acc = tl.zeros((BLOCK_D,), dtype=tl.float32)
            wsum = tl.zeros((BLOCK_P,), dtype=tl.float32)
            for p0 in range(0, P, BLOCK_P):
                offs_p = p0 + tl.arange(0, BLOCK_P)
                p_ok = offs_p < P
                lse = tl.load(lse_base + offs_p * sl_p, mask=p_ok, other=float("-inf"))
                w = tl.where(p_ok, tl.exp2(lse - m_all), 0.0)
                o = tl.load(o_base + offs_p[:, None] * so_p + dv[None, :], mask=p_ok[:, None], other=0.0).to(tl.float32)
                acc += tl.sum(o * w[:, None], axis=0)
                wsum += w
        out = acc / tl.sum(wsum, axis=0)
        qi = r // G
        head = hkv * G + r % G
        tl.store(out_ptr + c * sout_c + qi * sout_i + head * sout_h + dv, out.to(out_ptr.dtype.element_ty))

    _COMBINE = FastLauncher(_combine_kernel)
    return _COMBINE


# programmatic dependent launch of the combine (sm_90+; off under the interpreter): the combine
# grid starts while the split kernel drains and waits in griddepcontrol.wait for its writes
# (evidence/kernel-defaults/tree-attention-small-batch-wave/)
PDL_DEFAULT = True
# the combine loads every split's (lse, o) in one tile when they fit (<= 8192 fp32), instead of a
# max pass over the lse then a weighted pass: GQA, and MLA up to 64 splits (MLA with 64 heads
# and 65-66 splits was 0.3 us faster in two passes;
# evidence/kernel-defaults/moe-direct-path-and-attention-combine/)
COMBINE_ONE_PASS = True
# the split kernel loads q inside its KV loop, with each KV tile (knob `q_in_loop`): its copy then
# goes out with the first tile's instead of a round trip before it. On for GQA with row tiles of
# <= 16 rows (q=1 decode): 0.1-0.2 us at C=1 and 2.5% at C=8, L=8192; off for MLA, where the
# 18 KB q reload per tile was slower (1218 -> 1380 us at C=128, L=32768), and for larger row
# tiles (tree verification), which were not measured
# (evidence/kernel-defaults/tree-attention-gqa-q-in-loop/)
Q_IN_LOOP_GQA_MAX_ROWS = 16


def default_q_in_loop(dv: int, block_r: int) -> bool:
    return dv <= 128 and block_r <= Q_IN_LOOP_GQA_MAX_ROWS


# tiles wholly inside their split and the KV prefix skip the visibility mask (the split kernel's
# FULL_TILES, knob `full_tiles`) at row tiles of at most this many rows. On the H200, interleaved
# (evidence/kernel-defaults/tree-attention-full-tiles/, ab_full_tiles_df58f91.log): MLA 64 heads C=1
# L=8192 17.7 -> 16.9 us, 8 heads 10.8 -> 10.3; 8 heads C=128 L=32768 1235.9 -> 1187.0 (95% of
# read). GQA gained at C=1 and at large shapes but lost at C=8-32 in its 3-stage small-C x L plan
# (ab_full_tiles_mid_batch_f46271e.log: Qwen3 C=8 L=4096 26.4 -> 32.7): the branch's 2 KB more
# shared memory fits 2 programs per SM there instead of 3 (offline_compile_gqa_smem_5b626b9.txt),
# and the plan's splits, rounded up, made 288-384 programs: a second wave. With the splits
# rounded down to one wave of 2 per SM (`default_config`) it beat the mask at every such shape
# (ab_gqa_full_tiles_rule_f3f18e2.log), and against the plan before (every tile masked, the
# splits rounded up: the log's `s11`) was faster or level at 21 of 22 GQA shapes
# (ab_gqa_full_tiles_7ef5d38.log: Qwen3 C=8 L=4096 26.3 -> 23.2 us, Llama C=1 L=8192 13.9 -> 13.7;
# slower at Llama C=2 L=1024, 8.0 -> 8.4). Given splits that pass that wave at 3 stages keep the
# mask (`default_full_tiles`). Larger row tiles are not measured: at 32 rows the offline sm_90
# compile spills, at 64 Triton 3.6's pipeliner fails on the branch (a compile error).
FULL_TILES_MAX_ROWS = 16
# GQA programs per SM that fit at 3 stages with the branch (2 without it fit 3)
FULL_TILES_GQA_RESIDENT_3STAGE = 2


def default_full_tiles(dv: int, block_r: int, num_stages: int = 2, programs: int = 0,
                       num_sms: int = 132) -> bool:
    """Whether the split kernel skips the mask on full tiles: MLA at <= 16-row tiles; GQA at
    <= 16-row tiles too, unless at 3 or more stages its grid needs more than one wave of
    FULL_TILES_GQA_RESIDENT_3STAGE programs per SM."""
    if block_r > FULL_TILES_MAX_ROWS:
        return False
    if dv > 128:
        return True
    return num_stages < 3 or programs <= FULL_TILES_GQA_RESIDENT_3STAGE * num_sms


def split_plan(C: int, Hkv: int, R: int, S: int, dv: int, num_sms: int = 132, cfg: dict | None = None, *,
               q_in_loop: bool | None = None, full_tiles: bool | None = None, fp32_mla: bool = False) -> dict:
    """The split kernel's launch: `default_config`'s knobs with the given ones (`cfg`, None
    entries ignored) over them, plus split_len, nsplit, block_dv, grid (its three dimensions),
    q_in_loop and full_tiles (their defaults where None). fp32_mla: fp32 MLA tiles of 32
    positions (two stages of 64 x 576 x 4 B exceed the shared memory)."""
    cfg = {k: v for k, v in (cfg or {}).items() if v is not None}
    d = default_config(C, Hkv, R, S, dv, num_sms=num_sms, block_r=cfg.get("block_r"))
    if fp32_mla:
        d["block_s"] = 32
    d.update(cfg)
    d["split_len"] = cdiv(cdiv(S, d["num_splits"]), d["block_s"]) * d["block_s"]
    d["nsplit"] = cdiv(S, d["split_len"])
    d["block_dv"] = block_dv = d.get("block_dv") or dv
    if dv % block_dv or block_dv & (block_dv - 1):
        raise ValueError(f"block_dv={block_dv}: expected a power of two dividing {dv}")
    d["grid"] = grid = (C * Hkv, cdiv(R, d["block_r"]) * (dv // block_dv), d["nsplit"])
    d["q_in_loop"] = default_q_in_loop(dv, d["block_r"]) if q_in_loop is None else bool(q_in_loop)
    d["full_tiles"] = (default_full_tiles(dv, d["block_r"], d["num_stages"], grid[0] * grid[1] * grid[2], num_sms)
                       if full_tiles is None else bool(full_tiles))
    return d


SPLIT_ONLY = False  # tuning only: skip the combine, return the partials


_CFG_NAMES = ("block_r", "block_s", "num_splits", "num_warps", "num_stages", "pdl", "partials", "block_dv",
              "q_in_loop", "full_tiles")


class _Plan(NamedTuple):
    """What an eager call of one signature (shapes, strides, dtypes, knobs) launches, worked out
    by its first call (`_run_planned`): both kernels' launch keys, grids and integer arguments,
    and the one workspace holding the (o, lse) partials. Later calls allocate, read the
    pointers and launch (`_run`)."""
    split_key: tuple
    grid: tuple
    ints_a: tuple  # the split kernel's integers before sm_scale (L, S, R, Hkv, split_len)
    ints_b: tuple  # and after it (the strides)
    combine_key: tuple
    combine_grid: tuple
    combine_ints: tuple
    o_bytes: int  # the partials o at the workspace's start, the lse after it (256-byte aligned)
    ws_bytes: int
    out_shape: tuple
    mask_view: bool  # a contiguous bool mask is read in place as int8


_PLANS: dict = {}  # call signature -> _Plan (eager calls; a CUDA graph captures one call's launches)
_PLAN_IDS = itertools.count()  # launch keys: a plan's number, short to hash (never reused)


def _run(q, qpe, k, kpe, v, tree_mask, sm_scale, *, G, Hkv, dv, v_is_k, cfg):
    """One call: the cached plan of its signature where there is one (allocate, read pointers,
    two direct launches: measure/dispatch.py times the eager call), else `_run_planned`."""
    sig = (q.shape, q.stride(), q.dtype, k.shape, k.stride(), k.dtype, v.shape, v.stride(), v.dtype,
           None if qpe is None else (qpe.shape, qpe.stride(), qpe.dtype),
           None if kpe is None else (kpe.shape, kpe.stride(), kpe.dtype),
           tree_mask.shape, tree_mask.stride(), tree_mask.dtype, q.device, G, Hkv, dv, v_is_k, cfg,
           PDL_DEFAULT, COMBINE_ONE_PASS)
    plan = _PLANS.get(sig)
    if plan is None or SPLIT_ONLY:
        return _run_planned(q, qpe, k, kpe, v, tree_mask, sm_scale, G=G, Hkv=Hkv, dv=dv, v_is_k=v_is_k,
                            cfg=cfg, sig=sig)
    mask = tree_mask if plan.mask_view else tree_mask.to(torch.int8).contiguous()
    ws = torch.empty(plan.ws_bytes, dtype=torch.uint8, device=q.device)
    out = torch.empty(plan.out_shape, dtype=q.dtype, device=q.device)
    pq, pk, pv, pm, pout = q.data_ptr(), k.data_ptr(), v.data_ptr(), mask.data_ptr(), out.data_ptr()
    pqpe = pq if qpe is None else qpe.data_ptr()
    pkpe = pk if kpe is None else kpe.data_ptr()
    po = ws.data_ptr()
    pl = po + plan.o_bytes
    if not (pq | pk | pv | pm | pout | pqpe | pkpe | po) & 15 and _get_kernel().launch_direct(
            plan.split_key, plan.grid, (pq, pqpe, pk, pkpe, pv, pm, po, pl, *plan.ints_a, float(sm_scale), *plan.ints_b)):
        if not _get_combine().launch_direct(plan.combine_key, plan.combine_grid, (po, pl, pout, *plan.combine_ints)):
            raise RuntimeError("tree attention: the combine's direct launch failed after the split kernel's")
        return out
    # a misaligned pointer, or direct launches not possible now (a launch hook): Triton's own path
    return _run_planned(q, qpe, k, kpe, v, tree_mask, sm_scale, G=G, Hkv=Hkv, dv=dv, v_is_k=v_is_k, cfg=cfg,
                        sig=None)


def _run_planned(q, qpe, k, kpe, v, tree_mask, sm_scale, *, G, Hkv, dv, v_is_k, cfg, sig):
    """One call worked out in full. With `sig` (a call signature without a plan), where its
    pointers are 16-byte aligned and it runs on a CUDA GPU outside the interpreter, it launches
    under that plan's keys (compiling them) and stores the plan for the next calls."""
    C, Q = q.shape[0], q.shape[1]
    S = k.shape[1]
    L = S - Q
    R = Q * G
    interpret = interpreting()
    facts = facts_of(q.device)
    num_sms = facts.num_sms if facts else 132
    cfg = {n: c for n, c in zip(_CFG_NAMES, cfg) if c is not None}
    pdl = cfg.pop("pdl", None)
    q_in_loop = cfg.pop("q_in_loop", None)
    full_tiles = cfg.pop("full_tiles", None)
    partials = cfg.pop("partials", None)
    pdl = (PDL_DEFAULT if pdl is None else pdl) and facts is not None and not interpret and facts.cc_major >= 9
    d = split_plan(C, Hkv, R, S, dv, num_sms, cfg, q_in_loop=q_in_loop, full_tiles=full_tiles,
                   fp32_mla=q.dtype == torch.float32 and dv > 128 and not interpret)
    split_len, nsplit, grid = d["split_len"], d["nsplit"], d["grid"]
    if partials is None:
        partials = default_partials(C, Hkv, R, nsplit, dv) if q.dtype == torch.bfloat16 else "fp32"
    if partials not in ("fp32", "bf16"):
        raise ValueError(f"partials={partials!r}: expected 'fp32' or 'bf16'")
    o_dtype = torch.float32 if partials == "fp32" else torch.bfloat16
    # the partials o and lse in one workspace (one allocation per call), o first, lse 256-byte aligned
    o_shape, lse_shape = (C, Hkv, nsplit, R, dv), (C, Hkv, nsplit, R)
    o_bytes = cdiv(math.prod(o_shape) * (4 if partials == "fp32" else 2), 256) * 256
    ws = torch.empty(o_bytes + math.prod(lse_shape) * 4, dtype=torch.uint8, device=q.device)
    o = ws[:o_bytes].view(o_dtype)[:math.prod(o_shape)].view(o_shape)
    lse = ws[o_bytes:].view(torch.float32).view(lse_shape)
    # a bool mask is read in place as int8 (same bytes): no conversion kernel in the graph
    mask_view = tree_mask.dtype == torch.bool and tree_mask.is_contiguous()
    mask = tree_mask.view(torch.int8) if mask_view else tree_mask.to(torch.int8).contiguous()
    dpe = 0 if qpe is None else qpe.shape[-1]
    qpe_ = qpe if qpe is not None else q
    kpe_ = kpe if kpe is not None else k
    # strides: k/v may be [C, S, Hkv, D] (GQA) or [C, S, D] (MLA, head stride 0)
    skh = k.stride(2) if k.dim() == 4 else 0
    svh = v.stride(2) if v.dim() == 4 else 0
    assert q.stride(-1) == 1 and k.stride(-1) == 1 and v.stride(-1) == 1, "last dim must be contiguous"
    ints_a = (L, S, R, Hkv, split_len)
    ints_b = (q.stride(0), q.stride(1), q.stride(2), qpe_.stride(0), qpe_.stride(1), qpe_.stride(2),
              k.stride(0), k.stride(1), skh, kpe_.stride(0), kpe_.stride(1), v.stride(0), v.stride(1), svh,
              mask.stride(0), mask.stride(1),
              o.stride(0), o.stride(1), o.stride(2), o.stride(3), lse.stride(0), lse.stride(1), lse.stride(2))
    kw = dict(G=G, DK=q.shape[-1], DPE=dpe, DV=dv, V_IS_K=v_is_k,
              BLOCK_R=d["block_r"], BLOCK_S=d["block_s"],
              DOT_F32=interpret, PDL=pdl, BLOCK_DV=d["block_dv"], Q_IN_LOOP=d["q_in_loop"],
              FULL_TILES=d["full_tiles"],
              num_warps=d["num_warps"], num_stages=d["num_stages"])
    tensors = (q, qpe_, k, kpe_, v, mask, o, lse)
    out = torch.empty((C, Q, Hkv * G, dv), dtype=q.dtype, device=q.device)
    ptrs = tuple(t.data_ptr() for t in tensors) + (out.data_ptr(),)
    planned = (sig is not None and not interpret and facts is not None and q.is_cuda and k.is_cuda
               and v.is_cuda and tree_mask.is_cuda and not SPLIT_ONLY and not any(p & 15 for p in ptrs))
    split_args = (*tensors, *ints_a, float(sm_scale), *ints_b)
    if planned:
        plan_id = next(_PLAN_IDS)
        split_key = ("split", plan_id)
        _get_kernel().launch_keyed(split_key, grid, split_args,
                                   (*ptrs[:8], *ints_a, float(sm_scale), *ints_b), kw)
    else:
        _get_kernel()[grid](*split_args, **kw)
    if SPLIT_ONLY:  # tuning (tools/ab.py --time-failed, knob @SPLIT_ONLY=true): the split kernel alone
        return o
    # log-sum-exp merge of the splits (log2 domain), written straight into [C, Q, H, dv]
    # columns per program: all of them when the rows alone give >= 4 programs per SM, else
    # narrower (down to 32) so that small-C decode spreads the merge over the GPU
    block_d = dv
    while block_d > 32 and C * Hkv * R * (dv // block_d) < 4 * num_sms:
        block_d //= 2
    block_p = min(next_pow2(nsplit), max(2, 8192 // block_d))  # <= 8192 fp32 per tile
    tile = block_p * block_d
    combine_grid = (C * Hkv, R, dv // block_d)
    combine_ints = (nsplit, R, Hkv,
                    o.stride(0), o.stride(1), o.stride(2), o.stride(3), lse.stride(0), lse.stride(1), lse.stride(2),
                    out.stride(0), out.stride(1), out.stride(2))
    combine_kw = dict(G=G, BLOCK_D=block_d, BLOCK_P=max(2, block_p), PDL=pdl,
                      ONE_PASS=COMBINE_ONE_PASS and nsplit <= block_p and (dv <= 128 or block_p <= 64),
                      num_warps=8 if tile >= 8192 else 4 if tile >= 2048 else 2, launch_pdl=pdl)
    if planned:
        combine_key = ("combine", plan_id)
        _get_combine().launch_keyed(combine_key, combine_grid, (o, lse, out, *combine_ints),
                                    (ptrs[6], ptrs[7], ptrs[8], *combine_ints), combine_kw)
        _PLANS[sig] = _Plan(split_key, grid, ints_a, ints_b, combine_key, combine_grid, combine_ints, o_bytes,
                            ws.numel(), tuple(out.shape), mask_view)
    else:
        _get_combine()[combine_grid](o, lse, out, *combine_ints, **combine_kw)
    return out


def tree_attention_gqa(q, k, v, tree_mask, sm_scale=None, *, block_r=None, block_s=None,
                       num_splits=None, num_warps=None, num_stages=None, pdl=None, partials=None,
                       block_dv=None, q_in_loop=None, full_tiles=None) -> torch.Tensor:
    """q [C,Q,Hq,D], k/v [C,S,Hkv,D] (S = L + Q), tree_mask bool [C,Q,Q] -> [C,Q,Hq,D]."""
    C, Q, Hq, D = q.shape
    Hkv = k.shape[2]
    assert Hq % Hkv == 0 and D & (D - 1) == 0, f"{Hq=} {Hkv=} {D=} (D a power of two)"
    scale = sm_scale if sm_scale is not None else 1.0 / math.sqrt(D)
    cfg = (block_r, block_s, num_splits, num_warps, num_stages, pdl, partials, block_dv, q_in_loop, full_tiles)
    return _run(q, None, k, None, v, tree_mask, scale, G=Hq // Hkv, Hkv=Hkv, dv=D,
                v_is_k=False, cfg=cfg)


def tree_attention_mla(q_latent, q_rope, ckv, kpe, tree_mask, sm_scale, *, block_r=None,
                       block_s=None, num_splits=None, num_warps=None, num_stages=None, pdl=None, partials=None,
                       block_dv=None, q_in_loop=None, full_tiles=None) -> torch.Tensor:
    """Absorbed MLA: q_latent [C,Q,H,512], q_rope [C,Q,H,64], ckv [C,S,512], kpe [C,S,64]
    -> [C,Q,H,512]; score = q_latent.ckv + q_rope.kpe, value = ckv (one latent head).
    block_dv < 512 splits the output columns over programs (each recomputes the scores)."""
    C, Q, H, DL = q_latent.shape
    cfg = (block_r, block_s, num_splits, num_warps, num_stages, pdl, partials, block_dv, q_in_loop, full_tiles)
    return _run(q_latent, q_rope, ckv, kpe, ckv, tree_mask, sm_scale, G=H, Hkv=1, dv=DL,
                v_is_k=True, cfg=cfg)


# ------------------------------------------------------------------------------ bytes / flops
def gqa_bytes_moved(C: int, Q: int, L: int, Hq: int, Hkv: int, D: int, elem_bytes: int = 2) -> float:
    S = L + Q
    return float(elem_bytes * (2 * C * S * Hkv * D + 2 * C * Q * Hq * D))


def gqa_flops(C: int, Q: int, L: int, Hq: int, D: int) -> float:
    return 4.0 * C * Q * Hq * (L + Q) * D


def mla_bytes_moved(C: int, Q: int, L: int, H: int, d_latent: int = 512, d_rope: int = 64,
                    elem_bytes: int = 2) -> float:
    S = L + Q
    kv = C * S * (d_latent + d_rope)
    q_in = C * Q * H * (d_latent + d_rope)
    out = C * Q * H * d_latent
    return float(elem_bytes * (kv + q_in + out))


def mla_flops(C: int, Q: int, L: int, H: int, d_latent: int = 512, d_rope: int = 64) -> float:
    return 2.0 * C * Q * H * (L + Q) * (d_latent + d_rope + d_latent)
