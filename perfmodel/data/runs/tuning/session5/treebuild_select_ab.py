"""A/B of the selection used by the GPU DDTree builder (bf16 logits, D = 15, V = 163840,
CUDA-graph replay via triton.testing): the vocabulary top-k at 1/2/3 threshold bits per
step, and the tree kernel with tl.topk or the threshold select per depth / for the final
top-B. Prints microseconds; the builder total includes the top-k at SELECT_BITS = 2."""
import itertools

import torch
import triton

from perfmodel.kernels import ddtree as dd
from perfmodel.kernels import ddtree_topk as tk

D, V = 15, 163840


def bench(fn):
    fn()
    return triton.testing.do_bench_cudagraph(fn, rep=60) * 1e3


for C in (8, 32):
    logits = torch.randn(C, D, V, device="cuda", dtype=torch.bfloat16) * 3
    for B in (64, 128, 256):
        for bits in (1, 2, 3):
            tk.SELECT_BITS = bits
            print(f"topk  C={C:3d} B={B:4d} bits={bits}  {bench(lambda: tk.vocab_topk_logprobs(logits, B)):8.1f} us", flush=True)
        tk.SELECT_BITS = 2
        for depth, final, bits in [(False, False, 2), (False, True, 2), (False, True, 3), (True, True, 2), (True, True, 3),
                                   (True, False, 3)]:
            dd.TREE_SELECT.update(depth=depth, final=final, bits=bits)
            t = bench(lambda: dd.build_ddtree_gpu(logits, B))
            print(f"tree  C={C:3d} B={B:4d} depth={'sel' if depth else 'topk'} final={'sel' if final else 'topk'} "
                  f"bits={bits}  builder {t:8.1f} us", flush=True)
