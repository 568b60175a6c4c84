"""Registers and shared memory of the kernels behind session 12's ideas, from an offline sm_90
compile (no GPU: Triton's bundled ptxas -v). Run against a checkout of the commit named in the
output's header, whose code has the knobs (dc9a88a: the attention kernel's SWAP; e84fcd9: the
pair-summing down's FROM_SUMS and ONE_KB).

    python offline_compile.py mla        # at dc9a88a
    python offline_compile.py down       # at e84fcd9
    python offline_compile.py mla_loop   # at 961abc3: the SASS of the split kernel's loop
    python offline_compile.py gqa_smem   # at 5b626b9: GQA's shared memory with and without FULL_TILES
"""
import os
import re
import subprocess
import sys
import tempfile

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource


def ptxas(ptx: str) -> tuple[str, str]:
    b = os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin/ptxas")
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "k.ptx"), "w") as f:
            f.write(ptx)
        r = subprocess.run([b, "--gpu-name", "sm_90a", "-v", os.path.join(d, "k.ptx"), "-o", os.path.join(d, "k.o")],
                           capture_output=True, text=True)
    return re.findall(r"Used (\d+) registers", r.stderr)[0], re.findall(r"(\d+) bytes spill stores", r.stderr)[0]


def loop_census(ptx: str):
    """SASS op counts inside the split kernel's main loop (between its backward branch and the
    branch's target), as sass_census.loop_census finds it."""
    import collections

    bin_dir = os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin")
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "k.ptx"), "w") as f:
            f.write(ptx)
        subprocess.run([f"{bin_dir}/ptxas", "--gpu-name=sm_90a", f"{d}/k.ptx", "-o", f"{d}/k.cubin"], check=True)
        sass = subprocess.run([f"{bin_dir}/cuobjdump", "-sass", f"{d}/k.cubin"], capture_output=True, text=True,
                              check=True).stdout
    ins = []
    for line in sass.splitlines():
        mt = re.match(r"\s+/\*([0-9a-f]+)\*/\s+(@!?U?P\w+\s+)?([A-Z0-9_.]+)", line)
        if mt:
            ins.append((int(mt.group(1), 16), mt.group(3).split(".")[0], line))
    back = [(a, int(re.search(r"BRA (0x[0-9a-f]+)", ln).group(1), 16)) for a, op, ln in ins if op == "BRA"
            and int(re.search(r"BRA (0x[0-9a-f]+)", ln).group(1), 16) < a]
    end, start = max(back, key=lambda b: b[0] - b[1])
    return collections.Counter(op for a, op, _ in ins if start <= a <= end)


def mla(swap: bool, block_r=16, block_s=64, warps=4, stages=2, full_tiles=None):
    """The tree-attention split kernel as MLA with 64 heads at C=1 launches it (16-row tiles);
    pointers and strides divisible by 16, as at run time."""
    from perfmodel.kernels import tree_attention as ta

    k = ta._get_kernel().fn
    const = dict(G=64, DK=512, DPE=64, DV=512, V_IS_K=True, BLOCK_R=block_r, BLOCK_S=block_s, DOT_F32=False,
                 BLOCK_DV=512, RESCALE_LOG2=8.0, PDL=True, Q_IN_LOOP=False)
    if swap:
        const["SWAP"] = True
    if full_tiles is not None:
        const["FULL_TILES"] = full_tiles
    sig = {}
    for n in k.arg_names:
        if n in const:
            sig[n] = "constexpr"
        elif n.endswith("_ptr"):
            sig[n] = "*i8" if n == "mask_ptr" else "*fp32" if n in ("o_ptr", "lse_ptr") else "*bf16"
        else:
            sig[n] = "fp32" if n == "sm_scale" else "i32"
    div16 = [n for n in k.arg_names if n.endswith("_ptr") or n == "split_len"
             or (n.startswith("s") and "_" in n and n not in ("sm_scale", "sm_c", "sm_i"))]
    src = ASTSource(fn=k, signature=sig, constexprs={(k.arg_names.index(c),): v for c, v in const.items()},
                    attrs={(k.arg_names.index(n),): [["tt.divisibility", 16]] for n in div16})
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=warps, num_stages=stages))


def main(what: str) -> None:
    rows = []
    if what == "gqa_smem":
        from perfmodel.measure.tuning.ptx_fingerprint import compile_attention

        print("# GQA split kernel, 16-row tiles (4 query heads per KV head, head dim 128), 64 positions, 4 warps,")
        print("# q inside the loop; per program, and programs per SM by shared memory (233,472 B per SM, 1,024 B")
        print("# reserved per block) and by registers (65,536 per SM, 128 threads)")
        print("# stages | full tiles | registers | spill stores (B) | shared memory (B) | per SM by shared memory | by registers")
        for st in (2, 3):
            for full in (False, True):
                c = compile_attention("gqa", 16, 4, st, extra=dict(FULL_TILES=full, Q_IN_LOOP=True))
                regs, spill = ptxas(c.asm["ptx"])
                smem = c.metadata.shared
                print(f"{st} | {full} | {regs} | {spill} | {smem} | {233472 // (smem + 1024)} | {65536 // (int(regs) * 128)}")
        return
    if what == "mla_loop":
        c = loop_census(mla(False, full_tiles=False).asm["ptx"])
        print("# MLA split kernel, 64 heads, C=1 (16-row tiles, 64 positions, 4 warps, 2 stages), full tiles masked:")
        print(f"# SASS instructions in the main loop (one 64-position tile per iteration): {sum(c.values())}")
        for op, n in c.most_common(12):
            print(f"{op} {n}")
        print(f"BAR {c['BAR']}")
        return
    if what == "mla":
        for label, swap in (("default (rows as M)", False), ("swap_qk (positions as M)", True)):
            c = mla(swap)
            ptx = c.asm["ptx"]
            rows.append((label, *ptxas(ptx), c.metadata.shared, len(re.findall(r"wgmma.mma_async", ptx)),
                         len(re.findall(r"mma.sync", ptx))))
        print("# MLA split kernel, 64 heads, C=1: 16-row tiles, 64 positions, 4 warps, 2 stages")
        print("# variant | registers | spill stores (B) | shared memory (B) | wgmma | mma.sync")
    else:
        from perfmodel.measure.tuning.sass_census import compile_down_pairs

        for label, extra in (("preload", {}), ("preload, no K loop", dict(ONE_KB=True)),
                             ("preload, sums", dict(FROM_SUMS=True)),
                             ("preload, sums, no K loop", dict(FROM_SUMS=True, ONE_KB=True))):
            c = compile_down_pairs(16, 8, 3, extra=dict(PDL_WAIT=True, PRELOAD=True, **extra))
            rows.append((label, *ptxas(c.asm["ptx"]), c.metadata.shared, "", ""))
        print("# pair-summing down, Kimi TP8 slice: 16 columns, 8 warps, 3 stages, dependent launch")
        print("# variant | registers | spill stores (B) | shared memory (B)")
    for r in rows:
        print(" | ".join(str(x) for x in r if x != ""))


if __name__ == "__main__":
    main(sys.argv[1])
