"""Pieces shared by the fused-MoE kernels: routing alignment and byte/FLOP counts.

`moe_align_block_size` follows vLLM/SGLang's op of the same name, written as
vectorised torch (no Python loop over experts, no host sync, so it is CUDA-graph safe):
the T*k (token, slot) pairs are sorted by expert, and each expert's run is padded up to a
multiple of `block_m`, so that a GEMM program of BLOCK_M rows touches exactly one expert.
Expert ids outside [0, num_experts) are dropped (no block, no compute): under expert
parallelism a rank passes the global routing shifted to its local experts, and the other
ranks' experts fall outside (vLLM's expert_map does the same with -1).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ._launch import FastLauncher, cdiv, interpreting, next_pow2


@dataclass(frozen=True)
class AlignedRouting:
    sorted_pair_ids: torch.Tensor  # int32 [max_blocks*block_m]; pair = token*k + slot, pad = T*k
    block_expert_ids: torch.Tensor  # int32 [max_blocks]; -1 for blocks past the used ones
    max_blocks: int  # upper bound on blocks, known without a host sync
    block_m: int
    num_pairs: int  # T*k


def max_num_blocks(num_pairs: int, num_experts: int, block_m: int) -> int:
    # sum_e ceil(c_e/bm) <= sum_e (c_e/bm + [c_e>0]) <= num_pairs/bm + min(E, num_pairs)
    return num_pairs // block_m + min(num_experts, num_pairs)


ALIGN_MAX_PAIRS = 1024  # one-program Triton align up to this many (token, slot) pairs (T <= 128 at k = 8;
# each power-of-two size compiles its own sort, and larger sizes compile slowly)


def moe_align_block_size(topk_ids: torch.Tensor, num_experts: int, block_m: int,
                         zero: torch.Tensor | None = None) -> AlignedRouting:
    """Expert-sorted, block-padded pair ids (see the module docstring). At decode sizes one
    Triton program does it in a single launch (the torch version is ~20 small kernels,
    ~50 us of a graph-replayed decode step on the H200); larger batches use torch.
    `zero` (a contiguous fp32 buffer, e.g. a GEMM workspace) is zeroed too: by the same
    program on the Triton path, which saves the memset's graph node."""
    num_pairs = topk_ids.numel()
    if num_pairs <= ALIGN_MAX_PAIRS and topk_ids.device.type == "cuda" or (interpreting() and num_pairs <= 256):
        return _align_triton(topk_ids, num_experts, block_m, zero)
    if zero is not None:
        zero.zero_()
    return moe_align_block_size_torch(topk_ids, num_experts, block_m)


def moe_align_block_size_torch(topk_ids: torch.Tensor, num_experts: int, block_m: int) -> AlignedRouting:
    device = topk_ids.device
    flat = topk_ids.reshape(-1).to(torch.int64)
    num_pairs = flat.numel()
    max_blocks = max_num_blocks(num_pairs, num_experts, block_m)

    # Ids outside [0, E) (other ranks' experts) go to a last bin E that gets no blocks.
    flat = torch.where((flat >= 0) & (flat < num_experts), flat, torch.full_like(flat, num_experts))
    # scatter_add, not bincount: bincount syncs with the host, which breaks graph capture.
    counts = torch.zeros(num_experts + 1, dtype=torch.int64, device=device).scatter_add_(0, flat, torch.ones_like(flat))
    # dropped pairs get no blocks (no `counts[E] = 0`: a CPU scalar copy breaks graph capture)
    counts = torch.where(torch.arange(num_experts + 1, device=device) < num_experts, counts, torch.zeros_like(counts))
    blocks_per_expert = (counts + block_m - 1) // block_m
    block_end = torch.cumsum(blocks_per_expert, 0)  # inclusive
    block_start = block_end - blocks_per_expert
    pair_start = torch.cumsum(counts, 0) - counts  # first sorted index of each expert

    order = torch.argsort(flat, stable=True)  # pair ids grouped by expert
    sorted_e = flat[order]
    rank_in_expert = torch.arange(num_pairs, device=device) - pair_start[sorted_e]
    dest = block_start[sorted_e] * block_m + rank_in_expert
    n_slots = max_blocks * block_m
    dest = torch.where(sorted_e < num_experts, dest, torch.full_like(dest, n_slots))  # dropped: a spare slot
    sorted_pair_ids = torch.full((n_slots + 1,), num_pairs, dtype=torch.int32, device=device)
    sorted_pair_ids[dest] = order.to(torch.int32)
    sorted_pair_ids = sorted_pair_ids[:n_slots]

    # Block b belongs to the expert whose [block_start, block_end) contains b.
    b = torch.arange(max_blocks, device=device)
    block_expert = torch.searchsorted(block_end[:num_experts], b, right=True)
    block_expert = torch.where(block_expert < num_experts, block_expert, torch.full_like(block_expert, -1))
    return AlignedRouting(sorted_pair_ids, block_expert.to(torch.int32), max_blocks, block_m, num_pairs)


