"""What the A/B tools share: unbuffered printing into the run log, the start of a run, and the
command line of the MoE A/B tools."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

READ_GBPS = 4281.0  # the embedded profile's streaming read ceiling (H200), for the A/B tools' roofs


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


def main(tool: str, doc: str, run: Callable[[argparse.Namespace], None], argv=None,
         flags: tuple[tuple[str, str], ...] = ()) -> None:
    """An A/B tool's command line (--rounds, --warm and `flags`: (name, help) switches), its start,
    `run(args)`, and the closing line with the wall time."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warm", action="store_true", help="compile and check only")
    for name, help_ in flags:
        ap.add_argument(name, action="store_true", help=help_)
    a = ap.parse_args(argv)
    t0 = start(tool)
    run(a)
    p(f"# done at {time.time() - t0:.0f} s")
