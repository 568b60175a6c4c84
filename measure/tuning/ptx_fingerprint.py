"""Fingerprints of the W4A16 MoE and tree-attention kernels' sm_90 PTX at configurations that run,
without a GPU:
a refactor that leaves every fingerprint unchanged leaves the instructions unchanged, so it
needs no GPU A/B. The PTX is compiled offline (`sass_census`'s compile functions) and stripped of
debug information first (line locations, the file table, the debug sections and the labels that
mark inlined calls), which moves when code moves between functions.

    python -m perfmodel.measure.tuning.ptx_fingerprint [--out DIR]   # DIR: the stripped PTX too
"""

from __future__ import annotations

import argparse
import hashlib
import inspect
import os
import re

from .sass_census import compile_down_pairs, compile_w4a16


def compile_attention(kind: str, block_r: int, warps: int = 4, stages: int = 2, extra: dict | None = None):
    """Offline sm_90 compile of the tree-attention split kernel as `kind` ("mla": 512 + 64 latent
    dims, the value the latent; "gqa": head dim 128, 4 query heads per KV head) launches it with
    `block_r`-row tiles of 64 positions, the constexprs the wrapper picks by default at those
    tiles (`extra` overrides); pointers and strides divisible by 16, as at run time."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from perfmodel.kernels import tree_attention as ta

    k = ta._get_kernel().fn
    mla = kind == "mla"
    dv = 512 if mla else 128
    const = dict(G=64 if mla else 4, DK=dv, DPE=64 if mla else 0, DV=dv, V_IS_K=mla, BLOCK_R=block_r, BLOCK_S=64,
                 DOT_F32=False, BLOCK_DV=dv, RESCALE_LOG2=8.0, PDL=True, Q_IN_LOOP=ta.default_q_in_loop(dv, block_r))
    if hasattr(ta, "default_full_tiles"):  # absent before session 12: older kernels can be fingerprinted too
        # its choice at one wave of programs (C=1); session 12's took (dv, block_r) only
        n_args = len(inspect.signature(ta.default_full_tiles).parameters)
        const["FULL_TILES"] = ta.default_full_tiles(dv, block_r, *((stages,) if n_args > 2 else ()))
    const.update(extra or {})
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

# name -> (compile function, its arguments, its extra constexprs): the pair path at one token (gate_up with split-K and
# the fused activation, the pair-summing down with and without its preload), the aligned path,
# the atomic down of the pair path at 2-4 tokens, and ragged K
CONFIGS = {
    "gate_up_pair": (compile_w4a16, (8, 64, True, 4, 3),
                     dict(PDL_TRIGGER=True, SPLIT_ACT=True, SELF_CLEAN=True, ATOMIC_READ=True)),
    "gate_up_aligned": (compile_w4a16, (16, 64, True, 4, 3), {}),
    "down_atomic_pair": (compile_w4a16, (8, 128, False, 4, 2),
                         dict(ATOMIC=True, FINAL_CAST=True, SELF_CLEAN=True, PDL_WAIT=True, ATOMIC_READ=True,
                              C_ROW_DIV=8, A_ROW_DIV=1, MUL_ROUTED_WEIGHT=True)),
    "down_aligned_ragged": (compile_w4a16, (16, 64, False, 4, 2), dict(EVEN_K=False, FAST_COLS=False)),
    "down_pairs": (compile_down_pairs, (16, 8, 3), dict(PDL_WAIT=True)),
    "down_pairs_preload": (compile_down_pairs, (16, 8, 3), dict(PDL_WAIT=True, PRELOAD=True)),
    "down_pairs_ragged": (compile_down_pairs, (16, 4, 3), dict(EVEN_K=False)),
    # decode attention: MLA and GQA at 16-row tiles (C=1; GQA's small-C x L plan with 3 stages,
    # and with the mask on full tiles, as it runs past one wave of 2 programs per SM), MLA at
    # 32-row tiles (large C)
    "attn_mla_r16": (compile_attention, ("mla", 16), {}),
    "attn_gqa_r16": (compile_attention, ("gqa", 16, 4, 2), {}),
    "attn_gqa_r16_st3": (compile_attention, ("gqa", 16, 4, 3), {}),
    "attn_gqa_r16_st3_mask": (compile_attention, ("gqa", 16, 4, 3), dict(FULL_TILES=False)),
    "attn_mla_r32": (compile_attention, ("mla", 32), {}),
}


def stripped(ptx: str) -> str:
    """The PTX without debug information (see the module docstring)."""
    ptx = re.split(r"^\s*\.section\s+\.debug", ptx, maxsplit=1, flags=re.M)[0]
    ptx = re.sub(r"^\s*\.(loc|file)\b.*\n", "", ptx, flags=re.M)
    ptx = re.sub(r"^\$L__tmp\d+:\n", "", ptx, flags=re.M)
    return ptx


def fingerprints(out_dir: str | None = None) -> dict[str, str]:
    got = {}
    for name, (compile_fn, args, extra) in CONFIGS.items():
        ptx = stripped(compile_fn(*args, extra=extra).asm["ptx"])
        got[name] = hashlib.sha256(ptx.encode()).hexdigest()[:16]
        if out_dir:
            with open(os.path.join(out_dir, f"{name}.ptx"), "w") as f:
                f.write(ptx)
    return got


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="a folder for the stripped PTX of each configuration")
    a = ap.parse_args(argv)
    if a.out:
        os.makedirs(a.out, exist_ok=True)
    for name, fp in fingerprints(a.out).items():
        print(f"{name:22s} {fp}")


if __name__ == "__main__":
    main()
