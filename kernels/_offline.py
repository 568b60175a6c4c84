"""Offline sm_90 compiles of the kernels (no GPU: Triton compiles for a stated target; its bundled
ptxas and cuobjdump give the registers, spills and SASS). The tests read the PTX of the launch
configurations whose instructions matter (atomics, prefetches, the dependent-launch wait); the
tools (tools/sass_census.py, tools/offline_compile.py, tools/ptx_fingerprint.py) count and hash it.

Each compile function states its kernel's argument types, so it changes with the kernel's
signature: that is why they live beside the kernels.
"""

from __future__ import annotations

import collections
import os
import re
import subprocess
import tempfile

TARGET = ("cuda", 90, 32)  # sm_90 (H100 / H200), warp size 32


def _with_defaults(k, const: dict) -> dict:
    """`const` plus every other constexpr of jit function k at its default value (an offline
    compile leaves a constexpr it is not given at None)."""
    return {p.name: p.default for p in k.params if p.is_constexpr and p.has_default} | const


def _compile(k, types: dict, const: dict, div16: list[str], warps: int, stages: int):
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    sig = dict(types)
    sig.update({c: "constexpr" for c in const})
    src = ASTSource(fn=k, signature=sig, constexprs={(k.arg_names.index(c),): v for c, v in const.items()},
                    attrs={(k.arg_names.index(n),): [["tt.divisibility", 16]] for n in div16})
    return triton.compile(src, target=GPUTarget(*TARGET), options=dict(num_warps=warps, num_stages=stages))


def compile_w4a16(block_m: int, block_n: int, gate_up: bool, warps: int, stages: int, dequant: int = 2,
                  extra: dict | None = None):
    """The W4A16 MoE GEMM kernel (`moe_w4a16._w4a16_moe_gemm_kernel`); `extra` overrides
    constexprs (epilogue flags such as FINAL_CAST, SELF_CLEAN, PDL_WAIT, ATOMIC_READ)."""
    from . import moe_w4a16 as m

    k = m._w4a16_moe_gemm_kernel
    types = ["*bf16", "*i16", "*bf16", "*bf16", "*fp32", "*i32", "*i32"] + ["i32"] * 11 + ["*fp32", "*i32", "i32", "i32", "i32"]
    const = dict(A_ROW_DIV=8, C_ROW_DIV=1, GATE_UP=gate_up, MUL_ROUTED_WEIGHT=False, ATOMIC=False,
                 DEQUANT=dequant, DOT_F32=False, EVEN_K=True, FAST_COLS=True, SWAP=block_m < 16,
                 BLOCK_M=block_m, BLOCK_N=block_n) | (extra or {})
    const = _with_defaults(k, const)
    div16 = [n for n in k.arg_names if n.endswith("_ptr") or n.startswith("stride") or n in ("N", "K", "up_offset")]
    return _compile(k, dict(zip(k.arg_names, types)), const, div16, warps, stages)


def compile_down_pairs(block_n: int, warps: int, stages: int, pb: int = 8, dequant: int = 2,
                       extra: dict | None = None):
    """The pair-summing down (`moe_w4a16._w4a16_down_pairs_kernel`); `extra` overrides
    constexprs (PDL_WAIT, EVEN_K, PRELOAD, ...)."""
    from . import moe_w4a16 as m

    k = m._w4a16_down_pairs_kernel
    types = ["*bf16", "*i16", "*bf16", "*bf16", "*i32", "*fp32"] + ["i32"] * 10
    const = dict(K_TOP=8, T_OUT=1, PB=pb, DEQUANT=dequant, DOT_F32=False, EVEN_K=True, BLOCK_N=block_n) | (extra or {})
    const = _with_defaults(k, const)
    div16 = [n for n in k.arg_names if n.endswith("_ptr") or n.startswith("stride") or n in ("N", "K")]
    return _compile(k, dict(zip(k.arg_names, types)), const, div16, warps, stages)


