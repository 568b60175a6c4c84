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
  bf16 scale per 32 weights, but K-major and interleaved by quantisation group:
    qweight [E, Kp//8, N] int32, scales [E, Kp//32, N] bf16, Kp = K rounded up to 256.
  In K-block b (256 k), word row 32b+j, nibble i holds k = 256b + 32i + j. Shifting a
  [32, BLOCK_N] tile of words by 4i gives quantisation group 8b+i as a ready [32, BLOCK_N]
  dot operand: no interleave or shuffle to unpack, one 128-byte line per 32 words of a
  column group, and one scale row per group applied to the partial product.

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

import torch

from ._moe_common import (
    AlignedRouting,
    MoEGemmConfig,
    activation_bytes,
    as_config,
    default_moe_configs,
    interpreting,
    moe_block_rows,
    moe_flops,
    moe_store_rows,
    num_distinct_experts,
    run_fused_moe,
)

GROUP = 32  # weights per scale
PACK = 8  # nibbles per int32 word
KBLOCK = GROUP * PACK  # 256: k covered by one row of 32 words in the kernel layout

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
    """[..., 8] nibbles (0..15) -> [...] int32, nibble i in bits 4i..4i+3."""
    shifts = torch.arange(PACK, device=q.device, dtype=torch.int32) * 4
    packed = (q.to(torch.int64) << shifts.to(torch.int64)).sum(-1)  # disjoint bits: sum == or
    return torch.where(packed >= 2**31, packed - 2**32, packed).to(torch.int32).contiguous()


def _unpack_nibbles(packed: torch.Tensor) -> torch.Tensor:
    """[...] int32 -> [..., 8] nibbles (0..15)."""
    shifts = torch.arange(PACK, device=packed.device, dtype=torch.int32) * 4
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


def pack_for_kernel(packed: torch.Tensor, scales: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Checkpoint layout -> kernel layout (see the module docstring). K is padded to a
    multiple of 256 with zero weights (nibble 8) and unit scales."""
    E, N, KW = packed.shape
    K = KW * PACK
    Kp = padded_k(K)
    q = _unpack_nibbles(packed).reshape(E, N, K)
    q = torch.nn.functional.pad(q, (0, Kp - K), value=8)
    s = torch.nn.functional.pad(scales, (0, (Kp - K) // GROUP), value=1.0)
    # k = 256b + 32i + j  ->  word [b, j], nibble i
    q = q.reshape(E, N, Kp // KBLOCK, PACK, GROUP).permute(0, 2, 4, 1, 3)  # [E, b, j, N, i]
    qweight = _pack_nibbles(q).reshape(E, Kp // PACK, N)
    return qweight.contiguous(), s.transpose(1, 2).contiguous()


def unpack_from_kernel(qweight: torch.Tensor, scales: torch.Tensor, K: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Kernel layout -> checkpoint layout (the inverse of `pack_for_kernel`, K unpadded)."""
    E, KWp, N = qweight.shape
    Kp = KWp * PACK
    q = _unpack_nibbles(qweight.reshape(E, Kp // KBLOCK, GROUP, N))  # [E, b, j, N, i]
    q = q.permute(0, 3, 1, 4, 2).reshape(E, N, Kp)[:, :, :K]  # [E, N, b, i, j]
    packed = _pack_nibbles(q.reshape(E, N, K // PACK, PACK))
    return packed, scales.transpose(1, 2)[:, :, : K // GROUP].contiguous()


def random_kernel_weights(E: int, N: int, K: int, device: str = "cuda") -> tuple[torch.Tensor, torch.Tensor]:
    """Random valid kernel-layout weights (all 32 bits random, scales in [0.001, 0.021])
    for timing, without a quantisation pass."""
    Kp = padded_k(K)
    q = torch.randint(-(2**31), 2**31 - 1, (E, Kp // PACK, N), dtype=torch.int32, device=device)
    s = (torch.rand(E, Kp // GROUP, N, device=device) * 0.02 + 0.001).to(torch.bfloat16)
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
DEQUANT_CVT = 0  # (n - 8) int -> fp32 convert -> bf16
DEQUANT_MAGIC = 1  # fp32 bits 0x4B000000 | n  ==  2^23 + n exactly; minus (2^23 + 8): no int convert
DEQUANT_BF16X2 = 2  # inline PTX, two weights per instruction in bf16x2 (Marlin's trick), scale folded
# in; CUDA only (the CPU interpreter cannot run PTX: CPU tests use 0/1, the GPU tests cover 2)

# Two words (of two elements the asm gets together) -> eight bf16x2 registers, one per quantisation
# group i (nibble i), each holding (w[e0], w[e1]) = (n - 8) * scale_i rounded once to bf16, as the
# reference's fp32 product .to(bf16). prmt pairs the words' halves, so one lop3
# (x & 0x000F000F | 0x43004300) makes two bf16 128 + n; fma(v, 1, -136) gives n - 8 exactly and
# fma(., scale, -0) applies the (group, column) scale pair: 2 instructions per weight.
_BF16X2_DEQUANT_ASM = (
    "{\n.reg .b32 x, y, t, v, one, off, nz;\n"
    "mov.b32 one, 0x3F803F80;\nmov.b32 off, 0xC308C308;\nmov.b32 nz, 0x80008000;\n"
    "prmt.b32 x, $8, $9, 0x5410;\nprmt.b32 y, $8, $9, 0x7632;\n"
    + "".join(
        ("" if i % 4 == 0 else f"shr.u32 t, {'xy'[i // 4]}, {4 * (i % 4)};\n")
        + f"lop3.b32 v, {'xy'[i // 4] if i % 4 == 0 else 't'}, 0x000F000F, 0x43004300, 0xEA;\n"
        + f"fma.rn.bf16x2 v, v, one, off;\nfma.rn.bf16x2 ${i}, v, ${10 + i}, nz;\n"
        for i in range(8))
    + "}"
)

if triton is not None:
    _BF16X2_DEQUANT_ASM = tl.constexpr(_BF16X2_DEQUANT_ASM)  # a jit function reads only constexpr globals

    @triton.jit
    def _group_dot(a_ptrs, a_ok, words, nib: tl.constexpr, sc, magic, DEQUANT: tl.constexpr, DOT_F32: tl.constexpr):
        """One quantisation group: activations [BM, 32] . nibble `nib` (0..3) of `words`
        [32, BN], times the group's per-column scale `sc` [BN].

        DEQUANT_MAGIC: the nibble is masked in place (no shift) into the mantissa of 2^23,
        so float(bits) - (2^23 + 8*16^nib) == (n - 8) * 16^nib exactly (bf16-exact: a 4-bit
        integer times a power of two); the 16^-nib goes into the scale. One integer op
        (and|or, a lop3) per weight instead of shift, and, subtract and convert."""
        a = tl.load(a_ptrs, mask=a_ok, other=0.0)
        if DEQUANT == 1:  # DEQUANT_MAGIC
            bits = (words & (0xF << (4 * nib))) | magic
            w = bits.to(tl.float32, bitcast=True) - (8388608.0 + 8.0 * (16 ** nib))
            sc = sc * (1.0 / (16 ** nib))
        else:
            w = (((words >> (4 * nib)) & 0xF) - 8).to(tl.float32)
        if DOT_F32:
            return tl.dot(a.to(tl.float32), w) * sc[None, :]
        return tl.dot(a, w.to(a.dtype)) * sc[None, :]

    @triton.jit
    def _block_dot_bf16x2(acc, a_ptrs, row_ok, k_begin, K, words, s_ptrs, n_ok, stride_sg):
        """acc [BM, BN] += activations [BM, 256] . the K-block's 8 groups of `words` [32, BN]
        dequantised and scaled in bf16x2 by inline PTX (DEQUANT_BF16X2)."""
        offs_j = tl.arange(0, 32)
        s0 = tl.load(s_ptrs, mask=n_ok, other=0.0)[None, :]  # inline asm broadcasts its args
        s1 = tl.load(s_ptrs + stride_sg, mask=n_ok, other=0.0)[None, :]
        s2 = tl.load(s_ptrs + 2 * stride_sg, mask=n_ok, other=0.0)[None, :]
        s3 = tl.load(s_ptrs + 3 * stride_sg, mask=n_ok, other=0.0)[None, :]
        s4 = tl.load(s_ptrs + 4 * stride_sg, mask=n_ok, other=0.0)[None, :]
        s5 = tl.load(s_ptrs + 5 * stride_sg, mask=n_ok, other=0.0)[None, :]
        s6 = tl.load(s_ptrs + 6 * stride_sg, mask=n_ok, other=0.0)[None, :]
        s7 = tl.load(s_ptrs + 7 * stride_sg, mask=n_ok, other=0.0)[None, :]
        w = tl.inline_asm_elementwise(
            _BF16X2_DEQUANT_ASM, "=r,=r,=r,=r,=r,=r,=r,=r,r,r,r,r,r,r,r,r,r,r",
            [words, s0, s1, s2, s3, s4, s5, s6, s7], dtype=(tl.bfloat16,) * 8, is_pure=True, pack=2)
        for i in tl.static_range(8):
            k0 = k_begin + i * 32
            a = tl.load(a_ptrs + i * 32, mask=row_ok[:, None] & ((k0 + offs_j) < K)[None, :], other=0.0)
            acc = tl.dot(a, w[i], acc)
        return acc

    @triton.jit
    def _w4a16_moe_gemm_kernel(
        a_ptr, q_ptr, s_ptr, c_ptr, topk_w_ptr, sorted_ids_ptr, block_expert_ptr,
        N, K, num_pairs, up_offset, kb_per_split, num_kb, magic,
        stride_am, stride_qe, stride_qw, stride_se, stride_sg, stride_cm,  # unit strides along K / N
        A_ROW_DIV: tl.constexpr,  # A row = pair // A_ROW_DIV (k for x, 1 for the intermediate)
        C_ROW_DIV: tl.constexpr,  # C row = pair // C_ROW_DIV (1 for the intermediate, k for out)
        GATE_UP: tl.constexpr,  # also compute columns n + up_offset and store silu(gate)*up
        MUL_ROUTED_WEIGHT: tl.constexpr,
        ATOMIC: tl.constexpr,  # fp32 atomic add into C (split-K and/or top-k reduction)
        DEQUANT: tl.constexpr,
        DOT_F32: tl.constexpr,  # interpreter only: its bf16 tl.dot is broken, so dot in fp32
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    ):
        pid_m = tl.program_id(0)
        pid_n = tl.program_id(1)
        pid_k = tl.program_id(2)
        expert = tl.load(block_expert_ptr + pid_m).to(tl.int64)
        if expert < 0:
            return
        pair, row_ok, a_row = moe_block_rows(sorted_ids_ptr, pid_m, num_pairs, A_ROW_DIV, BLOCK_M)

        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        n_ok = offs_n < N  # masks only: a tl.where on offs_n would hide its contiguity and
        # un-coalesce the weight loads (out-of-range pointers are never dereferenced)
        offs_j = tl.arange(0, 32)

        kb_begin = pid_k * kb_per_split
        kb_end = tl.minimum(kb_begin + kb_per_split, num_kb)

        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        if GATE_UP:
            acc_up = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        q_base = q_ptr + expert * stride_qe + offs_j[:, None] * stride_qw + offs_n[None, :]
        s_base = s_ptr + expert * stride_se + offs_n
        a_base = a_ptr + a_row[:, None] * stride_am + offs_j[None, :]
        for kb in range(kb_begin, kb_end):
            q_ptrs = q_base + kb * 32 * stride_qw
            words = tl.load(q_ptrs, mask=n_ok[None, :], other=0)
            if GATE_UP:
                words_up = tl.load(q_ptrs + up_offset, mask=n_ok[None, :], other=0)
            if DEQUANT == 2:  # DEQUANT_BF16X2: scales are folded into the weights, the MMA accumulates
                s_ptrs = s_base + kb * 8 * stride_sg
                acc = _block_dot_bf16x2(acc, a_base + kb * 256, row_ok, kb * 256, K, words, s_ptrs, n_ok, stride_sg)
                if GATE_UP:
                    acc_up = _block_dot_bf16x2(acc_up, a_base + kb * 256, row_ok, kb * 256, K, words_up,
                                               s_ptrs + up_offset, n_ok, stride_sg)
            else:  # one dot per quantisation group, scaled on the product
                for i in tl.static_range(8):
                    if i == 4:  # nibbles 4..7 -> bits 0..15: one shift per word for four groups
                        words = words >> 16
                        if GATE_UP:
                            words_up = words_up >> 16
                    k0 = kb * 256 + i * 32
                    a_ptrs = a_base + k0
                    a_ok = row_ok[:, None] & ((k0 + offs_j) < K)[None, :]
                    s_ptrs = s_base + (kb * 8 + i) * stride_sg
                    sc = tl.load(s_ptrs, mask=n_ok, other=0.0).to(tl.float32)
                    acc += _group_dot(a_ptrs, a_ok, words, i % 4, sc, magic, DEQUANT, DOT_F32)
                    if GATE_UP:
                        sc_up = tl.load(s_ptrs + up_offset, mask=n_ok, other=0.0).to(tl.float32)
                        acc_up += _group_dot(a_ptrs, a_ok, words_up, i % 4, sc_up, magic, DEQUANT, DOT_F32)

        if GATE_UP:
            acc = acc / (1.0 + tl.exp(-acc)) * acc_up
        moe_store_rows(acc, c_ptr, topk_w_ptr, pair, row_ok, offs_n, n_ok, stride_cm, 1,
                       C_ROW_DIV, MUL_ROUTED_WEIGHT, ATOMIC)


def _launch(
    a: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, c: torch.Tensor,
    topk_weights: torch.Tensor | None, routing: AlignedRouting, *, n: int, k_dim: int,
    a_row_div: int, c_row_div: int, gate_up: bool, atomic: bool, cfg: MoEGemmConfig,
) -> None:
    """c[pair // c_row_div, :n] (+)= a[pair // a_row_div, :k_dim] @ W[expert] over aligned
    blocks; with gate_up, columns n.. of W are the up half and c gets silu(gate)*up."""
    assert a.stride(1) == 1 and qweight.stride(2) == 1 and scales.stride(2) == 1 and c.stride(1) == 1
    num_kb = qweight.shape[1] // GROUP
    kb_per_split = -(-num_kb // cfg.split_k)
    tw = topk_weights if topk_weights is not None else c
    grid = (routing.max_blocks, triton.cdiv(n, cfg.block_n), -(-num_kb // kb_per_split))
    _w4a16_moe_gemm_kernel[grid](
        a, qweight, scales, c, tw, routing.sorted_pair_ids, routing.block_expert_ids,
        n, k_dim, routing.num_pairs, n if gate_up else 0, kb_per_split, num_kb, 0x4B000000,
        a.stride(0), qweight.stride(0), qweight.stride(1), scales.stride(0), scales.stride(1), c.stride(0),
        A_ROW_DIV=a_row_div, C_ROW_DIV=c_row_div, GATE_UP=gate_up,
        MUL_ROUTED_WEIGHT=topk_weights is not None, ATOMIC=atomic,
        DEQUANT=DEQUANT_MAGIC if cfg.dequant == DEQUANT_BF16X2 and interpreting() else cfg.dequant,
        DOT_F32=interpreting(), BLOCK_M=routing.block_m, BLOCK_N=cfg.block_n,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )


def default_configs(T: int, k: int, E: int, H: int, I: int, num_sms: int = 132):
    """(block_m, gate_up MoEGemmConfig, down MoEGemmConfig) used when none is given."""
    return default_moe_configs(T, k, E, H, I, int4=True, num_sms=num_sms)


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
) -> torch.Tensor:
    """Kernel-layout weights (`pack_for_kernel`): w13_q [E, Hp//8, 2I], w2_q [E, Ip//8, H].

    Two Triton launches (gate_up with fused SiLU*mul, down with routed weight + top-k sum)
    after the align step (`_moe_common.run_fused_moe`). Knobs default to `default_configs(T, k, E, H, I)`;
    configs may be given as MoEGemmConfig or as a dict of the fields to override. block_k
    is fixed at 256 by the layout (split_k divides K in 256-blocks)."""
    T, H = x.shape
    E, _, two_i = w13_q.shape
    I = two_i // 2
    k = topk_ids.shape[1]
    assert w13_q.shape[1] == padded_k(H) // PACK, f"w13_q {tuple(w13_q.shape)} is not the kernel layout for H={H}"
    assert w2_q.shape[1] == padded_k(I) // PACK and w2_q.shape[2] == H, f"w2_q {tuple(w2_q.shape)} vs I={I}, H={H}"
    bm, gu, dn = default_configs(T, k, E, H, I)
    weights = {"w13": (w13_q, w13_s), "w2": (w2_q, w2_s)}

    def gemm(a, which, c, tw, routing, **kw):
        _launch(a, *weights[which], c, tw, routing, **kw)

    return run_fused_moe(
        x, topk_ids, topk_weights, gemm, num_experts=E, inter=I, block_m=block_m or bm,
        gate_up_cfg=as_config(gate_up_config, gu), down_cfg=as_config(down_config, dn),
    )


def expert_bytes(H: int, I: int) -> float:
    """INT4 weights (0.5 B) + one bf16 scale per 32 weights (0.0625 B) for 3*H*I weights."""
    return 3.0 * H * I * (0.5 + 2.0 / GROUP)


def bytes_moved(topk_ids: torch.Tensor, E: int, H: int, I: int) -> float:
    T = topk_ids.shape[0]
    return num_distinct_experts(topk_ids) * expert_bytes(H, I) + activation_bytes(T, H)


def flops(T: int, k: int, H: int, I: int) -> float:
    return moe_flops(T, k, H, I)
