"""Triton kernels used by perfmodel.measure (import the submodules; nothing heavy here).

moe_w4a16      fused MoE, INT4 group-32 weights (compressed-tensors pack-quantized), bf16 acts
moe_bf16       fused MoE, bf16 weights; torch._grouped_mm baseline
tree_attention tree-verify decode attention, GQA and absorbed MLA, split-KV
ddtree         DDTree draft-tree building (heap reference + vectorised device builder)
_moe_common    align step + grouped GEMM kernel shared by the MoE files
_testing       calc_diff metric, tolerance table, interpreter setup for CPU tests
"""
