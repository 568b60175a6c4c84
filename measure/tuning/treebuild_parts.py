"""Per-kernel times of the GPU DDTree builder (vocab top-k, tree, mask) at the treebuild
bench's shapes (D = 15, V = 163840, bf16 logits), CUDA-graph replay via triton.testing
(its logs are indexed in runs/README.md).

    python -m perfmodel.measure.tuning.treebuild_parts
"""

D, V = 15, 163840


def main() -> None:
    import torch
    import triton

    from perfmodel.kernels import ddtree as dd
    from perfmodel.kernels import ddtree_topk as tk

    def bench(fn) -> float:
        return triton.testing.do_bench_cudagraph(fn, rep=50) * 1e3

    for C in (1, 8, 32, 128):
        logits = torch.randn(C, D, V, device="cuda", dtype=torch.bfloat16) * 3
        for B in (16, 64, 128, 256):
            K = min(B, V)
            t_topk = bench(lambda: tk.vocab_topk_logprobs(logits, K))
            t_all = bench(lambda: dd.build_ddtree_gpu(logits, B))
            t_torch = bench(lambda: tk.vocab_topk_logprobs(logits, K, impl="torch"))
            print(f"C={C:4d} B={B:4d}  topk {t_topk:8.1f} us  builder {t_all:8.1f} us  (tree+mask {t_all - t_topk:7.1f})"
                  f"  torch.topk+lse {t_torch:8.1f} us", flush=True)


if __name__ == "__main__":
    from ..runner import exit_unless_cuda

    exit_unless_cuda("perfmodel.measure.tuning.treebuild_parts")
    main()
