"""Interleaved A/B timing of a kernel's variants over given shapes, on one GPU.

Per shape, every variant is first checked against the torch reference on the GPU (a variant
that fails or does not compile is reported and left out); then the passing ones are timed in
turn, round after round (so that clock drift hits every variant alike), as the kernel's bench
times it: a CUDA graph of one call per input copy, cold inputs. Each variant's line gives its
times per round, the best, and its bytes per second and share of the read ceiling.

    python -m tools.ab KERNEL --shape SHAPE [--shape ...] [--variant NAME:knobs ...]
                       [--before PATH] [--rounds 3] [--check-only] [--per-kernel] [--json OUT]

KERNEL is attention, moe_w4a16, moe_bf16 or ddtree; SHAPE and the knobs are described in
tools/_cli.py. The wrapper's defaults run as the variant `default`; `--before PATH` adds the
variant `before`, the defaults of another copy of the kernel's module (e.g. `git show
<commit>:kernels/tree_attention.py > /tmp/before.py`). Examples:

    python -m tools.ab attention --shape mla:H=64:C=1/8:L=1024/4096 --variant w8:num_warps=8 --variant r32:block_r=32
    python -m tools.ab moe_w4a16 --shape kimi_tp8:T=1/2 --variant no_pdl:pdl=false \\
        --variant no_preload:@DOWN_PAIRS_PRELOAD_MAX_KB=0 --per-kernel
"""

from __future__ import annotations

import argparse
import json
import time

from ._cli import InputError, fail, parse_shapes, variants

KERNELS = ("attention", "moe_w4a16", "moe_bf16", "ddtree")


def add_common(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("kernel", choices=KERNELS)
    ap.add_argument("--shape", action="append", required=True, help="KIND:key=value[/value]:... (repeatable)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--check-only", action="store_true", help="compile and check every variant, time nothing")
    ap.add_argument("--time-failed", action="store_true",
                    help="also time variants that ran but failed the check (timing-only knobs such as @SPLIT_ONLY=true)")
    ap.add_argument("--per-kernel", action="store_true", help="also each variant's kernels' durations (profiler)")
    ap.add_argument("--read-GBps", type=float, default=None, help="read ceiling for '%% of read' (default: the shipped profile's on its GPU)")
    ap.add_argument("--json", help="write one row per (shape, variant) to this file")


def parse(tool: str, ap: argparse.ArgumentParser, argv, make_variants):
    """The arguments, the shapes and the variants (name -> knobs); bad input exits 2 with one line."""
    a = ap.parse_args(argv)
    try:
        if a.rounds < 1:
            raise InputError("--rounds must be at least 1")
        shapes = [s for spec in a.shape for s in parse_shapes(a.kernel, spec)]
        vs = make_variants(a)
    except InputError as e:
        fail(tool, str(e))
    return a, shapes, vs


def run(tool: str, a, shapes: list[dict], vs: dict[str, dict], before: str | None = None) -> list[dict]:
    """Check, then time interleaved, every variant at every shape; print and return the rows."""
    from . import _targets as tg

    tg.start(tool)
    import torch

    mods = {}
    if before:
        try:
            mods["before"] = tg.load_module_copy(before, a.kernel)
        except FileNotFoundError as e:
            fail(tool, str(e))
        vs = {"before": {}} | vs
    ceiling, where = tg.read_ceiling_GBps(a.read_GBps)
    print(f"# read ceiling: {f'{ceiling:.0f} GB/s' if ceiling else 'none'} ({where})", flush=True)
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    width = max(len(n) for n in vs)
    rows = []
    t0 = time.time()
    for shape in shapes:
        case = tg.make_case(a.kernel, shape)
        print(f"\n## {a.kernel} {case.name}: us per call (CUDA graph over {len(case.args_list)} input copies, cold)",
              flush=True)
        if isinstance(case, tg.AttentionCase):
            print(f"plan {case.name}: {case.plan(num_sms)}", flush=True)
        ok, ran = {}, {}
        for name, knobs in vs.items():
            try:
                d = case.check(knobs, mods.get(name))
                ok[name], ran[name] = d < tg.CHECK_MAX_DIFF, True
                print(f"check {case.name} {name}: calc_diff {d:.1e} ({'ok' if ok[name] else 'FAIL'})", flush=True)
            except Exception as e:  # noqa: BLE001 -- a variant that does not compile or fit: report, leave out
                ok[name] = ran[name] = False
                print(f"check {case.name} {name}: failed: {type(e).__name__}: {str(e).strip()[:160]}", flush=True)
        runs = [n for n in vs if ok[n] or (a.time_failed and ran[n])]
        if a.check_only or not runs:
            rows += [dict(shape=case.name, variant=n, knobs=vs[n], check_ok=ok[n]) for n in vs]
            continue
        times = {n: [] for n in runs}
        for _ in range(a.rounds):
            for n in runs:
                times[n].append(case.time_us(vs[n], mods.get(n)))
        for n in vs:
            row = dict(shape=case.name, variant=n, knobs=vs[n], check_ok=ok[n], us=times.get(n))
            if n in times:
                best = min(times[n])
                rate = case.nbytes / best / 1e3 if case.nbytes else None
                line = f"{case.name:28s} {n:{width}s} {' '.join(f'{t:8.1f}' for t in times[n])} | best {best:8.1f} us"
                if rate:
                    line += f", {rate:6.0f} GB/s"
                    if ceiling:
                        line += f" = {100 * rate / ceiling:3.0f}% of read"
                if case.flops:
                    line += f", {case.flops / best / 1e6:6.1f} TFLOP/s"
                row.update(best_us=best, GBps=rate)
                print(line, flush=True)
            rows.append(row)
        if a.per_kernel:
            for n in runs:
                print(f"    kernels {n}: {tg.kernel_times(case, vs[n], mods.get(n))}", flush=True)
        del case
        torch.cuda.empty_cache()
    print(f"# done at {time.time() - t0:.0f} s", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    return rows


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common(ap)
    ap.add_argument("--variant", action="append", default=[], help="NAME:key=value,... (repeatable)")
    ap.add_argument("--before", help="path of another copy of the kernel's module, timed as the variant 'before'")
    a, shapes, vs = parse("ab", ap, argv, lambda a: variants(a.variant))
    run("ab", a, shapes, vs, a.before)


if __name__ == "__main__":
    main()