_ALIGN_KERNEL = None


def _align_triton(topk_ids: torch.Tensor, num_experts: int, block_m: int,
                  zero: torch.Tensor | None = None) -> AlignedRouting:
    global _ALIGN_KERNEL
    triton, tl = _triton()
    if _ALIGN_KERNEL is None:

        @triton.jit
        def _align_kernel(ids_ptr, sorted_ptr, block_expert_ptr, P, E, max_blocks, zero_ptr, n_zero,
                          BLOCK_M: tl.constexpr, BLOCK_P: tl.constexpr, BLOCK_E: tl.constexpr,
                          BLOCK_B: tl.constexpr):
            for z0 in range(0, n_zero, BLOCK_B):  # 0. the caller's workspace, if any
                o = z0 + tl.arange(0, BLOCK_B)
                tl.store(zero_ptr + o, tl.zeros((BLOCK_B,), tl.float32), mask=o < n_zero)
            # 1. defaults: every slot padded (pair id P), every block unused (-1)
            for b0 in range(0, max_blocks * BLOCK_M, BLOCK_B):
                o = b0 + tl.arange(0, BLOCK_B)
                tl.store(sorted_ptr + o, tl.zeros((BLOCK_B,), tl.int32) + P, mask=o < max_blocks * BLOCK_M)
                tl.store(block_expert_ptr + o, tl.zeros((BLOCK_B,), tl.int32) - 1, mask=o < max_blocks)
            tl.debug_barrier()
            # 2. per-expert counts -> first block and first sorted slot of each expert
            offs = tl.arange(0, BLOCK_P)
            e = tl.load(ids_ptr + offs, mask=offs < P, other=BLOCK_E - 1).to(tl.int32)
            ok = (offs < P) & (e >= 0) & (e < E)  # other ids: other ranks' experts, dropped
            e = tl.where(ok, e, BLOCK_E - 1)
            counts = tl.histogram(e, BLOCK_E, mask=ok)
            nblk = (counts + BLOCK_M - 1) // BLOCK_M
            blk_start = tl.cumsum(nblk, 0) - nblk
            pair_start = tl.cumsum(counts, 0) - counts
            # 3. stable sort of (expert, pair) keys; rank within expert = sorted pos - start
            key = tl.where(ok, e * BLOCK_P + offs, BLOCK_E * BLOCK_P)
            key = tl.sort(key)
            se = key // BLOCK_P
            pair = key % BLOCK_P
            valid = se < BLOCK_E
            se_c = tl.minimum(se, BLOCK_E - 1)
            rank = offs - tl.gather(pair_start, se_c, 0)
            dest = tl.gather(blk_start, se_c, 0) * BLOCK_M + rank
            tl.store(sorted_ptr + dest, pair, mask=valid)
            tl.store(block_expert_ptr + dest // BLOCK_M, se, mask=valid)  # same value per block

        _ALIGN_KERNEL = FastLauncher(_align_kernel)
    flat = topk_ids.reshape(-1)
    if flat.dtype != torch.int32:
        flat = flat.to(torch.int32)
    P = flat.numel()
    max_blocks = max_num_blocks(P, num_experts, block_m)
    sorted_ids = torch.empty(max_blocks * block_m, dtype=torch.int32, device=flat.device)
    block_expert = torch.empty(max_blocks, dtype=torch.int32, device=flat.device)
    BLOCK_P = max(16, next_pow2(P))
    BLOCK_E = max(16, next_pow2(num_experts + 1))  # + 1: a bin for padding lanes
    if zero is not None:
        assert zero.dtype == torch.float32 and zero.is_contiguous()
    _ALIGN_KERNEL[(1,)](flat, sorted_ids, block_expert, P, num_experts, max_blocks,
                        zero if zero is not None else sorted_ids, 0 if zero is None else zero.numel(),
                        BLOCK_M=block_m, BLOCK_P=BLOCK_P, BLOCK_E=BLOCK_E, BLOCK_B=1024, num_warps=8)
    return AlignedRouting(sorted_ids, block_expert, max_blocks, block_m, P)


def num_distinct_experts(topk_ids: torch.Tensor) -> int:
    return int(torch.unique(topk_ids).numel())


def moe_flops(T: int, k: int, H: int, I: int) -> float:
    """GEMM FLOPs: per (token, slot) pair, gate_up is 2*(2I)*H and down is 2*H*I -> 6*H*I.
    The SiLU*mul (~4 flops per element of I) and the weighted sum are left out (<0.1%)."""
    return 6.0 * T * k * H * I


def activation_bytes(T: int, H: int, act_bytes: int = 2) -> float:
    """x read once plus out written once (bf16). The [T*k, I] intermediate is not counted:
    it stays in L2 at decode sizes."""
    return 2.0 * T * H * act_bytes


# ----------------------------------------------------------------------------------------
# Grouped GEMM over expert-aligned blocks, bf16 weights (the INT4 kernel is in moe_w4a16.py).
# ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class MoEGemmConfig:
    """Tuning knobs of one MoE GEMM launch (gate_up or down).

    block_n/block_k: output-column tile and K step (bf16 only; the INT4 kernel's K step is
    fixed at 256 by its weight layout).
    split_k: programs sharing one (block, N-tile), combined with fp32 atomics; for gate_up a
    split_k > 1 disables the fused SiLU*mul (the activation then runs as a torch op).
    """

    block_n: int = 64
    block_k: int = 128
    split_k: int = 1
    num_warps: int = 4
    num_stages: int = 3
    dequant: int = 2  # INT4 only: 0 int->float convert, 2 bf16x2 inline PTX (CUDA only; the
    # interpreter runs 0), see moe_w4a16.DEQUANT_*
    max_regs: int | None = None  # INT4 only: register cap per thread (ptxas maxnreg), for occupancy


def _triton():
    import triton
    import triton.language as tl

    return triton, tl


try:  # jit helpers shared by both MoE GEMM kernels; module globals so Triton resolves them
    import triton as _tr
    import triton.language as _tl
except ImportError:  # pragma: no cover - importing this module does not need triton
    _tr = None

if _tr is not None:

    @_tr.jit
    def moe_block_rows(sorted_ids_ptr, pid_m, num_pairs, A_ROW_DIV: _tl.constexpr, BLOCK_M: _tl.constexpr):
        """The BLOCK_M (token, slot) pairs of an aligned block: pair ids, which are real (not
        padding), and the activation row each reads (pair // A_ROW_DIV)."""
        pair = _tl.load(sorted_ids_ptr + (pid_m * BLOCK_M + _tl.arange(0, BLOCK_M)))
        row_ok = pair < num_pairs
        return pair, row_ok, _tl.where(row_ok, pair // A_ROW_DIV, 0).to(_tl.int64)

    @_tr.jit
    def moe_store_rows(acc, c_ptr, topk_w_ptr, pair, row_ok, offs_n, n_ok, stride_cm, stride_cn,
                       C_ROW_DIV: _tl.constexpr, MUL_ROUTED_WEIGHT: _tl.constexpr, ATOMIC: _tl.constexpr):
        """Epilogue: times the routed weight (optional), then store or fp32 atomic-add row
        pair // C_ROW_DIV, columns offs_n of C."""
        if MUL_ROUTED_WEIGHT:
            rw = _tl.load(topk_w_ptr + _tl.where(row_ok, pair, 0), mask=row_ok, other=0.0).to(_tl.float32)
            acc = acc * rw[:, None]
        c_row = _tl.where(row_ok, pair // C_ROW_DIV, 0).to(_tl.int64)
        c_ptrs = c_ptr + c_row[:, None] * stride_cm + offs_n[None, :] * stride_cn
        c_mask = row_ok[:, None] & n_ok[None, :]
        if ATOMIC:
            _tl.atomic_add(c_ptrs, acc, mask=c_mask, sem="relaxed")
        else:
            _tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=c_mask)


_KERNEL = None


def _get_kernel():
    """Build the Triton kernel lazily so that importing this module does not need triton."""
    global _KERNEL
    if _KERNEL is not None:
        return _KERNEL
    triton, tl = _triton()

    @triton.jit
    def _moe_gemm_kernel(
        a_ptr, b_ptr, c_ptr, topk_w_ptr, sorted_ids_ptr, block_expert_ptr,
        N, K, num_pairs, up_offset, k_per_split,
        stride_am, stride_ak,
        stride_be, stride_bn, stride_bk,
        stride_cm, stride_cn,
        A_ROW_DIV: tl.constexpr,  # A row = pair // A_ROW_DIV (k for x, 1 for the intermediate)
        C_ROW_DIV: tl.constexpr,  # C row = pair // C_ROW_DIV (1 for the intermediate, k for out)
        GATE_UP: tl.constexpr,  # also compute rows n+up_offset and store silu(gate)*up
        MUL_ROUTED_WEIGHT: tl.constexpr,
        ATOMIC: tl.constexpr,  # fp32 atomic add into C (split-K and/or top-k reduction)
        SPLIT_K: tl.constexpr,
        DOT_F32: tl.constexpr,  # interpreter only: its bf16 tl.dot is broken, so dot in fp32
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    ):
        pid_m = tl.program_id(0)
        pid_n = tl.program_id(1)
        pid_k = tl.program_id(2)
        expert = tl.load(block_expert_ptr + pid_m).to(tl.int64)
        if expert < 0:
            return
        pair, row_ok, a_row = moe_block_rows(sorted_ids_ptr, pid_m, num_pairs, A_ROW_DIV, BLOCK_M)

        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        n_ok = offs_n < N
        offs_n_safe = tl.where(n_ok, offs_n, 0).to(tl.int64)

        k_begin = pid_k * k_per_split  # k_per_split: host-computed multiple of BLOCK_K
        k_end = k_begin + k_per_split
        k_end = tl.where(k_end < K, k_end, K)

        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        if GATE_UP:
            acc_up = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        b_base = b_ptr + expert * stride_be + offs_n_safe[:, None] * stride_bn
        for k0 in range(k_begin, k_begin + k_per_split, BLOCK_K):
            offs_k = k0 + tl.arange(0, BLOCK_K)
            a = tl.load(a_ptr + a_row[:, None] * stride_am + offs_k[None, :] * stride_ak,
                        mask=row_ok[:, None] & (offs_k[None, :] < k_end), other=0.0)
            kb_ok = n_ok[:, None] & (offs_k[None, :] < k_end)
            w = tl.load(b_base + offs_k[None, :] * stride_bk, mask=kb_ok, other=0.0)
            if DOT_F32:
                a = a.to(tl.float32)
                w = w.to(tl.float32)
            acc = tl.dot(a, tl.trans(w), acc)
            if GATE_UP:
                w = tl.load(b_base + up_offset * stride_bn + offs_k[None, :] * stride_bk,
                            mask=kb_ok, other=0.0)
                if DOT_F32:
                    w = w.to(tl.float32)
                acc_up = tl.dot(a, tl.trans(w), acc_up)

        if GATE_UP:
            acc = acc / (1.0 + tl.exp(-acc)) * acc_up
        moe_store_rows(acc, c_ptr, topk_w_ptr, pair, row_ok, offs_n_safe, n_ok, stride_cm, stride_cn,
                       C_ROW_DIV, MUL_ROUTED_WEIGHT, ATOMIC)

    _KERNEL = FastLauncher(_moe_gemm_kernel)  # eager calls skip Triton's Python binder
    return _KERNEL


def launch_moe_gemm(
    a: torch.Tensor, b: torch.Tensor, c: torch.Tensor,
    topk_weights: torch.Tensor | None, routing: AlignedRouting, *, n: int, k_dim: int,
    a_row_div: int, c_row_div: int, gate_up: bool, atomic: bool, cfg: MoEGemmConfig,
) -> None:
    """c[pair // c_row_div, :n] (+)= a[pair // a_row_div] @ B[expert]^T over aligned blocks.

    b is [E, N_total, K] bf16; with gate_up the kernel reads rows n and n + n (gate and up
    halves) and writes silu*mul.
    """
    triton, _ = _triton()
    kernel = _get_kernel()
    tw = topk_weights if topk_weights is not None else c
    block_k = cfg.block_k
    k_per_split = cdiv(cdiv(k_dim, cfg.split_k), block_k) * block_k
    grid = (routing.max_blocks, cdiv(n, cfg.block_n), cdiv(k_dim, k_per_split))
    kernel[grid](
        a, b, c, tw, routing.sorted_pair_ids, routing.block_expert_ids,
        n, k_dim, routing.num_pairs, n if gate_up else 0, k_per_split,
        a.stride(0), a.stride(1),
        b.stride(0), b.stride(1), b.stride(2),
        c.stride(0), c.stride(1),
        A_ROW_DIV=a_row_div, C_ROW_DIV=c_row_div, GATE_UP=gate_up,
        MUL_ROUTED_WEIGHT=topk_weights is not None, ATOMIC=atomic, SPLIT_K=cfg.split_k,
        DOT_F32=interpreting(),
        BLOCK_M=routing.block_m, BLOCK_N=cfg.block_n, BLOCK_K=block_k,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )


def run_fused_moe(
    x: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor, gemm,
    *, num_experts: int, inter: int, block_m: int, gate_up_cfg: MoEGemmConfig, down_cfg: MoEGemmConfig,
) -> torch.Tensor:
    """gate_up (+SiLU*mul) then down with the routed weights, summed over top-k with atomics,
    for any weight format: `gemm(a, which, c, topk_weights, routing, **launch_kw)` runs one
    grouped GEMM against the "w13" or "w2" weights (e.g. `launch_moe_gemm` on bf16 weights,
    `moe_w4a16._launch` on INT4 ones)."""
    T, H = x.shape
    k = topk_ids.shape[1]
    routing = moe_align_block_size(topk_ids, num_experts, block_m)
    tw = topk_weights.reshape(-1).to(torch.float32).contiguous()
    x = x.contiguous()
    if gate_up_cfg.split_k == 1:
        h = torch.empty((T * k, inter), dtype=x.dtype, device=x.device)
        gemm(x, "w13", h, None, routing, n=inter, k_dim=H, a_row_div=k,
             c_row_div=1, gate_up=True, atomic=False, cfg=gate_up_cfg)
    else:
        g = torch.zeros((T * k, 2 * inter), dtype=torch.float32, device=x.device)
        gemm(x, "w13", g, None, routing, n=2 * inter, k_dim=H, a_row_div=k,
             c_row_div=1, gate_up=False, atomic=True, cfg=gate_up_cfg)
        h = (torch.nn.functional.silu(g[:, :inter]) * g[:, inter:]).to(x.dtype)
    out = torch.zeros((T, H), dtype=torch.float32, device=x.device)
    gemm(h, "w2", out, tw, routing, n=H, k_dim=inter, a_row_div=1,
         c_row_div=k, gate_up=False, atomic=True, cfg=down_cfg)
    return out.to(x.dtype)


def default_moe_configs(
    T: int, k: int, E: int, H: int, I: int, *, int4: bool, num_sms: int = 132
) -> tuple[int, MoEGemmConfig, MoEGemmConfig]:
    """(block_m, gate_up, down) defaults chosen by the token count.

    At decode (few rows per expert) the GEMMs are weight-streaming: small BLOCK_M (16; 8 for
    INT4, whose kernel then swaps the MMA operands), narrow BLOCK_N and split-K so that even
    8 touched experts give >= 2 programs per SM, and deep pipelining to keep enough bytes in flight.
    At larger T, wider tiles and no split-K (the work is compute-bound there).
    Starting points for tuning on the H200, not tuned values.
    """
    pairs = T * k
    touched = min(E, pairs)
    rows_per_expert = pairs / max(touched, 1)
    if int4 and rows_per_expert <= 8:  # weights as the MMA's A operand, tokens its N = 8: 3.9 vs
        block_m = 8  # 3.5 TB/s at Kimi T=8 on the H200 (evidence/kernel-defaults/moe-w4a16-block-m-8/)
    elif rows_per_expert <= 16:
        block_m = 16
    elif int4 or rows_per_expert <= 32:
        block_m = 32
    else:  # bf16, compute-bound: H200 bf16 MoE sweep (evidence/kernel-defaults/moe-bf16-tiles/)
        block_m = 64 if rows_per_expert <= 80 else 128
    blocks = max_num_blocks(pairs, E, block_m)

    def pick(n: int, kdim: int, fused: bool) -> MoEGemmConfig:
        if int4:  # K step fixed at 256 (8 groups unrolled). H200 sweeps and A/B runs of the tiled
            # layout (evidence/kernel-defaults/moe-w4a16-tiles/): gate_up 64 columns x 4 warps x 3 stages, down
            # 128 columns x 4 warps x 2 stages, best or within 5% at the Kimi shapes swept.
            bk, min_steps = 256, 4
            bn, warps, stages = (64, 4, 3) if fused else (128, 4, 2)
        elif block_m >= 64:  # large tiles at large T: 64x64x64 / 4 warps, 128x128x64 / 8 warps
            bn, bk, min_steps = (64, 64, 16) if block_m == 64 else (128, 64, 16)
        else:
            bn = 32 if rows_per_expert <= 16 else 64
            bk, min_steps = min(128, max(32, 1 << (max(kdim, 32).bit_length() - 1))), 16
        progs = blocks * -(-n // bn)
        split = 1
        target = 2 * num_sms
        while progs * split < target and kdim // (split * 2) >= min_steps * bk:
            split *= 2
        if fused and split > 1 and progs >= num_sms:  # keep the fused act when SMs are full
            split = 1
        if not int4:
            warps, stages = (8 if block_m >= 128 else 4), (4 if rows_per_expert <= 16 else 3)
        return MoEGemmConfig(block_n=bn, block_k=bk, split_k=split, num_warps=warps, num_stages=stages)

    return block_m, pick(I, H, True), pick(H, I, False)


def as_config(cfg: MoEGemmConfig | dict | None, default: MoEGemmConfig) -> MoEGemmConfig:
    if cfg is None:
        return default
    if isinstance(cfg, dict):
        return MoEGemmConfig(**{**default.__dict__, **cfg})
    return cfg
