"""Experimental W4A16 MoE GEMM variants (session-4 exploration)."""
import triton, triton.language as tl
from perfmodel.kernels._moe_common import moe_block_rows, moe_store_rows
from perfmodel.kernels.moe_w4a16 import _BF16X2_DEQUANT_ASM

PRMT = tl.constexpr("prmt.b32 $0, $2, $3, 0x5410;\nprmt.b32 $1, $2, $3, 0x7632;")


def _grp(i):
    src = "$1" if i < 4 else "$2"
    s = "{\n.reg .b32 t, v, one, off, nz;\nmov.b32 one, 0x3F803F80;\nmov.b32 off, 0xC308C308;\nmov.b32 nz, 0x80008000;\n"
    if i % 4:
        s += f"shr.u32 t, {src}, {4*(i%4)};\nlop3.b32 v, t, 0x000F000F, 0x43004300, 0xEA;\n"
    else:
        s += f"lop3.b32 v, {src}, 0x000F000F, 0x43004300, 0xEA;\n"
    s += "fma.rn.bf16x2 v, v, one, off;\nfma.rn.bf16x2 $0, v, $3, nz;\n}"
    return s


G0, G1, G2, G3, G4, G5, G6, G7 = [tl.constexpr(_grp(i)) for i in range(8)]


def _raw(i):
    src = "$1" if i < 4 else "$2"
    if i % 4:
        return f"{{\n.reg .b32 t;\nshr.u32 t, {src}, {4*(i%4)};\nlop3.b32 $0, t, 0x000F000F, 0x43004300, 0xEA;\n}}"
    return f"lop3.b32 $0, {src}, 0x000F000F, 0x43004300, 0xEA;"


R0, R1, R2, R3, R4, R5, R6, R7 = [tl.constexpr(_raw(i)) for i in range(8)]


@triton.jit
def _raw1(xy, ASM: tl.constexpr):
    return tl.inline_asm_elementwise(ASM, "=r,r,r", [xy], dtype=tl.bfloat16, is_pure=True, pack=2)


@triton.jit
def _raw_i(xy, i: tl.constexpr):
    if i == 0:
        w = _raw1(xy, R0)
    elif i == 1:
        w = _raw1(xy, R1)
    elif i == 2:
        w = _raw1(xy, R2)
    elif i == 3:
        w = _raw1(xy, R3)
    elif i == 4:
        w = _raw1(xy, R4)
    elif i == 5:
        w = _raw1(xy, R5)
    elif i == 6:
        w = _raw1(xy, R6)
    else:
        w = _raw1(xy, R7)
    return w


@triton.jit
def _deq(xy, sc, ASM: tl.constexpr):
    return tl.inline_asm_elementwise(ASM, "=r,r,r,r", [xy, sc], dtype=tl.bfloat16, is_pure=True, pack=2)


@triton.jit
def _deq_i(xy, sc, i: tl.constexpr):
    if i == 0:
        w = _deq(xy, sc, G0)
    elif i == 1:
        w = _deq(xy, sc, G1)
    elif i == 2:
        w = _deq(xy, sc, G2)
    elif i == 3:
        w = _deq(xy, sc, G3)
    elif i == 4:
        w = _deq(xy, sc, G4)
    elif i == 5:
        w = _deq(xy, sc, G5)
    elif i == 6:
        w = _deq(xy, sc, G6)
    else:
        w = _deq(xy, sc, G7)
    return w


@triton.jit
def _split8(st):
    BN: tl.constexpr = st.shape[0]
    e, o = tl.split(tl.reshape(st, (BN, 4, 2)))        # b0
    ee, eo = tl.split(tl.reshape(e, (BN, 2, 2)))       # b1
    oe, oo = tl.split(tl.reshape(o, (BN, 2, 2)))
    s0, s4 = tl.split(ee)
    s2, s6 = tl.split(eo)
    s1, s5 = tl.split(oe)
    s3, s7 = tl.split(oo)
    return s0, s1, s2, s3, s4, s5, s6, s7


