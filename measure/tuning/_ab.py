"""What the A/B tools share: unbuffered printing into the run log, and the start of a run."""

from __future__ import annotations

import time


def p(*a) -> None:
    print(*a, flush=True)


def start(tool: str) -> float:
    """Exit with one line unless a CUDA GPU is present; print the run's GPU, torch and triton;
    return the start time (time.time())."""
    from ..runner import exit_unless_cuda

    exit_unless_cuda(tool)
    import torch
    import triton

    p(f"# {torch.cuda.get_device_name(0)}, torch {torch.__version__}, triton {triton.__version__}")
    return time.time()
