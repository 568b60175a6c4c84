"""Tile / config sweep of a kernel: every combination of the given knob values at every given
shape, beside the wrapper's defaults, checked against the torch reference and timed as the
kernel's bench times it (one round unless --rounds), saved as a table (--json).

    python -m tools.sweep KERNEL --shape SHAPE [...] --grid KEY=V1/V2/... [--grid ...] [--json OUT]

A combination that does not compile or fit is reported and left out. Examples:

    python -m tools.sweep attention --shape mla:H=8:C=32/128:L=8192/32768 \\
        --grid block_s=32/64 --grid num_stages=2/3 --grid num_warps=4/8 --json tune_attention.json
    python -m tools.sweep moe_w4a16 --shape kimi:T=8/64 --grid block_m=8/16 \\
        --grid gate_up_config.block_n=32/64/128 --grid gate_up_config.num_warps=2/4 --json tune_moe.json
    python -m tools.sweep moe_bf16 --shape qwen3:T=1024/4096 --grid block_m=64/128 --grid gate_up_config.num_warps=4/8
"""

from __future__ import annotations

import argparse

from . import ab
from ._cli import grid


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ab.add_common(ap)
    ap.add_argument("--grid", action="append", required=True, help="KEY=V1/V2/... (repeatable: the cross product)")
    ap.set_defaults(rounds=1)
    a, shapes, vs = ab.parse("sweep", ap, argv, lambda a: {"default": {}} | grid(a.grid))
    ab.run("sweep", a, shapes, vs)


if __name__ == "__main__":
    main()
