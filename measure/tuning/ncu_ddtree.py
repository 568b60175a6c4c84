"""Nsight Compute target: the GPU DDTree builder at C=8, B=256 (D = 15, V = 163840, bf16 logits),
three calls (its captures are indexed in runs/README.md).

    ncu --section SpeedOfLight --section Occupancy --section SchedulerStats \
        python -m perfmodel.measure.tuning.ncu_ddtree
"""

C, D, V, B = 8, 15, 163840, 256


def main() -> None:
    import torch

    from perfmodel.kernels import ddtree

    logits = torch.randn(C, D, V, device="cuda", dtype=torch.bfloat16) * 3
    for _ in range(3):
        ddtree.build_ddtree_gpu(logits, B)
    torch.cuda.synchronize()


if __name__ == "__main__":
    from ..runner import exit_unless_cuda

    exit_unless_cuda("perfmodel.measure.tuning.ncu_ddtree")
    main()
