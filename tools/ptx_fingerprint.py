"""Fingerprints of the W4A16 MoE and tree-attention kernels' sm_90 PTX at configurations that run,
without a GPU: a refactor that leaves every fingerprint unchanged leaves the instructions
unchanged, so it needs no GPU A/B. The PTX is compiled offline (`perfmodel.kernels._offline`) and
stripped of debug information first (line locations, the file table, the debug sections and the
labels that mark inlined calls), which moves when code moves between functions.

    python -m tools.ptx_fingerprint [--out DIR]   # DIR: the stripped PTX too
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re

from perfmodel.kernels._offline import compile_attention, compile_down_pairs, compile_w4a16

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
