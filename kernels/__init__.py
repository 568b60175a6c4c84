"""Triton kernels used by perfmodel.measure (import the submodules; nothing heavy here).

moe_w4a16      fused MoE, INT4 group-32 weights, bf16 acts; weights repacked into 64-column tiles of
               int16 half-words, one contiguous run per tile and 256-deep K-block
moe_bf16       fused MoE, bf16 weights; torch._grouped_mm baseline
tree_attention tree-verify decode attention, GQA and absorbed MLA, split-KV
ddtree         DDTree draft-tree building (heap reference; Triton builder; torch fallback)
ddtree_topk    vocabulary top-k as log-probs with the logsumexp, one read of the logits (DDTree)
rmsnorm        RMSNorm, and RMSNorm fused with the residual add before it
rope           RoPE on q's rotary part (MLA q_pe)
router_topk    sigmoid + top-k + renormalise MoE router
_moe_common    align step (one Triton program at decode sizes) + the bf16 grouped GEMM
_testing       calc_diff metric, tolerance table, interpreter setup for CPU tests
"""
