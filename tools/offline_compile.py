"""Registers, spills, shared memory and MMA kind of a kernel at given constexprs, from an offline
sm_90 compile (no GPU: `perfmodel.kernels._offline`): what a tile or stage variant costs before
it is timed (a spill, or a second program per SM lost to shared memory).

    python -m tools.offline_compile KERNEL [--config key=value,...] [--config ...]

KERNEL and its keywords (the compile functions of kernels/_offline.py; `extra.NAME=value` sets
any other constexpr of the kernel):

    attention   kind=mla|gqa, block_r, warps, stages, block_s       e.g. kind=mla,block_r=64,warps=8,extra.FULL_TILES=false
    w4a16       block_m, block_n, gate_up, warps, stages, dequant   e.g. block_m=8,block_n=64,gate_up=true,warps=4,stages=3
    down_pairs  block_n, warps, stages, pb, dequant                 e.g. block_n=16,warps=8,stages=3,extra.PRELOAD=true
"""

from __future__ import annotations

import argparse

from ._cli import InputError, fail, parse_knobs

REQUIRED = {"attention": ("kind", "block_r"), "w4a16": ("block_m", "block_n", "gate_up", "warps", "stages"),
            "down_pairs": ("block_n", "warps", "stages")}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kernel", choices=sorted(REQUIRED))
    ap.add_argument("--config", action="append", required=True, help="key=value,... (repeatable)")
    a = ap.parse_args(argv)
    try:
        configs = [parse_knobs(c) for c in a.config]
        for c in configs:
            missing = [k for k in REQUIRED[a.kernel] if k not in c]
            if missing:
                raise InputError(f"--config {c}: {', '.join(missing)} not given")
    except InputError as e:
        fail("offline_compile", str(e))
    from perfmodel.kernels import _offline

    fn = {"attention": _offline.compile_attention, "w4a16": _offline.compile_w4a16,
          "down_pairs": _offline.compile_down_pairs}[a.kernel]
    for text, c in zip(a.config, configs):
        try:
            ck = fn(**c)
            u = _offline.usage(ck.asm["ptx"])
            print(f"{a.kernel} {text}: {u['registers']} registers, {u['spill_bytes']} bytes spilled, "
                  f"{ck.metadata.shared} B shared memory, {u['wgmma']} wgmma, {u['mma_sync']} mma.sync", flush=True)
        except Exception as e:  # noqa: BLE001 -- a config that does not compile: say so, go on
            print(f"{a.kernel} {text}: FAIL {type(e).__name__}: {str(e).strip()[:200]}", flush=True)


if __name__ == "__main__":
    main()
