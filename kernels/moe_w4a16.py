"""Fused MoE with INT4 group-32 weights and bf16 activations (W4A16), top-k routing.

Two layouts:

* **Checkpoint layout** (compressed-tensors "pack-quantized", as the Kimi K2-Thinking/K2.6
  routed experts): packed [E, N, K//8] int32, scales [E, N, K//32] bf16. Word j of a row
  holds k = 8j..8j+7, element 8j+i in bits 4i..4i+3, stored as the unsigned nibble q+8
  (q in [-8, 7], offset binary, as compressed-tensors' pack_to_int32). Symmetric:
  w ~= q * scale, scale = absmax(group of 32)/7, q = round(w/scale) clamped to [-7, 7].
  `quantize_int4_g32` / `dequantize_int4_g32` work in this layout.

* **Kernel layout** (what `fused_moe_w4a16` reads; `pack_for_kernel` converts, as a serving
  engine repacks a checkpoint for Marlin at load time): still 8 nibbles per int32 and one
  bf16 scale per 32 weights, tiled so that each 64-column tile streams contiguously:
    qweight [E, Np//64, Kp//256, 64, 2, 32] int16, scales [E, Np//64, Kp//256, 64, 8] bf16,
  Np = N rounded up to 64, Kp = K rounded up to 256 (padding: zero weights, unit scales).
  Half-word [e, t, b, c, h, j], nibble i % 4 holds W[e, 64t + c, 256b + 32i + j], h = i // 4:
  a column's 64 half-words are contiguous (a K-block of a 64-column tile is one 8 KB run), the
  half-words of rows j and j+1 share a 32-bit register as loaded (the bf16x2 pairs, no
  permute), shifting them by 4(i % 4) gives quantisation group 8b+i, and the column's 8 group
  scales of the K-block are one 16 B run. Contiguous tiles took a read-only pass over the weights from 73-87% to 97-102% of the
  measured read bandwidth on the H200 (evidence/kernel-defaults/moe-w4a16-tiled-layout/).

MMA orientation: out[BM, BN] += act[BM, 32] . w[32, BN] per group, or, when BLOCK_M is 8
(decode: the default when an expert gets <= 8 rows), out^T[BN, 8] += w^T[BN, 32] . act^T:
the weights become the m16n8k16 A operand (16 x 16 per MMA instead of 16 x 8), halving the
MMAs and the activation tile.

Per token: out = sum_k topk_weights[k] * W2[e_k] @ (silu(W1[e_k] x) * (W3[e_k] x)), with
w13 = [gate; up] stacked on N (rows 0..I-1 gate, I..2I-1 up).

Bytes (decode is weight-streaming), per DISTINCT expert touched:
  w13: 2I*H/2 (nibbles) + 2I*H/32*2 (bf16 scales) = 2*H*I*0.5625 B
  w2 :  H*I/2           +  H*I/32*2               =   H*I*0.5625 B
  -> 3*H*I*0.5625 B per expert (Kimi H=7168, I=2048: 24.77 MB), plus x in and out (2*T*H*2 B).
  (K padding to 256 is read but not counted: Kimi and Qwen3 shapes need none.)
FLOPs: 6*T*k*H*I (2 per MAC; gate+up 2I*H MACs, down H*I MACs per pair).
"""
from __future__ import annotations

import itertools
from typing import NamedTuple

import torch

from ._launch import FastLauncher, cdiv, facts_of, next_pow2
from ._moe_common import (
    AlignedRouting,
    MoEGemmConfig,
    activation_bytes,
    as_config,
    default_moe_configs,
    interpreting,
    max_num_blocks,
    moe_align_block_size,
    moe_block_rows,
    moe_flops,
    moe_store_rows,
    num_distinct_experts,
    run_fused_moe,
)

GROUP = 32  # weights per scale
PACK = 8  # nibbles per int32 word
KBLOCK = GROUP * PACK  # 256: k covered by the 64 half-words of a column in the kernel layout
TILE_N = 64  # columns per contiguous tile of the kernel layout

__all__ = [
    "quantize_int4_g32",
    "dequantize_int4_g32",
    "pack_for_kernel",
    "unpack_from_kernel",
    "random_kernel_weights",
    "fused_moe_w4a16",
    "fused_moe_w4a16_reference",
    "default_configs",
    "bytes_moved",
    "flops",
    "MoEGemmConfig",
]


