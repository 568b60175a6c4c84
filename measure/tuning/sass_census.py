"""Instruction census of the W4A16 MoE GEMM's main loop, from an offline sm_90 compile (no
GPU needed: Triton compiles for a stated target, the bundled ptxas and cuobjdump give the
SASS). Shows where the issue slots of one 256-k step go.

    python -m perfmodel.measure.tuning.sass_census [--block-m 8 --block-n 64 --warps 4 --stages 3 --gate-up 1 --dequant 2]
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile


def _with_defaults(k, const: dict) -> dict:
    """`const` plus every other constexpr of jit function k at its default value (an offline
    compile leaves a constexpr it is not given at None)."""
    return {p.name: p.default for p in k.params if p.is_constexpr and p.has_default} | const


def compile_w4a16(block_m: int, block_n: int, gate_up: bool, warps: int, stages: int, dequant: int = 2,
                  extra: dict | None = None):
    """Offline sm_90 compile of the W4A16 GEMM kernel; `extra` overrides constexprs (epilogue
    flags such as FINAL_CAST, SELF_CLEAN, PDL_WAIT, ATOMIC_READ)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from perfmodel.kernels import moe_w4a16 as m

    k = m._w4a16_moe_gemm_kernel
    types = ["*bf16", "*i16", "*bf16", "*bf16", "*fp32", "*i32", "*i32"] + ["i32"] * 11 + ["*fp32", "*i32", "i32", "i32", "i32"]
    sig = dict(zip(k.arg_names, types))
    const = dict(A_ROW_DIV=8, C_ROW_DIV=1, GATE_UP=gate_up, MUL_ROUTED_WEIGHT=False, ATOMIC=False,
                 DEQUANT=dequant, DOT_F32=False, EVEN_K=True, FAST_COLS=True, SWAP=block_m < 16,
                 BLOCK_M=block_m, BLOCK_N=block_n)
    const.update(extra or {})
    const = _with_defaults(k, const)
    sig.update({c: "constexpr" for c in const})
    div16 = [n for n in k.arg_names if n.endswith("_ptr") or n.startswith("stride") or n in ("N", "K", "up_offset")]
    src = ASTSource(fn=k, signature=sig, constexprs={(k.arg_names.index(c),): v for c, v in const.items()},
                    attrs={(k.arg_names.index(n),): [["tt.divisibility", 16]] for n in div16})
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=warps, num_stages=stages))


def compile_down_pairs(block_n: int, warps: int, stages: int, pb: int = 8, dequant: int = 2,
                       extra: dict | None = None):
    """Offline sm_90 compile of the pair-summing down (`moe_w4a16._w4a16_down_pairs_kernel`);
    `extra` overrides constexprs (PDL_WAIT, EVEN_K, ...)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from perfmodel.kernels import moe_w4a16 as m

    k = m._w4a16_down_pairs_kernel
    types = ["*bf16", "*i16", "*bf16", "*bf16", "*i32", "*fp32"] + ["i32"] * 10
    sig = dict(zip(k.arg_names, types))
    const = dict(K_TOP=8, T_OUT=1, PB=pb, DEQUANT=dequant, DOT_F32=False, EVEN_K=True, BLOCK_N=block_n)
    const.update(extra or {})
    const = _with_defaults(k, const)
    sig.update({c: "constexpr" for c in const})
    div16 = [n for n in k.arg_names if n.endswith("_ptr") or n.startswith("stride") or n in ("N", "K")]
    src = ASTSource(fn=k, signature=sig, constexprs={(k.arg_names.index(c),): v for c, v in const.items()},
                    attrs={(k.arg_names.index(n),): [["tt.divisibility", 16]] for n in div16})
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=warps, num_stages=stages))


def loop_census(ptx: str) -> tuple[str, collections.Counter]:
    import triton

    bin_dir = os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin")
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "k.ptx"), "w") as f:
            f.write(ptx)
        r = subprocess.run([f"{bin_dir}/ptxas", "-v", "--gpu-name=sm_90a", f"{d}/k.ptx", "-o", f"{d}/k.cubin"],
                           capture_output=True, text=True, check=True)
        sass = subprocess.run([f"{bin_dir}/cuobjdump", "-sass", f"{d}/k.cubin"], capture_output=True, text=True,
                              check=True).stdout
    usage = " ".join(re.findall(r"Used \d+ registers|\d+ bytes spill stores", r.stderr))
    ins = []
    for line in sass.splitlines():
        mt = re.match(r"\s+/\*([0-9a-f]+)\*/\s+(@!?U?P\w+\s+)?([A-Z0-9_]+)", line)
        if mt:
            ins.append((int(mt.group(1), 16), mt.group(3), line))
    back = [(a, ln) for a, op, ln in ins if op == "BRA" and int(re.search(r"BRA (0x[0-9a-f]+)", ln).group(1), 16) < a]
    end, ln = back[0]  # the main loop's backward branch
    start = int(re.search(r"BRA (0x[0-9a-f]+)", ln).group(1), 16)
    return usage, collections.Counter(op for a, op, _ in ins if start <= a <= end)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--block-m", type=int, default=8)  # the decode default (8: swapped MMA operands)
    ap.add_argument("--block-n", type=int, default=64)  # defaults: the INT4 defaults of _moe_common
    ap.add_argument("--gate-up", type=int, default=1)
    ap.add_argument("--warps", type=int, default=4)
    ap.add_argument("--stages", type=int, default=3)
    ap.add_argument("--dequant", type=int, default=2)
    a = ap.parse_args()
    for name in ("block_m", "block_n", "warps"):
        v = getattr(a, name)
        if v < 1 or v & (v - 1):
            print(f"sass_census: --{name.replace('_', '-')} {v}: must be a power of two", file=sys.stderr)
            sys.exit(2)
    try:
        ck = compile_w4a16(a.block_m, a.block_n, bool(a.gate_up), a.warps, a.stages, a.dequant)
    except Exception as e:  # a config that does not compile (e.g. too much shared memory)
        print(f"sass_census: compile failed: {type(e).__name__}: {str(e).strip().splitlines()[-1][:160]}", file=sys.stderr)
        sys.exit(2)
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
