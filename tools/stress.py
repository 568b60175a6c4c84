"""Many eager calls of a kernel's variants, each output checked against the torch reference:
the way to catch a result that is only sometimes wrong (a race between programs), which one
checked call does not show. Per shape and variant, --calls calls cycling over the input copies,
back to back (checked after the last; the device is never idle between them) and, with
--sync, synchronised and checked one by one. For the W4A16 MoE pair path it also counts the
calls after which the persistent workspace was left non-zero.

    python -m tools.stress KERNEL --shape SHAPE [...] [--variant NAME:knobs ...] [--calls 400] [--sync]

For example, the arrival epilogues' plain reads against the atomic reads (`ATOMIC_READ`):

    python -m tools.stress moe_w4a16 --shape kimi:T=2/4 --variant plain:@ATOMIC_READ=false,pair_blocks=true,pdl=false
"""

from __future__ import annotations

import argparse

from ._cli import InputError, fail, parse_shapes, variants
from .ab import KERNELS


def _workspace_nonzero(mod) -> bool | None:
    import torch

    ws = getattr(mod, "_PAIR_WS", {}).get(("cuda", torch.cuda.current_device()))
    return None if ws is None else bool(torch.count_nonzero(ws))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kernel", choices=KERNELS)
    ap.add_argument("--shape", action="append", required=True)
    ap.add_argument("--variant", action="append", default=[], help="NAME:key=value,... (repeatable)")
    ap.add_argument("--calls", type=int, default=400)
    ap.add_argument("--sync", action="store_true", help="also synchronised calls, each checked at once")
    a = ap.parse_args(argv)
    try:
        if a.calls < 1:
            raise InputError("--calls must be at least 1")
        shapes = [s for spec in a.shape for s in parse_shapes(a.kernel, spec)]
        vs = variants(a.variant)
    except InputError as e:
        fail("stress", str(e))
    from . import _targets as tg

    tg.start("stress")
    import torch

    for shape in shapes:
        case = tg.make_case(a.kernel, shape)
        refs = [case.reference(i) for i in range(len(case.args_list))]
        n = len(refs)
        for name, knobs in vs.items():
            f, mod, consts = case.bound(knobs)
            with tg.module_constants(mod, consts):
                outs = [f(*case.args_list[i % n]) for i in range(a.calls)]
                torch.cuda.synchronize()
                wrong = sum(case.diff(o, refs[i % n]) > tg.CHECK_MAX_DIFF for i, o in enumerate(outs))
                print(f"{case.name} {name} back to back: {wrong} of {a.calls} wrong", flush=True)
                del outs
                if not a.sync:
                    continue
                wrong = left = 0
                for i in range(a.calls):
                    out = f(*case.args_list[i % n])
                    torch.cuda.synchronize()
                    wrong += case.diff(out, refs[i % n]) > tg.CHECK_MAX_DIFF
                    left += bool(_workspace_nonzero(mod))
                note = f"; calls leaving the pair workspace non-zero: {left}" if _workspace_nonzero(mod) is not None else ""
                print(f"{case.name} {name} synchronised: {wrong} of {a.calls} wrong{note}", flush=True)
        del case, refs
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