@triton.jit
def _dot8(acc, a_ptrs, words, s_ptrs, s_grp):
    s0 = tl.load(s_ptrs)[None, :]
    s1 = tl.load(s_ptrs + s_grp)[None, :]
    s2 = tl.load(s_ptrs + 2 * s_grp)[None, :]
    s3 = tl.load(s_ptrs + 3 * s_grp)[None, :]
    s4 = tl.load(s_ptrs + 4 * s_grp)[None, :]
    s5 = tl.load(s_ptrs + 5 * s_grp)[None, :]
    s6 = tl.load(s_ptrs + 6 * s_grp)[None, :]
    s7 = tl.load(s_ptrs + 7 * s_grp)[None, :]
    w = tl.inline_asm_elementwise(
        _BF16X2_DEQUANT_ASM, "=r,=r,=r,=r,=r,=r,=r,=r,r,r,r,r,r,r,r,r,r,r",
        [words, s0, s1, s2, s3, s4, s5, s6, s7], dtype=(tl.bfloat16,) * 8, is_pure=True, pack=2)
    for i in tl.static_range(8):
        acc = tl.dot(tl.load(a_ptrs + i * 32), w[i], acc)
    return acc


@triton.jit
def kern(a_ptr, q_ptr, s_ptr, c_ptr, topk_w_ptr, sorted_ids_ptr, block_expert_ptr,
         N, K, num_pairs, up_offset, kb_per_split, num_kb, up_tile,
         stride_am, stride_qe, stride_qw, stride_se, stride_sg, stride_cm,
         A_ROW_DIV: tl.constexpr, C_ROW_DIV: tl.constexpr, GATE_UP: tl.constexpr,
         MUL_ROUTED_WEIGHT: tl.constexpr, ATOMIC: tl.constexpr,
         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SWAP: tl.constexpr = False, EVEN: tl.constexpr = False,
         TILED: tl.constexpr = False, N_FAST: tl.constexpr = False, READ_ONLY: tl.constexpr = False, DQ8: tl.constexpr = False, RAW: tl.constexpr = False, JFAST: tl.constexpr = False, SCOL: tl.constexpr = False,
         r_ptr=None, stride_rm=0):
    if N_FAST:
        pid_n = tl.program_id(0)
        pid_m = tl.program_id(1)
    else:
        pid_m = tl.program_id(0)
        pid_n = tl.program_id(1)
    pid_k = tl.program_id(2)
    expert = tl.load(block_expert_ptr + pid_m).to(tl.int64)
    if expert < 0:
        return
    pair, row_ok, a_row = moe_block_rows(sorted_ids_ptr, pid_m, num_pairs, A_ROW_DIV, BLOCK_M)
    offs_c = tl.arange(0, BLOCK_N)
    offs_n = pid_n * BLOCK_N + offs_c
    n_ok = offs_n < N
    offs_j = tl.arange(0, 32)
    kb_begin = pid_k * kb_per_split
    kb_end = tl.minimum(kb_begin + kb_per_split, num_kb)
    if SWAP:
        acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
        acc_up = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    else:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        acc_up = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    if TILED:  # [E, NB, KB, 32, BN] words, [E, NB, KB, 8, BN] scales
        if JFAST:  # [E, NB, KB, BN, 32]: a column's 32 words contiguous
            q_base = q_ptr + expert * stride_qe + pid_n.to(tl.int64) * (num_kb * 32 * BLOCK_N) + offs_j[:, None] + offs_c[None, :] * 32
        else:
            q_base = q_ptr + expert * stride_qe + pid_n.to(tl.int64) * (num_kb * 32 * BLOCK_N) + offs_j[:, None] * BLOCK_N + offs_c[None, :]
        s_base0 = s_ptr + expert * stride_se + pid_n.to(tl.int64) * (num_kb * 8 * BLOCK_N)
        s_base = s_base0 + offs_c
        q_step = 32 * BLOCK_N
        s_step = 8 * BLOCK_N
        s_grp = BLOCK_N
        q_up = up_tile * (num_kb * 32 * BLOCK_N)
        s_up = up_tile * (num_kb * 8 * BLOCK_N)
    else:
        q_base = q_ptr + expert * stride_qe + offs_j[:, None] * stride_qw + offs_n[None, :]
        s_base = s_ptr + expert * stride_se + offs_n
        q_step = 32 * stride_qw
        s_step = 8 * stride_sg
        s_grp = stride_sg
        q_up = up_offset
        s_up = up_offset
    a_base = a_ptr + a_row[:, None] * stride_am + offs_j[None, :]
    xacc = tl.zeros((32, BLOCK_N), dtype=tl.int32)
    corr = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    corr_up = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for kb in range(kb_begin, kb_end):
        q_ptrs = q_base + kb * q_step
        if EVEN:
            words = tl.load(q_ptrs)
        else:
            words = tl.load(q_ptrs, mask=n_ok[None, :], other=0)
        if GATE_UP:
            if EVEN:
                words_up = tl.load(q_ptrs + q_up)
            else:
                words_up = tl.load(q_ptrs + q_up, mask=n_ok[None, :], other=0)
        s_ptrs = s_base + kb * s_step
        if READ_ONLY:
            xacc = xacc ^ words
            if GATE_UP:
                xacc = xacc ^ words_up
            for i in tl.static_range(8):
                xacc += tl.load(s_ptrs + i * s_grp).to(tl.int16, bitcast=True).to(tl.int32)[None, :]
                if GATE_UP:
                    xacc += tl.load(s_ptrs + s_up + i * s_grp).to(tl.int16, bitcast=True).to(tl.int32)[None, :]
        elif RAW:  # MMA on 128+n, fp32 scale per group, offset 136*sum_g R[m,g]*s[g,n] by MMA
            xy = tl.inline_asm_elementwise(PRMT, "=r,=r,r,r", [words], dtype=tl.int32, is_pure=True, pack=2)
            if GATE_UP:
                xy_up = tl.inline_asm_elementwise(PRMT, "=r,=r,r,r", [words_up], dtype=tl.int32, is_pure=True, pack=2)
            offs_g = tl.arange(0, 16)
            r_ptrs = r_ptr + a_row[:, None] * stride_rm + kb * 16 + offs_g[None, :]  # hi at [0,8), lo at [8,16)
            rr = tl.load(r_ptrs)
            s16 = tl.load(s_ptrs + (offs_g % 8)[:, None] * s_grp + offs_c[None, :])  # rows 8..15 repeat 0..7
            corr = tl.dot(rr, s16, corr)
            if GATE_UP:
                s16u = tl.load(s_ptrs + s_up + (offs_g % 8)[:, None] * s_grp + offs_c[None, :])
                corr_up = tl.dot(rr, s16u, corr_up)
            for i in tl.static_range(8):
                k0 = kb * 256 + i * 32
                a = tl.load(a_base + k0)
                sc = tl.load(s_ptrs + i * s_grp).to(tl.float32)
                acc += tl.dot(a, _raw_i(xy, i)) * sc[None, :]
                if GATE_UP:
                    scu = tl.load(s_ptrs + s_up + i * s_grp).to(tl.float32)
                    acc_up += tl.dot(a, _raw_i(xy_up, i)) * scu[None, :]
        elif DQ8:
            acc = _dot8(acc, a_base + kb * 256, words, s_ptrs, s_grp)
            if GATE_UP:
                acc_up = _dot8(acc_up, a_base + kb * 256, words_up, s_ptrs + s_up, s_grp)
        else:
            xy = tl.inline_asm_elementwise(PRMT, "=r,=r,r,r", [words], dtype=tl.int32, is_pure=True, pack=2)
            if GATE_UP:
                xy_up = tl.inline_asm_elementwise(PRMT, "=r,=r,r,r", [words_up], dtype=tl.int32, is_pure=True, pack=2)
            if SCOL:
                st = tl.load(s_base0 + kb * s_step + offs_c[:, None] * 8 + tl.arange(0, 8)[None, :])
                sgate = _split8(st)
                if GATE_UP:
                    stu = tl.load(s_base0 + kb * s_step + s_up + offs_c[:, None] * 8 + tl.arange(0, 8)[None, :])
                    supl = _split8(stu)
            for i in tl.static_range(8):
                k0 = kb * 256 + i * 32
                if SCOL:
                    a = tl.load(a_base + k0)
                    sc = sgate[i][None, :]
                elif EVEN:
                    a = tl.load(a_base + k0)
                    sc = tl.load(s_ptrs + i * s_grp)[None, :]
                else:
                    a = tl.load(a_base + k0, mask=row_ok[:, None] & ((k0 + offs_j) < K)[None, :], other=0.0)
                    sc = tl.load(s_ptrs + i * s_grp, mask=n_ok, other=0.0)[None, :]
                w = _deq_i(xy, sc, i)
                if SWAP:
                    acc = tl.dot(tl.trans(w), tl.trans(a), acc)
                else:
                    acc = tl.dot(a, w, acc)
                if GATE_UP:
                    if SCOL:
                        sc_up = supl[i][None, :]
                    elif EVEN:
                        sc_up = tl.load(s_ptrs + s_up + i * s_grp)[None, :]
                    else:
                        sc_up = tl.load(s_ptrs + s_up + i * s_grp, mask=n_ok, other=0.0)[None, :]
                    wu = _deq_i(xy_up, sc_up, i)
                    if SWAP:
                        acc_up = tl.dot(tl.trans(wu), tl.trans(a), acc_up)
                    else:
                        acc_up = tl.dot(a, wu, acc_up)
    if READ_ONLY:
        if tl.sum(tl.sum(xacc, 1), 0) == 123456789:
            tl.store(c_ptr + offs_c, offs_c.to(c_ptr.dtype.element_ty))
    else:
        if RAW:
            acc = acc - 136.0 * corr
            acc_up = acc_up - 136.0 * corr_up
        if GATE_UP:
            acc = acc / (1.0 + tl.exp(-acc)) * acc_up
        if SWAP:
            acc = tl.trans(acc)
        moe_store_rows(acc, c_ptr, topk_w_ptr, pair, row_ok, offs_n, n_ok, stride_cm, 1,
                       C_ROW_DIV, MUL_ROUTED_WEIGHT, ATOMIC)


