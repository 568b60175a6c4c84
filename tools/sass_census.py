"""Instruction census of the W4A16 MoE GEMM's main loop, from an offline sm_90 compile (no GPU
needed: `perfmodel.kernels._offline`). Shows where the issue slots of one 256-k step go: SASS
instructions per thread and per weight, by opcode.

    python -m tools.sass_census [--block-m 8 --block-n 64 --warps 4 --stages 3 --gate-up 1 --dequant 2]
"""

from __future__ import annotations

import argparse

from ._cli import fail


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--block-m", type=int, default=8)  # the decode default (8: swapped MMA operands)
    ap.add_argument("--block-n", type=int, default=64)  # defaults: the INT4 defaults of kernels/_moe_common.py
    ap.add_argument("--gate-up", type=int, default=1)
    ap.add_argument("--warps", type=int, default=4)
    ap.add_argument("--stages", type=int, default=3)
    ap.add_argument("--dequant", type=int, default=2)
    a = ap.parse_args(argv)
    for name in ("block_m", "block_n", "warps"):
        v = getattr(a, name)
        if v < 1 or v & (v - 1):
            fail("sass_census", f"--{name.replace('_', '-')} {v}: must be a power of two")
    from perfmodel.kernels._offline import compile_w4a16, loop_census

    try:
        ck = compile_w4a16(a.block_m, a.block_n, bool(a.gate_up), a.warps, a.stages, a.dequant)
    except Exception as e:  # noqa: BLE001 -- a config that does not compile (e.g. too much shared memory)
        fail("sass_census", f"compile failed: {type(e).__name__}: {str(e).strip().splitlines()[-1][:160]}")
    usage, c = loop_census(ck.asm["ptx"])
    total = sum(c.values())
    weights_per_thread = (2 if a.gate_up else 1) * 256 * a.block_n / (32 * a.warps)
    print(f"sm_90 W4A16 MoE GEMM, BLOCK_M={a.block_m} BLOCK_N={a.block_n} gate_up={bool(a.gate_up)} "
          f"warps={a.warps} stages={a.stages} dequant={a.dequant}: {usage}")
    print(f"main loop (one 256-k step): {total} SASS instructions per thread for {weights_per_thread:.0f} weights "
          f"= {total / weights_per_thread:.2f} per weight")
    for op, n in c.most_common(16):
        print(f"  {op:8s} {n:5d}  ({n / weights_per_thread:.2f} per weight)")


if __name__ == "__main__":
    main()
