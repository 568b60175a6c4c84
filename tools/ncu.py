"""Nsight Compute target: one shape of a kernel with a variant's knobs, called eagerly --calls
times (over its input copies), then synchronised. Skip the first calls' launches (compilation,
warm-up) with ncu's --launch-skip and profile the next. The kernels' names:

    attention   _tree_attn_kernel (the split kernel), _combine_kernel (its combine)
    moe_w4a16   _w4a16_moe_gemm_kernel (gate_up, and down at T > 1), _w4a16_down_pairs_kernel (down at T = 1)
    moe_bf16    _moe_gemm_kernel
    ddtree      the top-k and tree kernels of kernels/ddtree_topk.py and kernels/ddtree.py

For example (one split-kernel launch per call: skip 2, profile the third):

    ncu --clock-control none --kernel-name regex:_tree_attn_kernel --launch-skip 2 --launch-count 1 \\
        --section SpeedOfLight --section Occupancy --section WarpStateStats --section LaunchStats \\
        python -m tools.ncu attention --shape mla:H=64:L=8192 [--knobs q_in_loop=true] [--calls 3]
"""

from __future__ import annotations

import argparse

from ._cli import InputError, fail, parse_knobs, parse_shapes
from .ab import KERNELS


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kernel", choices=KERNELS)
    ap.add_argument("--shape", required=True, help="one shape: KIND:key=value:...")
    ap.add_argument("--knobs", default="", help="key=value,... (the wrapper's keywords, @MODULE_CONSTANT=...)")
    ap.add_argument("--calls", type=int, default=3)
    a = ap.parse_args(argv)
    try:
        shapes = parse_shapes(a.kernel, a.shape)
        if len(shapes) != 1:
            raise InputError(f"--shape {a.shape!r} stands for {len(shapes)} shapes; give one")
        if a.calls < 1:
            raise InputError("--calls must be at least 1")
        knobs = parse_knobs(a.knobs)
    except InputError as e:
        fail("ncu", str(e))
    from . import _targets as tg

    tg.start("ncu")
    import torch

    case = tg.make_case(a.kernel, shapes[0])
    f, mod, consts = case.bound(knobs)
    with tg.module_constants(mod, consts):
        for i in range(a.calls):
            f(*case.args_list[i % len(case.args_list)])
        torch.cuda.synchronize()
    print(f"# {a.kernel} {case.name} {knobs or 'defaults'}: {a.calls} calls", flush=True)


if __name__ == "__main__":
    main()