def compile_attention(kind: str, block_r: int, warps: int = 4, stages: int = 2, extra: dict | None = None,
                      block_s: int = 64):
    """The tree-attention split kernel as `kind` ("mla": 512 + 64 latent dims, 64 heads, the value
    the latent; "gqa": head dim 128, 4 query heads per KV head) launches it with `block_r`-row
    tiles of `block_s` positions, with the constexprs the wrapper picks by default at those
    tiles (`extra` overrides); pointers and strides divisible by 16, as at run time."""
    from . import tree_attention as ta

    k = ta._get_kernel().fn
    mla = kind == "mla"
    dv = 512 if mla else 128
    const = dict(G=64 if mla else 4, DK=dv, DPE=64 if mla else 0, DV=dv, V_IS_K=mla, BLOCK_R=block_r, BLOCK_S=block_s,
                 DOT_F32=False, BLOCK_DV=dv, RESCALE_LOG2=8.0, PDL=True, Q_IN_LOOP=ta.default_q_in_loop(dv, block_r),
                 FULL_TILES=ta.default_full_tiles(dv, block_r, stages)) | (extra or {})
    types = {}
    for n in k.arg_names:
        if n not in const:
            if n.endswith("_ptr"):
                types[n] = "*i8" if n == "mask_ptr" else "*fp32" if n in ("o_ptr", "lse_ptr") else "*bf16"
            else:
                types[n] = "fp32" if n == "sm_scale" else "i32"
    div16 = [n for n in k.arg_names if n.endswith("_ptr") or n == "split_len"
             or (n.startswith("s") and "_" in n and n not in ("sm_scale", "sm_c", "sm_i"))]
    return _compile(k, types, const, div16, warps, stages)


def _bin(tool: str) -> str:
    import triton

    return os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", tool)


def tools_present() -> bool:
    """Triton's bundled ptxas and cuobjdump, which the SASS functions run."""
    try:
        return all(os.path.exists(_bin(t)) for t in ("ptxas", "cuobjdump"))
    except ImportError:
        return False


def assemble(ptx: str) -> tuple[str, str]:
    """(ptxas -v's report, cuobjdump's SASS listing) of the PTX for sm_90a."""
    with tempfile.TemporaryDirectory() as d:
        src, obj = os.path.join(d, "k.ptx"), os.path.join(d, "k.cubin")
        with open(src, "w") as f:
            f.write(ptx)
        r = subprocess.run([_bin("ptxas"), "-v", "--gpu-name=sm_90a", src, "-o", obj], capture_output=True, text=True,
                           check=True)
        sass = subprocess.run([_bin("cuobjdump"), "-sass", obj], capture_output=True, text=True, check=True).stdout
    return r.stderr, sass


def usage(ptx: str) -> dict:
    """Registers and spill bytes per thread (ptxas -v), and the MMA instructions in the PTX."""
    report, _ = assemble(ptx)
    regs = re.findall(r"Used (\d+) registers", report)
    spills = re.findall(r"(\d+) bytes spill stores", report)
    return dict(registers=int(regs[0]) if regs else None, spill_bytes=int(spills[0]) if spills else None,
                wgmma=ptx.count("wgmma.mma_async"), mma_sync=ptx.count("mma.sync"))


def loop_census(ptx: str) -> tuple[str, collections.Counter]:
    """(ptxas's register and spill line, the SASS op counts inside the main loop: from the first
    backward branch's target to the branch)."""
    report, sass = assemble(ptx)
    line = " ".join(re.findall(r"Used \d+ registers|\d+ bytes spill stores", report))
    ins = []
    for text in sass.splitlines():
        mt = re.match(r"\s+/\*([0-9a-f]+)\*/\s+(@!?U?P\w+\s+)?([A-Z0-9_]+)", text)
        if mt:
            ins.append((int(mt.group(1), 16), mt.group(3), text))
    back = [(a, t) for a, op, t in ins if op == "BRA" and int(re.search(r"BRA (0x[0-9a-f]+)", t).group(1), 16) < a]
    end, t = back[0]
    start = int(re.search(r"BRA (0x[0-9a-f]+)", t).group(1), 16)
    return line, collections.Counter(op for a, op, _ in ins if start <= a <= end)