def tile_layout(q, s, bn, jfast=False, scol=False):
    """Kernel layout [E, KW, N] / [E, G, N] -> [E, NB, KB, 32, BN] (jfast: [E, NB, KB, BN, 32]) / [E, NB, KB, 8, BN]."""
    E, KW, N = q.shape
    KB = KW // 32
    qt = q.reshape(E, KB, 32, N // bn, bn).permute(0, 3, 1, 4, 2) if jfast else q.reshape(E, KB, 32, N // bn, bn).permute(0, 3, 1, 2, 4)
    qt = qt.contiguous()
    st = s.reshape(E, KB, 8, N // bn, bn).permute(0, 3, 1, 2, 4)
    st = (st.transpose(-1, -2) if scol else st).contiguous()
    return qt, st


def launch(a, q, s, c, tw, routing, *, n, k_dim, a_row_div, c_row_div, gate_up, atomic, bn, warps, stages,
           tiled=False, n_fast=False, read_only=False, even=True, swap=False, dq8=False, rows=None, jfast=False, scol=False, maxnreg=None):
    """q/s in kernel layout, or tiled (tile_layout) when tiled; n_total = columns of W (2I for w13)."""
    num_kb = q.shape[1] // 32 if not tiled else q.shape[2]
    nb = triton.cdiv(n, bn)
    grid = (nb, routing.max_blocks, 1) if n_fast else (routing.max_blocks, nb, 1)
    twp = tw if tw is not None else c
    kern[grid](a, q, s, c, twp, routing.sorted_pair_ids, routing.block_expert_ids,
               n, k_dim, routing.num_pairs, n if gate_up else 0, num_kb, num_kb, n // bn if gate_up else 0,
               a.stride(0), q.stride(0), q.stride(1), s.stride(0), s.stride(1), c.stride(0),
               A_ROW_DIV=a_row_div, C_ROW_DIV=c_row_div, GATE_UP=gate_up, MUL_ROUTED_WEIGHT=tw is not None,
               ATOMIC=atomic, BLOCK_M=routing.block_m, BLOCK_N=bn, SWAP=swap, EVEN=even, TILED=tiled,
               N_FAST=n_fast, READ_ONLY=read_only, DQ8=dq8, **({} if maxnreg is None else dict(maxnreg=maxnreg)), RAW=rows is not None, JFAST=jfast, SCOL=scol,
               r_ptr=rows, stride_rm=0 if rows is None else rows.stride(0), num_warps=warps, num_stages=stages)


def group_rowsums(a):
    """a [rows, K] bf16 -> [rows, KB*16 + 16] bf16: per 256-k block, 8 group sums (hi) then their
    residuals (lo), hi + lo ~ the fp32 sum to 2^-17."""
    import torch
    rows, K = a.shape
    r = a.float().view(rows, K // 32, 32).sum(-1)  # fp32
    hi = r.to(torch.bfloat16)
    lo = (r - hi.float()).to(torch.bfloat16)
    kb = K // 256
    out = torch.zeros(rows, kb * 16 + 16, dtype=torch.bfloat16, device=a.device)
    out[:, : kb * 16].view(rows, kb, 16)[:, :, :8] = hi.view(rows, kb, 8)
    out[:, : kb * 16].view(rows, kb, 16)[:, :, 8:] = lo.view(rows, kb, 8)
    return out
