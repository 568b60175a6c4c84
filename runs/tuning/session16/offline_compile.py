"""Registers, spills, MMA kind and shared memory of the tree-attention split kernel's MLA variants
in session 16's --wgmma and --warps A/Bs, from an offline sm_90 compile (no GPU: Triton's bundled
ptxas -v), at 24ddd9b's kernel (the kernel of 7b0d784 and 5343d70 with the TMA knob removed).

    python offline_compile.py "block_r=64,warps=8,full=False" ...   (keywords of comp())
"""
import os
import re
import subprocess
import sys
import tempfile

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from perfmodel.kernels import tree_attention as ta


def ptxas(ptx):
    b = os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin/ptxas")
    with tempfile.TemporaryDirectory() as d:
        open(os.path.join(d, "k.ptx"), "w").write(ptx)
        r = subprocess.run([b, "--gpu-name", "sm_90a", "-v", os.path.join(d, "k.ptx"), "-o", os.path.join(d, "k.o")], capture_output=True, text=True)
    return re.findall(r"Used (\d+) registers", r.stderr), re.findall(r"(\d+) bytes spill stores", r.stderr)

def comp(G=64, block_r=16, block_s=64, warps=4, stages=2, block_dv=512, full=True, q_in_loop=False, DK=512, DPE=64, DV=512, v_is_k=True):
    k = ta._get_kernel().fn
    const = dict(G=G, DK=DK, DPE=DPE, DV=DV, V_IS_K=v_is_k, BLOCK_R=block_r, BLOCK_S=block_s, DOT_F32=False,
                 BLOCK_DV=block_dv, RESCALE_LOG2=8.0, PDL=True, Q_IN_LOOP=q_in_loop, FULL_TILES=full)
    sig = {}
    for n in k.arg_names:
        if n in const: sig[n] = "constexpr"
        elif n.endswith("_ptr"): sig[n] = "*i8" if n == "mask_ptr" else "*fp32" if n in ("o_ptr", "lse_ptr") else "*bf16"
        else: sig[n] = "fp32" if n == "sm_scale" else "i32"
    div16 = [n for n in k.arg_names if n.endswith("_ptr") or n == "split_len"
             or (n.startswith("s") and "_" in n and n not in ("sm_scale", "sm_c", "sm_i"))]
    src = ASTSource(fn=k, signature=sig, constexprs={(k.arg_names.index(c),): v for c, v in const.items()},
                    attrs={(k.arg_names.index(n),): [["tt.divisibility", 16]] for n in div16})
    cc = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=warps, num_stages=stages))
    ptx = cc.asm["ptx"]
    regs, spill = ptxas(ptx)
    return dict(regs=regs, spill=spill, wgmma=ptx.count("wgmma.mma_async"), mma=ptx.count("mma.sync"), smem=cc.metadata.shared)

if __name__ == "__main__":
    for spec in sys.argv[1:]:
        kw = eval(f"dict({spec})")
        try:
            print(spec, comp(**kw), flush=True)
        except Exception as e:
            print(spec, "FAIL", type(e).__name__, str(e)[:200], flush=True)