# ----------------------------------------------------------------------------------------
# Checkpoint layout: quantise / dequantise (the reference path)
# ----------------------------------------------------------------------------------------
def quantize_int4_g32(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """w [E, N, K] (K % 32 == 0) -> (packed int32 [E, N, K//8], scales bf16 [E, N, K//32])."""
    E, N, K = w.shape
    assert K % GROUP == 0, f"K={K} must be a multiple of {GROUP}"
    wg = w.float().reshape(E, N, K // GROUP, GROUP)
    scales = (wg.abs().amax(-1) / 7.0).clamp_min(1e-8).to(torch.bfloat16)  # what the kernel reads
    q = torch.round(wg / scales.float()[..., None]).clamp(-7, 7).to(torch.int32) + 8  # 1..15
    return _pack_nibbles(q.reshape(E, N, K // PACK, PACK)), scales.contiguous()


def _pack_nibbles(q: torch.Tensor) -> torch.Tensor:
    """[..., n] nibbles (0..15) -> [...] with nibble i in bits 4i..4i+3: int32 for n = 8,
    int16 for n = 4 (two's complement)."""
    n = q.shape[-1]
    dtype = {PACK: torch.int32, PACK // 2: torch.int16}[n]
    shifts = torch.arange(n, device=q.device, dtype=torch.int64) * 4
    packed = (q.to(torch.int64) << shifts).sum(-1)  # disjoint bits: sum == or
    top = 2 ** (4 * n)
    return torch.where(packed >= top // 2, packed - top, packed).to(dtype).contiguous()


def _unpack_nibbles(packed: torch.Tensor) -> torch.Tensor:
    """[...] int32 (int16) -> [..., 8] ([..., 4]) nibbles (0..15)."""
    shifts = torch.arange(2 * packed.element_size(), device=packed.device, dtype=torch.int32) * 4
    return (packed[..., None] >> shifts) & 0xF


def dequantize_int4_g32(packed: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """(packed [E, N, K//8] int32, scales [E, N, K//32]) -> bf16 [E, N, K]."""
    E, N, KW = packed.shape
    q = _unpack_nibbles(packed) - 8  # [E, N, K//8, 8]
    q = q.reshape(E, N, KW * PACK // GROUP, GROUP).float()
    w = q * scales.float()[..., None]
    return w.reshape(E, N, KW * PACK).to(torch.bfloat16)


# ----------------------------------------------------------------------------------------
# Kernel layout
# ----------------------------------------------------------------------------------------
def padded_k(K: int) -> int:
    return -(-K // KBLOCK) * KBLOCK


def padded_n(N: int) -> int:
    return -(-N // TILE_N) * TILE_N


def pack_for_kernel(packed: torch.Tensor, scales: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Checkpoint layout -> kernel layout (see the module docstring). K is padded to a
    multiple of 256 and N to a multiple of 64 with zero weights (nibble 8) and unit scales."""
    E, N, KW = packed.shape
    K = KW * PACK
    Kp, Np = padded_k(K), padded_n(N)
    q = _unpack_nibbles(packed).reshape(E, N, K)
    q = torch.nn.functional.pad(q, (0, Kp - K, 0, Np - N), value=8)
    s = torch.nn.functional.pad(scales, (0, (Kp - K) // GROUP, 0, Np - N), value=1.0)
    # W[n = 64t + c, k = 256b + 32i + j]  ->  half-word [t, b, c, i // 4, j], nibble i % 4
    q = q.reshape(E, Np // TILE_N, TILE_N, Kp // KBLOCK, 2, 4, GROUP).permute(0, 1, 3, 2, 4, 6, 5)
    qweight = _pack_nibbles(q)  # [E, t, b, c, h, j] int16
    s = s.reshape(E, Np // TILE_N, TILE_N, Kp // KBLOCK, PACK).permute(0, 1, 3, 2, 4)  # [E, t, b, c, i]
    return qweight.contiguous(), s.contiguous()


def unpack_from_kernel(qweight: torch.Tensor, scales: torch.Tensor, N: int, K: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Kernel layout -> checkpoint layout (the inverse of `pack_for_kernel`, N and K unpadded)."""
    E, NT, KB = qweight.shape[:3]
    q = _unpack_nibbles(qweight)  # [E, t, b, c, h, j, i % 4]
    q = q.permute(0, 1, 3, 2, 4, 6, 5).reshape(E, NT * TILE_N, KB * KBLOCK)[:, :N, :K]
    packed = _pack_nibbles(q.reshape(E, N, K // PACK, PACK))
    s = scales.permute(0, 1, 3, 2, 4).reshape(E, NT * TILE_N, KB * PACK)[:, :N, : K // GROUP]
    return packed, s.contiguous()


def random_kernel_weights(E: int, N: int, K: int, device: str = "cuda") -> tuple[torch.Tensor, torch.Tensor]:
    """Random valid kernel-layout weights (all 32 bits random, scales in [0.001, 0.021])
    for timing, without a quantisation pass."""
    shape = (E, padded_n(N) // TILE_N, padded_k(K) // KBLOCK, TILE_N)
    q = torch.randint(-(2**15), 2**15, (*shape, 2, GROUP), dtype=torch.int16, device=device)
    s = (torch.rand(*shape, PACK, device=device) * 0.02 + 0.001).to(torch.bfloat16)
    return q, s


def fused_moe_w4a16_reference(
    x, w13_packed, w13_scales, w2_packed, w2_scales, topk_ids, topk_weights
) -> torch.Tensor:
    """Plain torch on CHECKPOINT-layout weights: dequantise, then per touched expert
    gate_up -> silu*mul -> down, fp32."""
    T, H = x.shape
    I = w2_packed.shape[2] * PACK
    xf = x.float()
    out = torch.zeros((T, H), dtype=torch.float32, device=x.device)
    for e in torch.unique(topk_ids).tolist():
        tok, slot = torch.nonzero(topk_ids == e, as_tuple=True)
        w13 = dequantize_int4_g32(w13_packed[e : e + 1], w13_scales[e : e + 1])[0].float()
        w2 = dequantize_int4_g32(w2_packed[e : e + 1], w2_scales[e : e + 1])[0].float()
        gu = xf[tok] @ w13.T  # [n, 2I]
        h = torch.nn.functional.silu(gu[:, :I]) * gu[:, I:]
        y = (h @ w2.T) * topk_weights[tok, slot].float()[:, None]
        out.index_add_(0, tok, y)
    return out.to(x.dtype)


# ----------------------------------------------------------------------------------------
# The Triton kernel
# ----------------------------------------------------------------------------------------
try:  # jit helpers must be module globals for Triton to resolve them inside the kernel
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - importing this module does not need triton
    triton = None

# Dequantisation of a nibble n (= q + 8), selected by the DEQUANT constexpr:
DEQUANT_CVT = 0  # (n - 8) int -> fp32, times the scale, rounded once to bf16; portable (the CPU
# interpreter runs it: it cannot run PTX)
DEQUANT_BF16X2 = 2  # inline PTX, two weights per instruction in bf16x2 (Marlin's trick); CUDA only

# bf16x2 dequantisation: Triton hands the inline asm two elements per call (pack=2), and two
# int16 elements arrive as one 32-bit register: the half-words of rows j and j+1 of a column,
# as loaded. _nibble_asm(s) makes the group at nibble s of both as bf16x2 (w[e0], w[e1]) =
# (n - 8) * scale, rounded once to bf16 as the reference's fp32 product: shift (s > 0), lop3
# (v & 0x000F000F | 0x43004300) is bf16 128 + n, fma(v, 1, -136) is n - 8 exactly and
# fma(., scale, -0) applies the (group, column) scale pair: 2 instructions per weight plus the
# shift for three nibbles in four.


def _nibble_asm(shift: int) -> str:
    body = f"shr.u32 t, $1, {4 * shift};\nlop3.b32 v, t, " if shift else "lop3.b32 v, $1, "
    return ("{\n.reg .b32 t, v, one, off, nz;\n"
            "mov.b32 one, 0x3F803F80;\nmov.b32 off, 0xC308C308;\nmov.b32 nz, 0x80008000;\n"
            + body + "0x000F000F, 0x43004300, 0xEA;\n"
            "fma.rn.bf16x2 v, v, one, off;\nfma.rn.bf16x2 $0, v, $2, nz;\n}")


if triton is not None:
    # a jit function reads only constexpr globals
    _N0, _N1, _N2, _N3 = (tl.constexpr(_nibble_asm(i)) for i in range(4))

    @triton.jit
    def _nibble_bf16x2(half, sc, ASM: tl.constexpr):
        return tl.inline_asm_elementwise(ASM, "=r,r,r", [half, sc], dtype=tl.bfloat16, is_pure=True, pack=2)

    @triton.jit
    def _dequant_group(half, sc, nib: tl.constexpr, DEQUANT: tl.constexpr, DOT_F32: tl.constexpr):
        """Nibble `nib` (0..3) of the half-words `half` [32, BN] int16 ([BN, 32] when the MMA
        operands are swapped; one quantisation group), times its scales sc (broadcast along k)
        -> bf16 of the same shape (fp32 under DOT_F32: the interpreter's bf16 cast truncates
        instead of rounding)."""
        if DEQUANT == 2:  # DEQUANT_BF16X2
            if nib == 0:
                w = _nibble_bf16x2(half, sc, _N0)
            elif nib == 1:
                w = _nibble_bf16x2(half, sc, _N1)
            elif nib == 2:
                w = _nibble_bf16x2(half, sc, _N2)
            else:
                w = _nibble_bf16x2(half, sc, _N3)
        else:  # DEQUANT_CVT
            w = (((half.to(tl.int32) >> (4 * nib)) & 0xF) - 8).to(tl.float32) * sc.to(tl.float32)
            if not DOT_F32:
                w = w.to(tl.bfloat16)
        return w

    @triton.jit
    def _split8(st):
        """[BN, 8] -> its 8 columns, each [BN]."""
        BN: tl.constexpr = st.shape[0]
        even, odd = tl.split(tl.reshape(st, (BN, 4, 2)))
        e0, e1 = tl.split(tl.reshape(even, (BN, 2, 2)))
        o0, o1 = tl.split(tl.reshape(odd, (BN, 2, 2)))
        s0, s4 = tl.split(e0)
        s2, s6 = tl.split(e1)
        s1, s5 = tl.split(o0)
        s3, s7 = tl.split(o1)
        return s0, s1, s2, s3, s4, s5, s6, s7

    @triton.jit
    def _tile_cols(col, q_tile, s_tile):
        """Offsets (int32) of column `col`'s half-words and scales from its expert's start: column
        col % 64 of tile col // 64 (tiles of q_tile half-words and s_tile scales)."""
        return (col // 64) * q_tile + (col % 64) * 64, (col // 64) * s_tile + (col % 64) * 8

    @triton.jit
    def _group_mma(acc, a, w, SWAP: tl.constexpr, DOT_F32: tl.constexpr):
        """acc += a [BM, 32] . w [32, BN]; with SWAP, acc^T [BN, BM] += w^T [BN, 32] . a^T, so
        that the weights are the MMA's A operand (16 x 16 per m16n8k16 instead of 16 x 8)."""
        if DOT_F32:  # interpreter: its bf16 tl.dot is broken
            a = a.to(tl.float32)
        else:
            w = w.to(a.dtype)
        if SWAP:
            acc = tl.dot(w, tl.trans(a), acc)
        else:
            acc = tl.dot(a, w, acc)
        return acc

    @triton.jit
    def _act_group(a_base, i: tl.constexpr, row_ok, k_begin, K, EVEN_K: tl.constexpr):
        """Group i (32 k) of a K-block's activations [BM, 32] at a_base, padding rows (and k
        past K) as zeros."""
        if EVEN_K:  # padding rows (row 0 again) are not fetched
            return tl.load(a_base + i * 32, mask=row_ok[:, None], other=0.0)
        return tl.load(a_base + i * 32, mask=row_ok[:, None] & ((k_begin + i * 32 + tl.arange(0, 32)) < K)[None, :],
                       other=0.0)

    @triton.jit
    def _load_kblock(q_ptrs, s_ptrs):
        """One K-block's weight tile: its half-words of groups 0..3 and 4..7 (`lo`, `hi`, 32 apart)
        and its 8 scale columns."""
        return tl.load(q_ptrs), tl.load(q_ptrs + 32), _split8(tl.load(s_ptrs))

    @triton.jit
    def _k_block(acc, a_base, row_ok, k_begin, K, q_ptrs, s_ptrs, DEQUANT: tl.constexpr, DOT_F32: tl.constexpr,
                 EVEN_K: tl.constexpr, acc_up, q_up_ptrs, s_up_ptrs, GATE_UP: tl.constexpr, SWAP: tl.constexpr):
        """acc (and acc_up) += activations [BM, 256] . one K-block of weights: half-words
        q_ptrs [32, BN] ([BN, 32] with SWAP; groups 0..3, groups 4..7 32 further on) and
        scales [BN, 8]."""
        lo, hi, sc = _load_kblock(q_ptrs, s_ptrs)
        lo_up = lo
        hi_up = hi
        sc_up = sc
        if GATE_UP:
            lo_up, hi_up, sc_up = _load_kblock(q_up_ptrs, s_up_ptrs)
        for i in tl.static_range(8):
            a = _act_group(a_base, i, row_ok, k_begin, K, EVEN_K)
            s_i = sc[i][:, None] if SWAP else sc[i][None, :]
            w = _dequant_group(lo if i < 4 else hi, s_i, i % 4, DEQUANT, DOT_F32)
            acc = _group_mma(acc, a, w, SWAP, DOT_F32)
            if GATE_UP:
                su_i = sc_up[i][:, None] if SWAP else sc_up[i][None, :]
                wu = _dequant_group(lo_up if i < 4 else hi_up, su_i, i % 4, DEQUANT, DOT_F32)
                acc_up = _group_mma(acc_up, a, wu, SWAP, DOT_F32)
        return acc, acc_up

    @triton.jit
    def _dequant_kblock(q_ptrs, s_ptrs, DEQUANT: tl.constexpr, DOT_F32: tl.constexpr):
        """One K-block of weights in the swapped layout (q_ptrs [BN, 32] half-words, s_ptrs
        [BN, 8] scales), dequantised: its 8 groups, [BN, 32] each (`_k_block`'s first half)."""
        lo, hi, sc = _load_kblock(q_ptrs, s_ptrs)
        return (_dequant_group(lo, sc[0][:, None], 0, DEQUANT, DOT_F32),
                _dequant_group(lo, sc[1][:, None], 1, DEQUANT, DOT_F32),
                _dequant_group(lo, sc[2][:, None], 2, DEQUANT, DOT_F32),
                _dequant_group(lo, sc[3][:, None], 3, DEQUANT, DOT_F32),
                _dequant_group(hi, sc[4][:, None], 0, DEQUANT, DOT_F32),
                _dequant_group(hi, sc[5][:, None], 1, DEQUANT, DOT_F32),
                _dequant_group(hi, sc[6][:, None], 2, DEQUANT, DOT_F32),
                _dequant_group(hi, sc[7][:, None], 3, DEQUANT, DOT_F32))

    @triton.jit
    def _mma_kblock(acc, w, a_base, row_ok, k_begin, K, DOT_F32: tl.constexpr, EVEN_K: tl.constexpr):
        """acc^T += w^T . activations for the 8 dequantised groups w of one K-block (swapped
        operands; `_k_block`'s second half)."""
        for i in tl.static_range(8):
            acc = _group_mma(acc, _act_group(a_base, i, row_ok, k_begin, K, EVEN_K), w[i], True, DOT_F32)
        return acc

    @triton.jit
    def _arrive(cnt_ptr, expected, FENCE: tl.constexpr):
        """Count this program in at cnt_ptr (after all its threads' atomics: the barrier, then a
        gpu-scope acq_rel add); True in the last of `expected` programs to arrive, which then reads
        every other program's sums (`_read_sums`). FENCE (`ARRIVE_FENCE`, off by default) first
        has every thread fence its own atomics at gpu scope."""
        if FENCE:
            tl.inline_asm_elementwise("fence.acq_rel.gpu; // dummy $0", "=r", [], dtype=tl.int32, is_pure=False,
                                      pack=1)
        tl.debug_barrier()
        return tl.atomic_add(cnt_ptr, 1, sem="acq_rel", scope="gpu") == expected - 1

    @triton.jit
    def _prefetch_l2(ptrs):
        """prefetch.global.L2 of the line at each pointer (no register result, no wait)."""
        tl.inline_asm_elementwise("prefetch.global.L2 [$1]; // dummy $0", "=r,l", [ptrs], dtype=tl.int32,
                                  is_pure=False, pack=1)

    @triton.jit
    def _prefetch_weights(q_ptr, s_ptr, expert, cols, stride_qe, stride_se, num_kb, kb_begin, kb_end):
        """Pull the weight tiles of `expert`'s columns `cols` (K-blocks kb_begin..kb_end-1) into L2:
        a column's 64 half-words of a K-block are one 128 B line, its 8 scales 16 B of one."""
        q_col, s_col = _tile_cols(cols, num_kb * 4096, num_kb * 512)
        q_e = q_ptr + expert * stride_qe + q_col
        s_e = s_ptr + expert * stride_se + s_col
        for kb in range(kb_begin, kb_end):
            _prefetch_l2(q_e + kb * 4096)
            _prefetch_l2(s_e + kb * 512)

    @triton.jit
    def _read_sums(ptrs, m, CLEAN: tl.constexpr, ATOMIC_READ: tl.constexpr):
        """The fp32 sums at ptrs (masked by m, 0 elsewhere) as the last arrival reads them; with
        CLEAN the entries are left zero.

        ATOMIC_READ reads them with atomics (an exchange with 0 under CLEAN, else an add of 0),
        which are performed where the other programs' atomic adds were. Plain loads (.cg), even
        after the arrival's acquire and the barrier, sometimes returned sums without the most
        recent adds on the H200: the last token's row of a column tile short of some pairs, the
        workspace clean afterwards (evidence/kernel-defaults/moe-w4a16-atomic-read-and-pdl/). Off under the interpreter,
        which runs programs one after another and has no fp32 atomic exchange."""
        if ATOMIC_READ:
            if CLEAN:
                v = tl.atomic_xchg(ptrs, tl.zeros(ptrs.shape, tl.float32), mask=m, sem="relaxed", scope="gpu")
            else:
                v = tl.atomic_add(ptrs, tl.zeros(ptrs.shape, tl.float32), mask=m, sem="relaxed", scope="gpu")
            v = tl.where(m, v, 0.0)
        else:
            v = tl.load(ptrs, mask=m, other=0.0, cache_modifier=".cg")
            if CLEAN:
                tl.store(ptrs, tl.zeros_like(v), mask=m)
        return v

    @triton.jit
    def _cast_columns(src_ptr, dst_ptr, rows, stride_src, stride_dst, offs_n, n_ok, CAST_ROWS: tl.constexpr,
                      CLEAN: tl.constexpr, ATOMIC_READ: tl.constexpr):
        """dst[:rows, offs_n] = src[:rows, offs_n] (fp32, see _read_sums) in dst's dtype; with
        CLEAN the src entries are left zero (a self-cleaning workspace)."""
        for r0 in range(0, rows, CAST_ROWS):
            r = r0 + tl.arange(0, CAST_ROWS)
            m = (r < rows)[:, None] & n_ok[None, :]
            v = _read_sums(src_ptr + r[:, None].to(tl.int64) * stride_src + offs_n[None, :], m, CLEAN, ATOMIC_READ)
            tl.store(dst_ptr + r[:, None].to(tl.int64) * stride_dst + offs_n[None, :], v.to(dst_ptr.dtype.element_ty), mask=m)

    @triton.jit
    def _weight_tiles(q_ptr, s_ptr, expert, pid_n, offs_n, stride_qe, stride_se, num_kb, up_offset, n_last,
                      FAST_COLS: tl.constexpr, SWAP: tl.constexpr, BLOCK_N: tl.constexpr):
        """Where column tile pid_n of `expert` lives: the expert's half-word and scale bases and
        the offsets of one K-block's weight tile ([BN, 32] with SWAP, else [32, BN]) and scales
        [BN, 8], for the columns offs_n and (gate_up) offs_n + up_offset."""
        offs_j = tl.arange(0, 32)
        offs_g = tl.arange(0, 8)
        # Kernel layout: column n is column n % 64 of tile n // 64; a K-block of a tile is
        # 64*64 half-words and 64*8 scales.
        q_tile = num_kb * 4096  # int16 half-words per 64-column tile
        s_tile = num_kb * 512
        q_e = q_ptr + expert * stride_qe
        s_e = s_ptr + expert * stride_se
        if FAST_COLS:  # whole tiles, gate and up: one scalar base plus a compile-time pattern
            q_e += (pid_n * (BLOCK_N // 64)).to(tl.int64) * q_tile
            s_e += (pid_n * (BLOCK_N // 64)).to(tl.int64) * s_tile
            q_col, s_col = _tile_cols(tl.arange(0, BLOCK_N), q_tile, s_tile)
            q_col_up = q_col + (up_offset // 64) * q_tile
            s_col_up = s_col + (up_offset // 64) * s_tile
        else:  # any column: clamped into the padded N (results past N are masked at the store)
            q_col, s_col = _tile_cols(tl.minimum(offs_n, n_last), q_tile, s_tile)
            q_col_up, s_col_up = _tile_cols(tl.minimum(offs_n + up_offset, n_last), q_tile, s_tile)
        if SWAP:  # weight tiles [BN, 32]
            q_off = q_col[:, None] + offs_j[None, :]
            q_up_off = q_col_up[:, None] + offs_j[None, :]
        else:  # [32, BN]
            q_off = q_col[None, :] + offs_j[:, None]
            q_up_off = q_col_up[None, :] + offs_j[:, None]
        s_off = s_col[:, None] + offs_g[None, :]
        s_up_off = s_col_up[:, None] + offs_g[None, :]
        return q_e, s_e, q_off, q_up_off, s_off, s_up_off

    @triton.jit
    def _w4a16_moe_gemm_kernel(
        a_ptr, q_ptr, s_ptr, c_ptr, topk_w_ptr, sorted_ids_ptr, block_expert_ptr,
        N, K, num_pairs, up_offset, n_last, kb_per_split, num_kb,
        stride_am, stride_qe, stride_se, stride_cm,  # unit strides along K / N
        ws_ptr, cnt_ptr, stride_wm, out_rows,  # SPLIT_ACT / FINAL_CAST: fp32 workspace, arrival counters
        n_experts,  # block expert ids outside [0, n_experts) are unused blocks (pair routing: other ranks' experts)
        A_ROW_DIV: tl.constexpr,  # A row = pair // A_ROW_DIV (k for x, 1 for the intermediate)
        C_ROW_DIV: tl.constexpr,  # C row = pair // C_ROW_DIV (1 for the intermediate, k for out)
        GATE_UP: tl.constexpr,  # also compute columns n + up_offset and store silu(gate)*up
        MUL_ROUTED_WEIGHT: tl.constexpr,
        ATOMIC: tl.constexpr,  # fp32 atomic add into C (split-K and/or top-k reduction)
        DEQUANT: tl.constexpr,
        DOT_F32: tl.constexpr,  # interpreter only: its bf16 tl.dot is broken, so dot in fp32
        EVEN_K: tl.constexpr,  # K % 256 == 0: activation loads need no mask
        FAST_COLS: tl.constexpr,  # BLOCK_N >= 64 divides the padded N and up_offset: no column past it
        SWAP: tl.constexpr,  # BLOCK_M < 16: weights as the MMA's A operand, tokens as its N (8)
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
        # GATE_UP with split-K: gate and up partial sums go to ws (fp32 atomics); the last split of
        # each (block, column tile) to arrive applies SiLU*mul from ws and stores c
        SPLIT_ACT: tl.constexpr = False,
        # ATOMIC into ws (fp32); the last program of each column tile to arrive (all blocks and
        # splits, unused blocks included) casts ws[:out_rows] into c
        FINAL_CAST: tl.constexpr = False,
        # SPLIT_ACT / FINAL_CAST leave the workspace and the counters they used zeroed again (the
        # last arrival zeroes what it read and resets its counter): a persistent workspace then
        # needs no zeroing launch (`_pair_layer`)
        SELF_CLEAN: tl.constexpr = False,
        # programmatic dependent launch (sm_90+): PDL_TRIGGER lets the next launch (down) start at
        # once; PDL_WAIT (down, launched with launch_pdl) pulls its weight tiles into L2 while the
        # launch before it (gate_up) still runs, then waits for that launch's writes before it
        # reads anything else. Only the block's expert id (routing, written before gate_up) and
        # the weights are read before the wait.
        PDL_TRIGGER: tl.constexpr = False,
        PDL_WAIT: tl.constexpr = False,
        ARRIVE_FENCE: tl.constexpr = False,  # see _arrive
        ATOMIC_READ: tl.constexpr = False,  # see _read_sums
    ):
        if PDL_TRIGGER:
            tl.extra.cuda.gdc_launch_dependents()
        pid_n = tl.program_id(0)  # column tiles fastest: neighbouring programs share the expert
        pid_m = tl.program_id(1)
        pid_k = tl.program_id(2)
        expert = tl.load(block_expert_ptr + pid_m).to(tl.int64)
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        n_ok = offs_n < N
        kb_begin = pid_k * kb_per_split
        kb_end = tl.minimum(kb_begin + kb_per_split, num_kb)
        if PDL_WAIT:
            if (expert >= 0) & (expert < n_experts):
                cols = tl.minimum(offs_n, n_last)
                _prefetch_weights(q_ptr, s_ptr, expert, cols, stride_qe, stride_se, num_kb, kb_begin, kb_end)
                if GATE_UP:
                    _prefetch_weights(q_ptr, s_ptr, expert, tl.minimum(offs_n + up_offset, n_last), stride_qe,
                                      stride_se, num_kb, kb_begin, kb_end)
            tl.extra.cuda.gdc_wait()
        if (expert < 0) | (expert >= n_experts):
            if FINAL_CAST:  # unused blocks arrive too: the count is known at launch
                if _arrive(cnt_ptr + pid_n, tl.num_programs(1) * tl.num_programs(2), ARRIVE_FENCE):
                    _cast_columns(ws_ptr, c_ptr, out_rows, stride_wm, stride_cm, offs_n, n_ok, 8, SELF_CLEAN, ATOMIC_READ)
                    if SELF_CLEAN:
                        tl.store(cnt_ptr + pid_n, 0)
            return
        pair, row_ok, a_row = moe_block_rows(sorted_ids_ptr, pid_m, num_pairs, A_ROW_DIV, BLOCK_M)

        offs_j = tl.arange(0, 32)

        q_e, s_e, q_off, q_up_off, s_off, s_up_off = _weight_tiles(
            q_ptr, s_ptr, expert, pid_n, offs_n, stride_qe, stride_se, num_kb, up_offset, n_last, FAST_COLS, SWAP,
            BLOCK_N)
        a_base = a_ptr + a_row[:, None] * stride_am + offs_j[None, :]

        if SWAP:
            acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
        else:
            acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        acc_up = acc
        for kb in range(kb_begin, kb_end):
            q_kb = q_e + kb * 4096
            s_kb = s_e + kb * 512
            acc, acc_up = _k_block(acc, a_base + kb * 256, row_ok, kb * 256, K, q_kb + q_off, s_kb + s_off,
                                   DEQUANT, DOT_F32, EVEN_K, acc_up, q_kb + q_up_off, s_kb + s_up_off, GATE_UP,
                                   SWAP)
        if SPLIT_ACT:
            if SWAP:
                acc = tl.trans(acc)
                acc_up = tl.trans(acc_up)
            moe_store_rows(acc, ws_ptr, topk_w_ptr, pair, row_ok, offs_n, n_ok, stride_wm, 1, 1, False, True)
            moe_store_rows(acc_up, ws_ptr, topk_w_ptr, pair, row_ok, offs_n + up_offset, n_ok, stride_wm, 1, 1, False,
                           True)
            if _arrive(cnt_ptr + pid_m * tl.num_programs(0) + pid_n, tl.num_programs(2), ARRIVE_FENCE):
                g_row = ws_ptr + tl.where(row_ok, pair, 0).to(tl.int64)[:, None] * stride_wm + offs_n[None, :]
                m = row_ok[:, None] & n_ok[None, :]
                g = _read_sums(g_row, m, SELF_CLEAN, ATOMIC_READ)
                u = _read_sums(g_row + up_offset, m, SELF_CLEAN, ATOMIC_READ)
                if SELF_CLEAN:
                    tl.store(cnt_ptr + pid_m * tl.num_programs(0) + pid_n, 0)
                moe_store_rows(g / (1.0 + tl.exp(-g)) * u, c_ptr, topk_w_ptr, pair, row_ok, offs_n, n_ok, stride_cm, 1,
                               C_ROW_DIV, False, False)
        else:
            if GATE_UP:
                acc = acc / (1.0 + tl.exp(-acc)) * acc_up
            if SWAP:
                acc = tl.trans(acc)
            if FINAL_CAST:
                moe_store_rows(acc, ws_ptr, topk_w_ptr, pair, row_ok, offs_n, n_ok, stride_wm, 1,
                               C_ROW_DIV, MUL_ROUTED_WEIGHT, True)
                if _arrive(cnt_ptr + pid_n, tl.num_programs(1) * tl.num_programs(2), ARRIVE_FENCE):
                    _cast_columns(ws_ptr, c_ptr, out_rows, stride_wm, stride_cm, offs_n, n_ok, 8, SELF_CLEAN, ATOMIC_READ)
                    if SELF_CLEAN:
                        tl.store(cnt_ptr + pid_n, 0)
            else:
                moe_store_rows(acc, c_ptr, topk_w_ptr, pair, row_ok, offs_n, n_ok, stride_cm, 1,
                               C_ROW_DIV, MUL_ROUTED_WEIGHT, ATOMIC)

    @triton.jit
    def _w4a16_down_pairs_kernel(
        h_ptr, q_ptr, s_ptr, out_ptr, ids_ptr, tw_ptr,
        N, K, P, n_experts, num_kb, n_last,
        stride_hm, stride_qe, stride_se, stride_om,
        K_TOP: tl.constexpr,  # pair j is token j // K_TOP's
        T_OUT: tl.constexpr,  # tokens (output rows)
        PB: tl.constexpr,  # pairs as the MMA's N: a power of two >= P and >= 8
        DEQUANT: tl.constexpr, DOT_F32: tl.constexpr, EVEN_K: tl.constexpr,
        BLOCK_N: tl.constexpr, PDL_WAIT: tl.constexpr = False,
        PRELOAD: tl.constexpr = False,  # the first K-block in registers, dequantised, before the wait (`DOWN_PAIRS_PRELOAD_MAX_KB`)
    ):
        """down of the pair path at a few pairs (`DOWN_PAIRS_MAX_P`), one program per column tile
        summing every pair: the weights of all pairs' experts for the tile's columns are stacked
        as the MMA's A operand (row j * BLOCK_N + n: pair j's expert, column n) and the
        intermediate's rows are its N, so entry (j * BLOCK_N + n, j) of the [PB * BLOCK_N, PB]
        accumulator is pair j's product; the routed weights (fp32), the top-k sum and the cast
        then happen in registers: no fp32 atomics, no arrival counter, no workspace. PDL_WAIT:
        the weight tiles are pulled into L2 before griddepcontrol.wait (the topk ids are read
        before it: the routing precedes gate_up)."""
        pid_n = tl.program_id(0)
        MB: tl.constexpr = PB * BLOCK_N
        r = tl.arange(0, MB)
        jr = r // BLOCK_N  # the pair of stacked row r
        e = tl.load(ids_ptr + jr, mask=jr < P, other=-1).to(tl.int64)
        ok = (jr < P) & (e >= 0) & (e < n_experts)  # outside [0, E): another rank's expert
        e = tl.where(ok, e, 0)
        cols = tl.minimum(pid_n * BLOCK_N + r % BLOCK_N, n_last)
        q_col, s_col = _tile_cols(cols, num_kb * 4096, num_kb * 512)
        offs_j = tl.arange(0, 32)
        q_ptrs = q_ptr + e[:, None] * stride_qe + q_col[:, None] + offs_j[None, :]
        s_ptrs = s_ptr + e[:, None] * stride_se + s_col[:, None] + tl.arange(0, 8)[None, :]
        if PRELOAD:  # K-block 0 loaded and dequantised while gate_up still runs (under PDL_WAIT)
            w_first = _dequant_kblock(q_ptrs, s_ptrs, DEQUANT, DOT_F32)
        if PDL_WAIT:
            _prefetch_weights(q_ptr, s_ptr, e, cols, stride_qe, stride_se, num_kb, 1 if PRELOAD else 0, num_kb)
            tl.extra.cuda.gdc_wait()
        rows = tl.arange(0, PB)
        e_row = tl.load(ids_ptr + rows, mask=rows < P, other=-1)
        # a foreign pair's intermediate row is never written (gate_up skips it): not loaded
        row_ok = (rows < P) & (e_row >= 0) & (e_row < n_experts)
        a_base = h_ptr + rows[:, None] * stride_hm + offs_j[None, :]
        acc = tl.zeros((MB, PB), dtype=tl.float32)
        kb_first = 0
        if PRELOAD:
            acc = _mma_kblock(acc, w_first, a_base, row_ok, 0, K, DOT_F32, EVEN_K)
            kb_first = 1
        for kb in range(kb_first, num_kb):
            acc, _ = _k_block(acc, a_base + kb * 256, row_ok, kb * 256, K, q_ptrs + kb * 4096, s_ptrs + kb * 512,
                              DEQUANT, DOT_F32, EVEN_K, acc, q_ptrs, s_ptrs, False, True)
        tw = tl.load(tw_ptr + rows, mask=rows < P, other=0.0).to(tl.float32)
        # row r keeps column jr (its own pair), times that pair's routed weight
        mine = (rows[None, :] == jr[:, None]) & ok[:, None]
        per_pair = tl.reshape(tl.sum(tl.where(mine, acc * tw[None, :], 0.0), axis=1), (PB, BLOCK_N))  # [pair, column]
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        n_ok = offs_n < N
        for t in tl.static_range(T_OUT):
            o = tl.sum(tl.where((rows // K_TOP == t)[:, None], per_pair, 0.0), axis=0)
            tl.store(out_ptr + t * stride_om + offs_n, o.to(out_ptr.dtype.element_ty), mask=n_ok)

    # ------------------------------------------------------------------------------------
    # The layer at a few tokens (T <= 8) in two launches, no alignment step (`_direct_layer`)
    # ------------------------------------------------------------------------------------
    @triton.jit
    def _direct_rows(ids_ptr, p, T, E, stride_it, K_TOP: tl.constexpr, KP: tl.constexpr, BLOCK_M: tl.constexpr):
        """(token, slot) pair p = t*K_TOP + s read straight from topk_ids: its expert e, whether p
        is the expert's first pair (its leader: only leaders compute, so each touched expert is
        read once), and the expert's rows: row t is token t (T <= BLOCK_M), present iff token t
        routes to e, at pair t*K_TOP + (its slot). A token's top-k ids are distinct."""
        e = tl.load(ids_ptr + (p // K_TOP) * stride_it + p % K_TOP).to(tl.int32)
        t = tl.arange(0, BLOCK_M)
        s = tl.arange(0, KP)
        ok = (t < T)[:, None] & (s < K_TOP)[None, :]
        ids = tl.load(ids_ptr + t[:, None] * stride_it + s[None, :], mask=ok, other=-1).to(tl.int32)
        match = ok & (ids == e)
        flat = t[:, None] * K_TOP + s[None, :]
        earlier = tl.sum((match & (flat < p)).to(tl.int32))
        lead = (earlier == 0) & (e >= 0) & (e < E)
        row_ok = tl.max(match.to(tl.int32), axis=1) > 0
        slot = tl.min(tl.where(match, s[None, :], KP), axis=1)
        pair = t * K_TOP + tl.where(row_ok, slot, 0)
        return e.to(tl.int64), lead, row_ok, pair

    @triton.jit
    def _w4a16_direct_gate_up(
        x_ptr, q_ptr, s_ptr, ids_ptr, part_ptr, zero_ptr,
        T, E, K, N, n_last, kb_per_split, num_kb, n_zero,
        stride_xm, stride_qe, stride_se, stride_it, sp_s, sp_p, sp_t,
        K_TOP: tl.constexpr, KP: tl.constexpr, DEQUANT: tl.constexpr, DOT_F32: tl.constexpr,
        EVEN_K: tl.constexpr, FAST_COLS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
        BLOCK_Z: tl.constexpr,
    ):
        """gate and up partial sums of one (column tile, leader pair, K split): plain stores into
        part[split, pair, token, :2N] (no atomics, no zeroing). Every program also zeroes its share
        of `zero` (the down launch's fp32 sum and arrival counters)."""
        pid_n = tl.program_id(0)
        p = tl.program_id(1)
        pid_k = tl.program_id(2)
        nprog = tl.num_programs(0) * tl.num_programs(1) * tl.num_programs(2)
        lin = pid_n + tl.num_programs(0) * (p + tl.num_programs(1) * pid_k)
        for z0 in range(lin * BLOCK_Z, n_zero, nprog * BLOCK_Z):
            oz = z0 + tl.arange(0, BLOCK_Z)
            tl.store(zero_ptr + oz, tl.zeros((BLOCK_Z,), tl.float32), mask=oz < n_zero)
        expert, lead, row_ok, pair = _direct_rows(ids_ptr, p, T, E, stride_it, K_TOP, KP, BLOCK_M)
        if lead:
            offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
            n_ok = offs_n < N
            q_e, s_e, q_off, q_up_off, s_off, s_up_off = _weight_tiles(
                q_ptr, s_ptr, expert, pid_n, offs_n, stride_qe, stride_se, num_kb, N, n_last, FAST_COLS, True,
                BLOCK_N)
            t = tl.arange(0, BLOCK_M)
            a_base = x_ptr + tl.where(row_ok, t, 0).to(tl.int64)[:, None] * stride_xm + tl.arange(0, 32)[None, :]
            acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
            acc_up = acc
            kb_begin = pid_k * kb_per_split
            for kb in range(kb_begin, tl.minimum(kb_begin + kb_per_split, num_kb)):
                q_kb = q_e + kb * 4096
                s_kb = s_e + kb * 512
                acc, acc_up = _k_block(acc, a_base + kb * 256, row_ok, kb * 256, K, q_kb + q_off, s_kb + s_off,
                                       DEQUANT, DOT_F32, EVEN_K, acc_up, q_kb + q_up_off, s_kb + s_up_off, True, True)
            dst = part_ptr + pid_k * sp_s + p * sp_p + t[:, None] * sp_t + offs_n[None, :]
            m = row_ok[:, None] & n_ok[None, :]
            tl.store(dst, tl.trans(acc), mask=m)
            tl.store(dst + N, tl.trans(acc_up), mask=m)

    @triton.jit
    def _w4a16_direct_down(
        part_ptr, q_ptr, s_ptr, ids_ptr, tw_ptr, sum_ptr, cnt_ptr, out_ptr,
        T, E, N, K, n_last, num_kb, n_split,
        stride_qe, stride_se, stride_it, stride_tw, sp_s, sp_p, sp_t, stride_om,
        K_TOP: tl.constexpr, KP: tl.constexpr, SP: tl.constexpr, DEQUANT: tl.constexpr, DOT_F32: tl.constexpr,
        FAST_COLS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, ARRIVE_FENCE: tl.constexpr = False,
        ATOMIC_READ: tl.constexpr = False,
    ):
        """down for one (column tile, leader pair): the activation silu(gate)*up is formed on load
        from the gate_up partials (summed over the splits), times the expert's weights, times
        the routed weight, fp32-atomically summed over the top-k into sum[token]; the last program
        of each column tile to arrive (all pairs) casts its columns into out."""
        pid_n = tl.program_id(0)
        p = tl.program_id(1)
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        n_ok = offs_n < N
        expert, lead, row_ok, pair = _direct_rows(ids_ptr, p, T, E, stride_it, K_TOP, KP, BLOCK_M)
        if lead:
            q_e, s_e, q_off, q_up_off, s_off, s_up_off = _weight_tiles(
                q_ptr, s_ptr, expert, pid_n, offs_n, stride_qe, stride_se, num_kb, 0, n_last, FAST_COLS, True,
                BLOCK_N)
            t = tl.arange(0, BLOCK_M)
            sp = tl.arange(0, SP)
            j = tl.arange(0, 32)
            h_base = part_ptr + p * sp_p + sp[:, None, None] * sp_s + t[None, :, None] * sp_t + j[None, None, :]
            h_ok = (sp < n_split)[:, None, None] & row_ok[None, :, None]
            acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
            for kb in range(0, num_kb):
                q_kb = q_e + kb * 4096
                s_kb = s_e + kb * 512
                lo = tl.load(q_kb + q_off)
                hi = tl.load(q_kb + q_off + 32)
                sc = _split8(tl.load(s_kb + s_off))
                for i in tl.static_range(8):
                    k0 = kb * 256 + i * 32
                    m = h_ok & ((k0 + j) < K)[None, None, :]
                    g = tl.sum(tl.load(h_base + k0, mask=m, other=0.0), axis=0)
                    u = tl.sum(tl.load(h_base + k0 + K, mask=m, other=0.0), axis=0)
                    a = g / (1.0 + tl.exp(-g)) * u
                    if DOT_F32:
                        a = a.to(out_ptr.dtype.element_ty).to(tl.float32)  # the bf16 intermediate's rounding
                    else:
                        a = a.to(out_ptr.dtype.element_ty)
                    w = _dequant_group(lo if i < 4 else hi, sc[i][:, None], i % 4, DEQUANT, DOT_F32)
                    acc = _group_mma(acc, a, w, True, DOT_F32)
            rw = tl.load(tw_ptr + t * stride_tw + (pair - t * K_TOP), mask=row_ok, other=0.0).to(tl.float32)
            acc = tl.trans(acc) * rw[:, None]
            tl.atomic_add(sum_ptr + t[:, None] * N + offs_n[None, :], acc, mask=row_ok[:, None] & n_ok[None, :],
                          sem="relaxed")
        if _arrive(cnt_ptr + pid_n, tl.num_programs(1), ARRIVE_FENCE):
            _cast_columns(sum_ptr, out_ptr, T, N, stride_om, offs_n, n_ok, 8, False, ATOMIC_READ)


    _DIRECT_GATE_UP = FastLauncher(_w4a16_direct_gate_up)
    _DIRECT_DOWN = FastLauncher(_w4a16_direct_down)
    _MOE_GEMM = FastLauncher(_w4a16_moe_gemm_kernel)  # eager calls skip Triton's Python binder
    _DOWN_PAIRS = FastLauncher(_w4a16_down_pairs_kernel)


def _check_block_n(cfg: MoEGemmConfig, what: str = "") -> None:
    if cfg.block_n < 16 or cfg.block_n & (cfg.block_n - 1):
        raise ValueError(f"{what}block_n={cfg.block_n}: the INT4 kernel takes a power of two >= 16")


def _k_splits(num_kb: int, split_k: int) -> tuple[int, int]:
    """(K-blocks per split, splits) of a launch asked for split_k splits of num_kb K-blocks:
    every split but the last gets the same whole number of K-blocks, so fewer splits may run."""
    per = -(-num_kb // split_k)
    return per, -(-num_kb // per)


def _launch(
    a: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, c: torch.Tensor,
    topk_weights: torch.Tensor | None, routing: AlignedRouting, *, n: int, k_dim: int,
    a_row_div: int, c_row_div: int, gate_up: bool, atomic: bool, cfg: MoEGemmConfig,
    ws: torch.Tensor | None = None, counters: torch.Tensor | None = None, out_rows: int = 0,
    n_experts: int | None = None, self_clean: bool = False, pdl_trigger: bool = False, pdl_wait: bool = False,
) -> None:
    """c[pair // c_row_div, :n] (+)= a[pair // a_row_div, :k_dim] @ W[expert] over aligned
    blocks; with gate_up, columns n.. of W are the up half and c gets silu(gate)*up.
    With `ws` (zeroed fp32) and `counters` (zeroed int32): gate_up with split-K sums into ws
    [pairs, 2n] and its last split applies the activation into c (SPLIT_ACT); otherwise the
    atomic sum goes to ws [out_rows, n] and the last program of each column tile casts it into
    c (FINAL_CAST). pdl_trigger / pdl_wait: programmatic dependent launch, see `MOE_PDL`
    (ignored under the interpreter)."""
    assert a.stride(1) == 1 and qweight.is_contiguous() and scales.is_contiguous() and c.stride(1) == 1
    _check_block_n(cfg)
    if cfg.dequant not in (DEQUANT_CVT, DEQUANT_BF16X2):
        raise ValueError(f"dequant={cfg.dequant}: expected {DEQUANT_CVT} (convert) or {DEQUANT_BF16X2} (bf16x2 PTX)")
    num_kb = qweight.shape[2]
    np_ = qweight.shape[1] * TILE_N
    kb_per_split, n_split = _k_splits(num_kb, cfg.split_k)
    tw = topk_weights if topk_weights is not None else c
    grid = (cdiv(n, cfg.block_n), routing.max_blocks, n_split)
    interp = interpreting()
    split_act = ws is not None and gate_up and grid[2] > 1
    final_cast = ws is not None and not gate_up
    if split_act or final_cast:
        assert counters is not None and counters.numel() >= (grid[0] * grid[1] if split_act else grid[0])
        assert atomic == final_cast, "SPLIT_ACT stores c, FINAL_CAST sums with atomics"
    _fire(_MOE_GEMM, grid, (
        a, qweight, scales, c, tw, routing.sorted_pair_ids, routing.block_expert_ids,
        n, k_dim, routing.num_pairs, n if gate_up else 0, np_ - 1, kb_per_split, num_kb,
        a.stride(0), qweight.stride(0), scales.stride(0), c.stride(0),
        ws if ws is not None else c, counters if counters is not None else routing.block_expert_ids,
        ws.stride(0) if ws is not None else 0, out_rows, qweight.shape[0] if n_experts is None else n_experts,
    ), dict(
        A_ROW_DIV=a_row_div, C_ROW_DIV=c_row_div, GATE_UP=gate_up,
        MUL_ROUTED_WEIGHT=topk_weights is not None, ATOMIC=atomic,
        DEQUANT=DEQUANT_CVT if interp else cfg.dequant,
        DOT_F32=interp, EVEN_K=k_dim % KBLOCK == 0, SWAP=routing.block_m < 16,
        FAST_COLS=cfg.block_n >= TILE_N and np_ % cfg.block_n == 0 and (not gate_up or n % cfg.block_n == 0),
        BLOCK_M=routing.block_m, BLOCK_N=cfg.block_n, SPLIT_ACT=split_act, FINAL_CAST=final_cast,
        SELF_CLEAN=self_clean and (split_act or final_cast),
        PDL_TRIGGER=pdl_trigger and not interp, PDL_WAIT=pdl_wait and not interp,
        ARRIVE_FENCE=ARRIVE_FENCE and not interp, ATOMIC_READ=ATOMIC_READ and not interp,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages,
        **({"launch_pdl": True} if pdl_wait and not interp else {}),
        **({} if cfg.max_regs is None or interp else dict(maxnreg=cfg.max_regs)),
    ))


_RECORD: list | None = None  # while a pair-path plan is made (`_plan_pair_layer`): the launches, not made


def _fire(launcher, grid, args, kw) -> None:
    """One launch of the pair path's kernels (`_launch`, `_down_pairs`), or its record while a
    plan is made."""
    if _RECORD is not None:
        _RECORD.append((launcher, grid, args, kw))
    else:
        launcher[grid](*args, **kw)

_CONFIGS: dict = {}


def default_configs(T: int, k: int, E: int, H: int, I: int, num_sms: int = 132):
    """`_default_configs`, remembered per shape (an eager layer call asks once or twice)."""
    key = (T, k, E, H, I, num_sms, FUSED_ACT_MAX_T)
    got = _CONFIGS.get(key)
    if got is None:
        got = _CONFIGS[key] = _default_configs(T, k, E, H, I, num_sms)
    return got


def _default_configs(T: int, k: int, E: int, H: int, I: int, num_sms: int = 132):
    """(block_m, gate_up MoEGemmConfig, down MoEGemmConfig) used when none is given.

    Where the activation is fused (T <= FUSED_ACT_MAX_T), a split-K gate_up that still leaves
    fewer than 2 programs per SM splits K once more while each split keeps >= 3 K-blocks (as
    measured: Kimi TP8 at T=1 went from 4 splits of 7 K-blocks to 7 of 4, 25.6 -> 22.6 us for
    the layer; evidence/kernel-defaults/tree-attention-mla-many-heads/sweep_decode_24bfb53.log). Shallower splits are not
    measured."""
    bm, gu, dn = default_moe_configs(T, k, E, H, I, int4=True, num_sms=num_sms)
    num_kb = padded_k(H) // KBLOCK
    progs = max_num_blocks(T * k, E, bm) * -(-I // gu.block_n)
    if T <= FUSED_ACT_MAX_T and gu.split_k > 1 and progs * gu.split_k < 2 * num_sms and num_kb // (2 * gu.split_k) >= 3:
        gu = MoEGemmConfig(**{**gu.__dict__, "split_k": 2 * gu.split_k})
    return bm, gu, dn


def fused_moe_w4a16(
    x: torch.Tensor,
    w13_q: torch.Tensor,
    w13_s: torch.Tensor,
    w2_q: torch.Tensor,
    w2_s: torch.Tensor,
    topk_ids: torch.Tensor,
    topk_weights: torch.Tensor,
    *,
    block_m: int | None = None,
    gate_up_config: MoEGemmConfig | dict | None = None,
    down_config: MoEGemmConfig | dict | None = None,
    fused_epilogues: bool | None = None,
    direct: bool | None = None,
    pair_blocks: bool | None = None,
    pdl: bool | None = None,
    down_pairs: bool | None = None,
) -> torch.Tensor:
    """Kernel-layout weights (`pack_for_kernel`): w13_q [E, 2I/64, Hp/256, 64, 2, 32] (gate rows
    0..I-1, up rows I..2I-1), w2_q [E, Hp'/64, Ip/256, 64, 2, 32] with Hp' = H padded to 64.

    Two Triton launches (gate_up with fused SiLU*mul, down with routed weight + top-k sum)
    after the align step (`_moe_common.run_fused_moe`). Knobs default to `default_configs(T, k, E, H, I)`;
    configs may be given as MoEGemmConfig or as a dict of the fields to override. block_k
    is fixed at 256 by the layout (split_k divides K in 256-blocks).

    fused_epilogues (default: T <= FUSED_EPILOGUE_MAX_T): align, one zeroed workspace, gate_up
    and down are the whole layer (4 launches): a split-K gate_up's last split of each tile
    applies SiLU*mul, and down's last program per column tile casts the fp32 sum to the output
    dtype (arrival counters), instead of a torch activation and a torch cast (9 launches).

    direct (default: T <= DIRECT_MAX_T when block_m is not given; DIRECT_MAX_T is 0): the
    layer in two launches with no alignment step (`_direct_layer`), T <= 8; the configs then
    set its gate_up (block_n, split_k, warps, stages) and down (block_n, warps, stages).

    pair_blocks (default: DIRECT_MAX_T < T <= PAIR_BLOCKS_MAX_T when none of block_m, direct and
    fused_epilogues=False is given): the
    layer in two launches, gate_up and down, with no alignment step (`_pair_layer`): one block
    of 8 rows per (token, slot) pair, whose expert is read straight from topk_ids, and a
    persistent self-cleaning workspace (one layer call at a time per device).

    pdl (default: `pdl_default`, one token and a small down on sm_90+; off under the
    interpreter): where down directly follows gate_up (the pair path, and the fused-epilogue
    path when gate_up applies the activation), down is a programmatic dependent launch that
    pulls its weights into L2 while gate_up runs.

    down_pairs (default: at most DOWN_PAIRS_MAX_P pairs; pair path only): down as one program
    per column tile that sums every pair in registers (`_down_pairs`), no atomics or arrival;
    down_config then sets its tile (default `down_pairs_config`)."""
    sig = None
    if (block_m is None and gate_up_config is None and down_config is None and fused_epilogues is None
            and direct is None and pair_blocks is None and pdl is None and down_pairs is None):
        sig = _pair_sig(x, w13_q, w13_s, w2_q, w2_s, topk_ids, topk_weights)
        plan = _PAIR_PLANS.get(sig) if sig is not None else None
        if plan is not None:
            out = _run_pair_plan(plan, x, w13_q, w13_s, w2_q, w2_s, topk_ids, topk_weights)
            if out is not None:
                return out
            sig = None  # not launched directly now (a launch hook, a misaligned pointer): no new plan
    T, H = x.shape
    E = w13_q.shape[0]
    I = w13_q.shape[1] * TILE_N // 2  # I is a multiple of 32, so 2I needs no column padding
    k = topk_ids.shape[1]
    assert w13_q.shape[1:] == (padded_n(2 * I) // TILE_N, padded_k(H) // KBLOCK, TILE_N, 2, GROUP), \
        f"w13_q {tuple(w13_q.shape)} is not the kernel layout for H={H}, I={I}"
    assert w2_q.shape[1:] == (padded_n(H) // TILE_N, padded_k(I) // KBLOCK, TILE_N, 2, GROUP), \
        f"w2_q {tuple(w2_q.shape)} is not the kernel layout for H={H}, I={I}"
    if pair_blocks if pair_blocks is not None else (T <= PAIR_BLOCKS_MAX_T and block_m is None and direct is None
                                                    and T > DIRECT_MAX_T and fused_epilogues is not False):
        if T * k > PAIR_BLOCKS_MAX_PAIRS:
            raise ValueError(f"pair_blocks=True takes at most {PAIR_BLOCKS_MAX_PAIRS} (token, slot) pairs, got {T * k}")
        _, gu, dn = default_configs(T, k, E, H, I)
        gu, dn = as_config(gate_up_config, gu), as_config(down_config, dn)
        ws = _persistent_workspace(x.device, sum(_pair_workspace(T, k, H, I, gu, dn)))
        if ws is not None:
            if sig is not None:
                return _plan_pair_layer(sig, x, w13_q, w13_s, w2_q, w2_s, topk_ids, topk_weights, ws, E=E, I=I,
                                        gu=gu, dn=dn)
            return _pair_layer(x, w13_q, w13_s, w2_q, w2_s, topk_ids, topk_weights, ws, E=E, I=I, gu=gu, dn=dn,
                               pdl=pdl, down_pairs=down_pairs, down_config=down_config)
    if direct if direct is not None else (T <= DIRECT_MAX_T and block_m is None):
        if T > 8:
            raise ValueError(f"direct=True takes at most 8 tokens, got T={T}")
        gu, dn = direct_configs(T, k, E, H, I)
        return _direct_layer(x, w13_q, w13_s, w2_q, w2_s, topk_ids, topk_weights, E=E, I=I,
                             gu=as_config(gate_up_config, gu), dn=as_config(down_config, dn))
    bm, gu, dn = default_configs(T, k, E, H, I)
    weights = {"w13": (w13_q, w13_s), "w2": (w2_q, w2_s)}

    def gemm(a, which, c, tw, routing, **kw):
        _launch(a, *weights[which], c, tw, routing, **kw)

    gu, dn = as_config(gate_up_config, gu), as_config(down_config, dn)
    act = T <= FUSED_ACT_MAX_T if fused_epilogues is None else bool(fused_epilogues)
    cast = T <= FUSED_CAST_MAX_T if fused_epilogues is None else bool(fused_epilogues)
    if act or cast:
        return _fused_layer(x, topk_ids, topk_weights, gemm, E=E, I=I, block_m=block_m or bm, gu=gu, dn=dn,
                            act=act, cast=cast, pdl=pdl)
    return run_fused_moe(
        x, topk_ids, topk_weights, gemm, num_experts=E, inter=I, block_m=block_m or bm,
        gate_up_cfg=gu, down_cfg=dn,
    )


# Down as a programmatic dependent launch of gate_up (sm_90+): gate_up lets it start at once, its
# programs pull their weight tiles into L2 while gate_up runs (at one token gate_up fills about a
# third of one wave, so they find room), and wait (griddepcontrol.wait) for gate_up's writes
# before reading the intermediate. Off: down starts when gate_up ends and reads its weights from
# DRAM then. The `pdl` knob of fused_moe_w4a16 picks either. On the H200 it was faster at one
# token (Kimi TP8 slice and Qwen3-30B-A3B, 0.1-1.1 us in three runs) and slower from two tokens
# and at Kimi I=2048 (down's waiting programs hold SM slots gate_up then needs, and its prefetch
# competes for bandwidth gate_up uses), so it is on up to MOE_PDL_MAX_T tokens
# (evidence/kernel-defaults/moe-w4a16-atomic-read-and-pdl/).
MOE_PDL = True
MOE_PDL_MAX_T = 1
# where down is a dependent launch (`pdl_default`) and K (the expert width) is at most this many
# 256-blocks, down's programs load and dequantise their first K-block of weights into registers
# before they wait for gate_up, instead of only prefetching it into L2 (`PRELOAD`). On the H200 at
# one token (evidence/kernel-defaults/moe-w4a16-down-preload/): Kimi TP8 slice (1 block) 16.1 against 17.5 us;
# Qwen3-30B-A3B (3 blocks, 4 warps) slower, 17.0 against 16.2
DOWN_PAIRS_PRELOAD_MAX_KB = 1
# ... and only while down's weights (prefetched into L2) are a small share of it: faster at 7 and
# 8.3 MB (Qwen3-30B-A3B, Kimi TP8 slice: a seventh or a sixth of the H200's 50 MB of L2,
# hwspecs/SOURCES.md), 10 us slower at 66 MB (Kimi I=2048, T = 1), where the prefetch overflows
# the L2 and competes with gate_up
MOE_PDL_MAX_L2_SHARE = 0.25
# every thread fences its fp32 atomic adds before its program counts itself in at an arrival
# counter (`_arrive`). Off: the barrier and the arriving thread's gpu-scope release already order
# them in the PTX memory model, and on the H200 the fence cost 0.7 us at one token and
# closed nothing: the wrong sums came from the reading side (ATOMIC_READ), and with the atomic
# read 0 of 1,600 checked calls were wrong without it (evidence/kernel-defaults/moe-w4a16-atomic-read-and-pdl/)
ARRIVE_FENCE = False
# the last arrival reads the fp32 sums with atomics (`_read_sums`): with plain loads 9-30 of 400
# layer calls were wrong at Kimi I=2048, T = 2 and 4 (pair path), with atomic reads 0 of 1,600;
# it costs at most 0.6 us (evidence/kernel-defaults/moe-w4a16-atomic-read-and-pdl/). False only to reproduce
# the race (tools/stress.py with the knob @ATOMIC_READ=false)
ATOMIC_READ = True


def _sms(device: torch.device) -> int:
    facts = facts_of(device)
    return facts.num_sms if facts else 132


def pdl_supported(device: torch.device) -> bool:
    """MOE_PDL, on a CUDA device of compute capability 9 or more, outside the interpreter."""
    facts = facts_of(device)
    return MOE_PDL and facts is not None and not interpreting() and facts.cc_major >= 9


def pdl_default(device: torch.device, T: int, k: int, H: int, I: int) -> bool:
    """Down as a dependent launch by default: at most MOE_PDL_MAX_T tokens, and down's weights of
    the touched experts (a third of each expert's bytes) at most MOE_PDL_MAX_L2_SHARE of the L2
    (they are prefetched into it)."""
    if T > MOE_PDL_MAX_T or not pdl_supported(device):
        return False
    return T * k * expert_bytes(H, I) / 3 <= MOE_PDL_MAX_L2_SHARE * facts_of(device).l2_bytes


# Fused epilogues (`_fused_layer`) by token count. The activation: a split-K gate_up's last split
# per tile applies it (otherwise a torch SiLU*mul and cast after the GEMM). The cast: down's last
# program per column tile casts the fp32 sum (otherwise a torch cast). Both also move the
# workspace memset into the one-program align kernel, which costs more than it saves once the
# workspace grows (T >= 4); on the H200, Kimi TP8:
# evidence/kernel-defaults/tree-attention-mla-many-heads/sweep_decode_24bfb53.log.
FUSED_ACT_MAX_T = 2
FUSED_CAST_MAX_T = 2


def _fused_layer(x, topk_ids, topk_weights, gemm, *, E, I, block_m, gu, dn, act=True, cast=True, pdl=None):
    """The whole layer with the fused epilogues: the align kernel also zeroes one workspace
    [gate_up sums | down sum | arrival counters (int32, zero bits)], then gate_up and down."""
    T, H = x.shape
    k = topk_ids.shape[1]
    tw = topk_weights.reshape(-1).to(torch.float32).contiguous()
    x = x.contiguous()
    num_kb = padded_k(H) // KBLOCK
    split_act = act and _k_splits(num_kb, gu.split_k)[1] > 1  # the launch's split count
    g_n = T * k * 2 * I if gu.split_k > 1 else 0  # fp32 gate_up sums (also the unfused split path's)
    max_blocks = max_num_blocks(T * k, E, block_m)
    cnt_gu = max_blocks * -(-I // gu.block_n) if split_act else 0
    cnt_dn = -(-H // dn.block_n) if cast else 0
    ws = torch.empty(g_n + T * H + cnt_gu + cnt_dn, dtype=torch.float32, device=x.device)
    routing = moe_align_block_size(topk_ids, E, block_m, zero=ws)
    counters = ws[g_n + T * H:].view(torch.int32)
    g = ws[:g_n].view(T * k, 2 * I) if g_n else None
    fused_act = gu.split_k == 1 or split_act  # gate_up stores the activation: down directly follows it
    pdl = (pdl_default(x.device, T, k, H, I) if pdl is None else pdl) and fused_act
    if fused_act:
        h = torch.empty((T * k, I), dtype=x.dtype, device=x.device)
        gemm(x, "w13", h, None, routing, n=I, k_dim=H, a_row_div=k, c_row_div=1, gate_up=True, atomic=False, cfg=gu,
             ws=g if split_act else None, counters=counters[:cnt_gu] if split_act else None, pdl_trigger=pdl)
    else:
        gemm(x, "w13", g, None, routing, n=2 * I, k_dim=H, a_row_div=k, c_row_div=1, gate_up=False, atomic=True, cfg=gu)
        h = (torch.nn.functional.silu(g[:, :I]) * g[:, I:]).to(x.dtype)
    acc = ws[g_n:g_n + T * H].view(T, H)
    if cast:
        out = torch.empty((T, H), dtype=x.dtype, device=x.device)
        gemm(h, "w2", out, tw, routing, n=H, k_dim=I, a_row_div=1, c_row_div=k, gate_up=False, atomic=True, cfg=dn,
             ws=acc, counters=counters[cnt_gu:], out_rows=T, pdl_wait=pdl)
        return out
    gemm(h, "w2", acc, tw, routing, n=H, k_dim=I, a_row_div=1, c_row_div=k, gate_up=False, atomic=True, cfg=dn,
         pdl_wait=pdl)
    return acc.to(x.dtype)


# The layer at T <= 8 tokens in two launches with no alignment step (`direct=True`; off by
# default). Each (token, slot) pair reads its expert from topk_ids; the first pair of each expert
# gathers the expert's tokens (at most T <= 8: the MMA's N) and the others exit. gate_up stores
# per-split partial sums (no atomics, so nothing to zero) and zeroes down's fp32 sum and
# counters; down forms SiLU*mul on load from the partials, sums the top-k with fp32 atomics, and
# its last program per column tile casts. Measured slower than the aligned path on the H200 at
# every T <= 8 (Kimi TP8 slice: 22.8 against 22.4 us at T=1 with 4 splits, 87.5 against 66.9 at
# T=8), though its gate_up alone, zeroing included, takes 9.8 us at T=1: down, which re-reads the
# partials per column tile, is the slow part (evidence/kernel-defaults/moe-direct-path-and-attention-combine/). DIRECT_MAX_T
# turns it on by default up to that T.
DIRECT_MAX_T = 0
DIRECT_PARTS = "both"  # tuning only (tools/ab.py --time-failed, knob @DIRECT_PARTS=gate_up): "gate_up" skips down


def direct_configs(T: int, k: int, E: int, H: int, I: int, num_sms: int = 132):
    """(gate_up, down) MoEGemmConfig of the two-launch path: gate_up 64 columns x 4 warps x 3
    stages split along K to about one program per SM (each split >= 7 K-blocks: down reads
    every split's partials; at T=1 on the Kimi TP8 slice 4 splits took 22.8 us for the layer,
    7 took 47.3 and 14 took 86.9), down 128 columns x 4 warps x 2 stages, no split."""
    num_kb = padded_k(H) // KBLOCK
    base = -(-I // 64) * T * min(k, E)
    split = max(1, min(num_kb // 7, num_sms // max(base, 1)))
    return (MoEGemmConfig(block_n=64, block_k=KBLOCK, split_k=split, num_warps=4, num_stages=3),
            MoEGemmConfig(block_n=128, block_k=KBLOCK, split_k=1, num_warps=4, num_stages=2))


def _direct_layer(x, w13_q, w13_s, w2_q, w2_s, topk_ids, topk_weights, *, E, I, gu, dn):
    T, H = x.shape
    k = topk_ids.shape[1]
    P = T * k
    for name, cfg in (("gate_up", gu), ("down", dn)):
        _check_block_n(cfg, f"{name} ")
    if topk_ids.stride(1) != 1:
        topk_ids = topk_ids.contiguous()
    if topk_weights.stride(1) != 1 or topk_weights.stride(0) != topk_weights.shape[1]:
        topk_weights = topk_weights.contiguous()
    if x.stride(1) != 1:
        x = x.contiguous()
    num_kb = w13_q.shape[2]
    kb_per_split, S = _k_splits(num_kb, max(1, gu.split_k))
    n_part = S * P * T * 2 * I
    n_cnt = -(-H // dn.block_n)
    ws = torch.empty(n_part + T * H + n_cnt, dtype=torch.float32, device=x.device)
    part, zero = ws[:n_part], ws[n_part:]
    out = torch.empty((T, H), dtype=x.dtype, device=x.device)
    interp = interpreting()
    dq = DEQUANT_CVT if interp else gu.dequant
    kp = next_pow2(k)
    np13, np2 = w13_q.shape[1] * TILE_N, w2_q.shape[1] * TILE_N
    _DIRECT_GATE_UP[(cdiv(I, gu.block_n), P, S)](
        x, w13_q, w13_s, topk_ids, part, zero,
        T, E, H, I, np13 - 1, kb_per_split, num_kb, T * H + n_cnt,
        x.stride(0), w13_q.stride(0), w13_s.stride(0), topk_ids.stride(0), P * T * 2 * I, T * 2 * I, 2 * I,
        K_TOP=k, KP=kp, DEQUANT=dq, DOT_F32=interp, EVEN_K=H % KBLOCK == 0,
        FAST_COLS=gu.block_n >= TILE_N and np13 % gu.block_n == 0 and I % gu.block_n == 0,
        BLOCK_M=8, BLOCK_N=gu.block_n, BLOCK_Z=256, num_warps=gu.num_warps, num_stages=gu.num_stages,
    )
    if DIRECT_PARTS == "gate_up":  # tuning only: gate_up alone
        return out
    _DIRECT_DOWN[(cdiv(H, dn.block_n), P)](
        part, w2_q, w2_s, topk_ids, topk_weights, zero, zero[T * H:].view(torch.int32), out,
        T, E, H, I, np2 - 1, w2_q.shape[2], S,
        w2_q.stride(0), w2_s.stride(0), topk_ids.stride(0), topk_weights.stride(0), P * T * 2 * I, T * 2 * I, 2 * I,
        out.stride(0),
        K_TOP=k, KP=kp, SP=max(2, next_pow2(S)), DEQUANT=DEQUANT_CVT if interp else dn.dequant,
        DOT_F32=interp, FAST_COLS=dn.block_n >= TILE_N and np2 % dn.block_n == 0,
        BLOCK_M=8, BLOCK_N=dn.block_n, ARRIVE_FENCE=ARRIVE_FENCE and not interp, ATOMIC_READ=ATOMIC_READ and not interp,
        num_warps=dn.num_warps, num_stages=dn.num_stages,
    )
    return out


# The layer at T <= PAIR_BLOCKS_MAX_T in two launches (gate_up, down), no alignment step: each
# (token, slot) pair is its own block of 8 rows (the pair, then padding), so the block's expert is
# topk_ids itself and the block layout is a constant; an expert that two tokens share is then read
# once per pair (at T = 1 the top-k experts are distinct, so never). The fused epilogues' fp32
# sums and arrival counters live in a persistent workspace that the kernels leave zeroed
# (SELF_CLEAN), so no launch zeroes it: the align kernel, which did, cost 4.3 us of the 22.5 us
# layer at T = 1 on the Kimi TP8 slice. Measured on the H200 against the aligned path (Kimi TP8
# slice, T = 1 / 2 / 3 / 4 / 8: 18.1 / 25.7 / 33.8 / 44.1 / 66.4 us against 22.5 / 33.9 / 45.6 /
# 47.2 / 67.2; Qwen3-30B-A3B and Kimi I=2048 faster too at T <= 4). In the full profile run at
# T = 8 it was slower (Qwen3-30B-A3B 58.4 against 54.7 us: 128 experts, so 8 tokens share ~14
# of 64 pairs' experts and read them twice; Kimi I=2048 404.9 against 384.6), so it is the
# default up to 4 tokens (evidence/kernel-defaults/moe-w4a16-pair-path/, evidence/two-gpu-profile/).
# What is left at T = 1 is the two GEMMs (9.8 and 7.4 us), whose dequantisation is latency-bound
# at 10-20% occupancy (Nsight Compute), not the bytes.
PAIR_BLOCKS_MAX_T = 4
PAIR_BLOCKS_MAX_PAIRS = 64
PAIR_BLOCK_M = 8
_PAIR_WS: dict = {}
_PAIR_IDS: dict = {}


def _pair_workspace(T, k, H, I, gu, dn) -> tuple[int, int, int, int]:
    """fp32 entries of each part of the pair layer's workspace, in order: gate_up sums [P, 2I],
    down sum [T, H], and the arrival counters of gate_up and of down (int32, zero bits)."""
    P = T * k
    return P * 2 * I, T * H, P * -(-I // gu.block_n), -(-H // dn.block_n)


def _persistent_workspace(device: torch.device, n: int) -> torch.Tensor | None:
    """A zeroed fp32 buffer of >= n entries kept per device (grown, never shrunk), or None when
    none exists yet and a CUDA graph is being captured (its zeroing would become a graph node:
    the caller then takes the aligned path)."""
    key = (device.type, device.index)
    ws = _PAIR_WS.get(key)
    if ws is None or ws.numel() < n:
        if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
            return None
        ws = torch.zeros(n, dtype=torch.float32, device=device)
        _PAIR_WS[key] = ws
    return ws


def _pair_inputs(x, topk_ids, topk_weights):
    """What the pair path's kernels read of a call's inputs: x contiguous, the expert ids as
    contiguous int32 [T * k] and the routed weights as fp32 [T * k] (no copies where they
    already are)."""
    ids = topk_ids.contiguous().reshape(-1)
    if ids.dtype != torch.int32:
        ids = ids.to(torch.int32)
    tw = topk_weights.reshape(-1)
    if tw.dtype != torch.float32:
        tw = tw.to(torch.float32)
    return x.contiguous(), ids, tw


def _pair_routing(ids: torch.Tensor, E: int) -> AlignedRouting:
    """One block of PAIR_BLOCK_M rows per pair: row 0 is the pair, the rest padding (pair id P);
    the block's expert is the pair's id (ids outside [0, E) mark unused blocks in the kernel).
    `ids`: int32 [P] (`_pair_inputs`)."""
    P = ids.numel()
    key = (P, ids.device.type, ids.device.index)
    sorted_ids = _PAIR_IDS.get(key)
    if sorted_ids is None:
        s = torch.full((P, PAIR_BLOCK_M), P, dtype=torch.int32)
        s[:, 0] = torch.arange(P, dtype=torch.int32)
        sorted_ids = _PAIR_IDS[key] = s.reshape(-1).to(ids.device)
    return AlignedRouting(sorted_ids, ids, P, PAIR_BLOCK_M, P)


def _pair_layer(x, w13_q, w13_s, w2_q, w2_s, topk_ids, topk_weights, ws, *, E, I, gu, dn, pdl=None, down_pairs=None,
                down_config=None):
    """The pair path; `down_config` (the caller's, as given) overrides `down_pairs_config` where
    down sums the pairs in registers, `dn` is the atomic down's."""
    T, H = x.shape
    k = topk_ids.shape[1]
    P = T * k
    x, ids, tw = _pair_inputs(x, topk_ids, topk_weights)
    routing = _pair_routing(ids, E)
    split_act = _k_splits(padded_k(H) // KBLOCK, gu.split_k)[1] > 1
    g_n, acc_n, cnt_gu, _ = _pair_workspace(T, k, H, I, gu, dn)
    g = ws[:g_n].view(P, 2 * I)
    acc = ws[g_n:g_n + acc_n].view(T, H)
    counters = ws[g_n + acc_n:].view(torch.int32)
    h = torch.empty((P, I), dtype=x.dtype, device=x.device)
    out = torch.empty((T, H), dtype=x.dtype, device=x.device)
    pdl = pdl_default(x.device, T, k, H, I) if pdl is None else pdl
    _launch(x, w13_q, w13_s, h, None, routing, n=I, k_dim=H, a_row_div=k, c_row_div=1, gate_up=True, atomic=False,
            cfg=gu, ws=g if split_act else None, counters=counters[:cnt_gu] if split_act else None, n_experts=E,
            self_clean=True, pdl_trigger=pdl)
    if down_pairs if down_pairs is not None else P <= DOWN_PAIRS_MAX_P:
        cfg = as_config(down_config, down_pairs_config(H, I, num_sms=_sms(x.device)))
        _down_pairs(h, w2_q, w2_s, out, routing.block_expert_ids, tw, E=E, k=k, cfg=cfg, pdl_wait=pdl,
                    preload=pdl and padded_k(I) // KBLOCK <= DOWN_PAIRS_PRELOAD_MAX_KB)
        return out
    _launch(h, w2_q, w2_s, out, tw, routing, n=H, k_dim=I, a_row_div=1, c_row_div=k, gate_up=False, atomic=True,
            cfg=dn, ws=acc, counters=counters[cnt_gu:], out_rows=T, n_experts=E, self_clean=True, pdl_wait=pdl)
    return out


# Eager calls of the pair path from a plan. The first call of a signature (shapes, strides,
# dtypes, device, the module's knobs) records the path's launches instead of making them
# (`_fire`), sorts every tensor argument into an input of the call (x, the weights, the ids, the
# routed weights), a buffer the plan keeps (the persistent workspace, the pair block layout) or
# a buffer the call allocates (the intermediate, the output), and launches them under the plan's
# keys (compiling them there). Later calls allocate, read the inputs' pointers and launch each
# kernel's C launcher at once (`FastLauncher.launch_direct`): no configs, routing, views or
# argument keying per call. measure/dispatch.py times the eager call.
_PAIR_PLANS: dict = {}
_PLAN_IDS = itertools.count()  # launch keys: a plan's number (never reused)
# the module's knobs that pick the pair path's kernels and launches (tuning tools set them)
_PLAN_KNOBS = ("PAIR_BLOCKS_MAX_T", "PAIR_BLOCKS_MAX_PAIRS", "DIRECT_MAX_T", "MOE_PDL", "MOE_PDL_MAX_T",
               "MOE_PDL_MAX_L2_SHARE", "DOWN_PAIRS_PRELOAD_MAX_KB", "DOWN_PAIRS_MAX_P", "DOWN_PAIRS_MAX_PB",
               "DOWN_PAIRS_TARGET_PER_SM", "DOWN_PAIRS_MAX_WARPS_RAGGED_K", "FUSED_ACT_MAX_T", "ARRIVE_FENCE",
               "ATOMIC_READ")


class _PairPlan(NamedTuple):
    launches: tuple  # (launcher, key, grid, pointer-and-integer template, ((position, value index), ...))
    allocs: tuple  # (shape, dtype) of each buffer a call allocates
    out_alloc: int  # which of them the call returns
    keep: tuple  # the buffers the plan's static pointers point into (kept alive)


def _pair_sig(x, w13_q, w13_s, w2_q, w2_s, topk_ids, topk_weights):
    """The call's signature for `_PAIR_PLANS`, or None where no plan is made: off a CUDA GPU,
    under the interpreter, or with one of the path's functions replaced (tests, tuning)."""
    if not x.is_cuda or (_pair_layer, _down_pairs, _launch, _fire, interpreting, pdl_default, default_configs,
                         down_pairs_config, _persistent_workspace, _pair_routing, _pair_inputs) != _PLAN_FUNCS:
        return None
    if interpreting():
        return None
    g = globals()
    return (x.shape, x.stride(), x.dtype, x.device, w13_q.shape, w13_q.stride(), w13_q.dtype, w13_s.shape,
            w13_s.stride(), w13_s.dtype, w2_q.shape, w2_q.stride(), w2_q.dtype, w2_s.shape, w2_s.stride(),
            w2_s.dtype, topk_ids.shape, topk_ids.stride(), topk_ids.dtype, topk_weights.shape, topk_weights.stride(),
            topk_weights.dtype, *(g[n] for n in _PLAN_KNOBS))


def _plan_pair_layer(sig, x, w13_q, w13_s, w2_q, w2_s, topk_ids, topk_weights, ws, *, E, I, gu, dn):
    """The pair path's first call of `sig`: records its launches, makes them under the plan's
    keys and stores the plan, where every tensor argument is one of the call's inputs, inside
    a kept buffer or a whole buffer of the call's, with 16-byte aligned pointers; otherwise it
    launches as recorded and stores nothing."""
    global _RECORD
    xc, ids, tw = _pair_inputs(x, topk_ids, topk_weights)  # the layer reads these same tensors
    _RECORD = []
    try:
        out = _pair_layer(xc, w13_q, w13_s, w2_q, w2_s, ids.view(topk_ids.shape), tw.view(topk_weights.shape), ws,
                          E=E, I=I, gu=gu, dn=dn)
        record = _RECORD
    finally:
        _RECORD = None
    inputs = (xc, ids, tw, w13_q, w13_s, w2_q, w2_s)
    index = {t.data_ptr(): i for i, t in enumerate(inputs)}
    ids_layout = _PAIR_IDS.get((topk_ids.numel(), x.device.type, x.device.index))
    kept = [b for b in (ws, ids_layout) if b is not None]
    allocs, alloc_index, plannable = [], {}, True
    launches = []
    plan_id = next(_PLAN_IDS)
    for j, (launcher, grid, args, kw) in enumerate(record):
        template, dyn = [], []
        for pos, a in enumerate(args):
            if not isinstance(a, torch.Tensor):
                template.append(a)
                continue
            p = a.data_ptr()
            template.append(p)
            if p & 15:
                plannable = False
            if p in index:
                dyn.append((pos, index[p]))
            elif any(b.data_ptr() <= p < b.data_ptr() + b.untyped_storage().nbytes() for b in kept):
                pass  # a static pointer into a kept buffer
            elif a.storage_offset() == 0 and a.is_contiguous() and a.numel() * a.element_size() == \
                    a.untyped_storage().nbytes():
                if p not in alloc_index:
                    alloc_index[p] = len(allocs)
                    allocs.append((tuple(a.shape), a.dtype))
                dyn.append((pos, len(inputs) + alloc_index[p]))
            else:
                plannable = False
        launches.append((launcher, ("pair", plan_id, j), tuple(grid) + (1,) * (3 - len(grid)), tuple(template),
                         tuple(dyn)))
    out_alloc = alloc_index.get(out.data_ptr())
    plannable = plannable and out_alloc is not None and allocs[out_alloc] == (tuple(out.shape), out.dtype)
    for (launcher, key, grid, template, _), (_, _, args, kw) in zip(launches, record):
        if plannable:
            launcher.launch_keyed(key, grid, args, template, kw)
        else:
            launcher[grid](*args, **kw)
    if plannable:
        _PAIR_PLANS[sig] = _PairPlan(tuple(launches), tuple(allocs), out_alloc, tuple(kept))
    return out


def _run_pair_plan(plan, x, w13_q, w13_s, w2_q, w2_s, topk_ids, topk_weights):
    """A call from its plan: the output, or None having launched nothing (a pointer not 16-byte
    aligned, or the direct launch not possible now: a launch hook)."""
    xc, ids, tw = _pair_inputs(x, topk_ids, topk_weights)
    bufs = [torch.empty(shape, dtype=dtype, device=x.device) for shape, dtype in plan.allocs]
    vals = [xc.data_ptr(), ids.data_ptr(), tw.data_ptr(), w13_q.data_ptr(), w13_s.data_ptr(), w2_q.data_ptr(),
            w2_s.data_ptr(), *(b.data_ptr() for b in bufs)]
    m = 0
    for v in vals:
        m |= v
    if m & 15:
        return None
    for n, (launcher, key, grid, template, dyn) in enumerate(plan.launches):
        args = list(template)
        for pos, i in dyn:
            args[pos] = vals[i]
        if not launcher.launch_direct(key, grid, args):
            if n:
                raise RuntimeError("MoE pair path: a direct launch failed after the first one's")
            return None
    return bufs[plan.out_alloc]


# down of the pair path as one program per column tile that sums every pair in registers
# (`_w4a16_down_pairs_kernel`) up to this many (token, slot) pairs, instead of one program per
# (pair, column tile) with fp32 atomics, an arrival counter and the last arrival's cast. On the
# H200 at one token (8 pairs; evidence/kernel-defaults/moe-w4a16-down-pairs/): Kimi TP8 slice 17.3 against
# 18.1 us, Qwen3-30B-A3B 15.9 against 17.2-17.8, Kimi I=2048 61.3 against 62.7; at two tokens
# (16 pairs) it was slower (28.5 against 25.9, 24.7 against 24.1), hence 8.
DOWN_PAIRS_MAX_P = 8
DOWN_PAIRS_MAX_PB = 16  # the kernel's MMA N (pairs padded to a power of two >= 8) at most
DOWN_PAIRS_TARGET_PER_SM = 2  # column tiles narrowed (down to 16 columns) until about this many programs per SM
# warps at most when K is not whole 256-blocks: with Triton 3.6 on the H200, 8 warps on 16-column
# tiles gave wrong sums (calc_diff 0.95) at K = 32 (one ragged block), right with 4 warps, with
# 32-column tiles, or with K whole blocks (evidence/kernel-defaults/moe-w4a16-down-pairs/check_down_pairs_*.log; not
# root-caused: the interpreter runs the same program right)
DOWN_PAIRS_MAX_WARPS_RAGGED_K = 4


def down_pairs_config(H: int, I: int, num_sms: int = 132) -> MoEGemmConfig:
    """Column tile, warps and stages of the pair-summing down: 64 columns, halved (down to 16)
    while the tiles give fewer than DOWN_PAIRS_TARGET_PER_SM programs per SM; 8 warps when K is
    one whole 256-block (Kimi TP8 slice: 17.3 against 18.3 us with 4), else 4 (Qwen3-30B-A3B, 3
    blocks: 15.9 against 21.2); 2 stages past 4 blocks (Kimi I=2048, 8 blocks: 61.3 against
    62.8 with 3), else 3 (Qwen3-30B-A3B: 15.9 against 17.2 with 2). On the H200,
    evidence/kernel-defaults/moe-w4a16-down-pairs/ab_down_pairs_c06e782.log."""
    bn = 64
    while bn > 16 and -(-H // bn) < DOWN_PAIRS_TARGET_PER_SM * num_sms:
        bn //= 2
    num_kb = padded_k(I) // KBLOCK
    warps = 8 if num_kb == 1 and I % KBLOCK == 0 else 4
    return MoEGemmConfig(block_n=bn, block_k=KBLOCK, split_k=1, num_warps=warps,
                         num_stages=2 if num_kb > 4 else 3)


def _down_pairs(h, w2_q, w2_s, out, ids, tw, *, E, k, cfg, pdl_wait=False, preload=False):
    """out [T, H] = sum over the pairs j of tw[j] * W2[ids[j]] @ h[j] (h [P, I], P = T * k
    <= DOWN_PAIRS_MAX_PB), in one launch of one program per column tile."""
    P, I = h.shape
    T, H = out.shape
    _check_block_n(cfg)
    pb = max(8, next_pow2(P))
    if pb > DOWN_PAIRS_MAX_PB:
        raise ValueError(f"the pair-summing down takes at most {DOWN_PAIRS_MAX_PB} pairs, got {P}")
    interp = interpreting()
    np_ = w2_q.shape[1] * TILE_N
    warps = cfg.num_warps if I % KBLOCK == 0 else min(cfg.num_warps, DOWN_PAIRS_MAX_WARPS_RAGGED_K)
    _fire(_DOWN_PAIRS, (cdiv(H, cfg.block_n),), (
        h, w2_q, w2_s, out, ids, tw,
        H, I, P, E, w2_q.shape[2], np_ - 1,
        h.stride(0), w2_q.stride(0), w2_s.stride(0), out.stride(0),
    ), dict(
        K_TOP=k, T_OUT=T, PB=pb, DEQUANT=DEQUANT_CVT if interp else cfg.dequant, DOT_F32=interp,
        EVEN_K=I % KBLOCK == 0, BLOCK_N=cfg.block_n, PDL_WAIT=pdl_wait and not interp,
        PRELOAD=preload,
        num_warps=warps, num_stages=cfg.num_stages,
        **({"launch_pdl": True} if pdl_wait and not interp else {}),
    ))


def expert_bytes(H: int, I: int) -> float:
    """INT4 weights (0.5 B) + one bf16 scale per 32 weights (0.0625 B) for 3*H*I weights."""
    return 3.0 * H * I * (0.5 + 2.0 / GROUP)


def bytes_moved(topk_ids: torch.Tensor, E: int, H: int, I: int) -> float:
    T = topk_ids.shape[0]
    return num_distinct_experts(topk_ids) * expert_bytes(H, I) + activation_bytes(T, H)


def flops(T: int, k: int, H: int, I: int) -> float:
    return moe_flops(T, k, H, I)


# the functions a pair-path plan stands for: a plan is neither made nor used while one of them
# is replaced (`_pair_sig`)
_PLAN_FUNCS = (_pair_layer, _down_pairs, _launch, _fire, interpreting, pdl_default, default_configs,
               down_pairs_config, _persistent_workspace, _pair_routing, _pair_inputs)
