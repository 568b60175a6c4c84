"""TTFT split into a per-prompt floor and a per-token slope, measured and predicted, by group.

Reads the committed silicon run (`evidence/silicon-validation/all_rows.json`: every expressed row
of aiconfigurator-core 0.12.0's silicon sample with its measured TTFT and perfmodel's local and
imported predictions). For each group (model, engine, system, layout, routed-expert dtype) with
rows at concurrency 4 at both 1024- and 8192-token prompts (OSL any), the median TTFT at each
prompt length gives a line: slope = (T8k - T1k) / 7168 tokens, floor = T1k - 1024 * slope. At
C=4 a prompt rarely waits behind another one, so TTFT is close to one prefill step plus the wait
for the step in flight. The floor is what a prompt pays whatever its length; the slope what each
prompt token adds. A per-token mispricing of the prefill step (MLA's form, the experts' prefill
laws, the collectives at prefill sizes) moves the slope; a per-step cost moves the floor.

Then T(1024) by GPU count (tensor-parallel layouts: GPU work per rank shrinks with the ranks, a
host-bound forward's does not), and the floor perfmodel leaves (measured minus imported) per
kernel launch of the group's 1024-token prefill step as perfmodel counts them, and
aiconfigurator's estimator on DeepSeek-R1's rows at C <= 8 where its saved results priced them.

    python evidence/dsr1-ttft-floor/floor.py > evidence/dsr1-ttft-floor/floor.txt
"""
import json
import re
import statistics
from collections import defaultdict
from pathlib import Path

ROWS = Path(__file__).resolve().parents[1] / "silicon-validation" / "all_rows.json"
CONC = 4
SHORT, LONG = 1024, 8192
FLOORS: dict = {}
# A group whose measured slope is above STALL x the local way's is not a line through one prefill
# step per prompt: its 8k prompts stalled (SGLang's TP rows at 8192-token prompts, seconds long).
STALL = 4
STALLED: list = []


def rows():
    """(model, engine, system, layout, GPUs, parallel, routed-expert dtype), prompt tokens and the
    (measured, local, imported) TTFT of every row priced both ways at C=CONC."""
    for p in json.loads(ROWS.read_text())["points"]:
        if not p["predicted"].get("imported") or not p["predicted"].get("local"):
            continue
        m = re.search(r"C=(\d+), (\d+)/(\d+)", p["scenario"])
        if int(m.group(1)) != CONC:
            continue
        width, parallel = re.search(r" on (\d+)x \S+ (\S+),", p["scenario"]).groups()
        layout = p["scenario"].split(" on ")[1].split(",")[0]
        moe = re.search(r"routed_experts=(\w+)", p["scenario"])
        key = (p["model"], p["engine"], p["system"], layout, int(width), parallel, moe.group(1) if moe else "-")
        yield key, int(m.group(2)), (p["measured"]["ttft_ms"], p["predicted"]["local"]["ttft_ms"],
                                     p["predicted"]["imported"]["ttft_ms"])


def main() -> None:
    groups: dict = defaultdict(lambda: defaultdict(list))
    for (model, engine, system, layout, _w, _p, moe), isl, ttft in rows():
        if isl in (SHORT, LONG):
            groups[(model, engine, system, layout, moe)][isl].append(ttft)
    print(f"source: {ROWS.relative_to(ROWS.parents[2])}; rows at C={CONC}, prompts {SHORT} and {LONG} tokens;"
          " medians per group; floor = T(1024) - 1024 * slope, slope in us per prompt token")
    print(f"{'model':14} {'engine':7} {'system':9} {'layout':20} {'experts':7} {'n1k':>3} {'n8k':>3} "
          f"{'T1k meas':>9} {'loc':>7} {'imp':>7} | {'floor meas':>10} {'loc':>7} {'imp':>7} | "
          f"{'slope meas':>10} {'loc':>7} {'imp':>7}")
    summary: dict = defaultdict(list)
    for key in sorted(groups):
        g = groups[key]
        if not g[SHORT] or not g[LONG]:
            continue
        med = {isl: [statistics.median(r[i] for r in g[isl]) for i in range(3)] for isl in (SHORT, LONG)}
        slope = [(med[LONG][i] - med[SHORT][i]) / (LONG - SHORT) for i in range(3)]
        floor = [med[SHORT][i] - SHORT * slope[i] for i in range(3)]
        print(f"{key[0]:14} {key[1]:7} {key[2]:9} {key[3]:20} {key[4]:7} {len(g[SHORT]):3} {len(g[LONG]):3} "
              f"{med[SHORT][0]:9.1f} {med[SHORT][1]:7.1f} {med[SHORT][2]:7.1f} | "
              f"{floor[0]:10.1f} {floor[1]:7.1f} {floor[2]:7.1f} | "
              f"{slope[0] * 1e3:10.1f} {slope[1] * 1e3:7.1f} {slope[2] * 1e3:7.1f}")
        if slope[0] <= STALL * slope[1]:
            FLOORS[key] = (floor, slope)
            summary[(key[0], key[1])].append((floor, slope, med))
        else:
            STALLED.append(key)
    print()
    print("by model and engine, medians over groups: floor (ms) and slope (us/token), measured / local / imported;"
          f" T1k's error of the imported way (groups whose measured slope is above {STALL} x the local way's left out:"
          " their 8k prompts stalled; listed at the end)")
    for (model, engine), v in sorted(summary.items()):
        f = [statistics.median(x[0][i] for x in v) for i in range(3)]
        s = [statistics.median(x[1][i] * 1e3 for x in v) for i in range(3)]
        e = statistics.median(x[2][SHORT][2] / x[2][SHORT][0] - 1 for x in v)
        print(f"  {model:14} {engine:7} groups {len(v):2}  floor {f[0]:7.1f} / {f[1]:6.1f} / {f[2]:6.1f} ms"
              f"   slope {s[0]:6.1f} / {s[1]:6.1f} / {s[2]:6.1f} us   T1k imported {e:+.0%}")
    ratios = sorted(slope[0] / slope[2] for _floor, slope in FLOORS.values() if slope[2] > 0)
    print(f"  measured slope / imported slope over the {len(ratios)} groups kept: median {statistics.median(ratios):.2f},"
          f" quartiles {ratios[len(ratios) // 4]:.2f} and {ratios[3 * len(ratios) // 4]:.2f}, above 1 in"
          f" {sum(x > 1 for x in ratios)}, 3 or more in {sum(x >= 3 for x in ratios)}")


def by_width() -> None:
    """T(1024) at C=4 by GPU count, tensor-parallel layouts: a prefill step's GPU work per rank
    shrinks as the ranks grow (weights, FLOPs), a host-bound eager forward does not (every rank
    launches every op of every layer)."""
    groups: dict = defaultdict(lambda: defaultdict(list))
    for (model, engine, system, _l, width, parallel, moe), isl, ttft in rows():
        if isl == SHORT and parallel == "tp":
            groups[(model, engine, system, moe)][width].append(ttft)
    print()
    print(f"T({SHORT}) at C={CONC} by GPU count, layout tp, medians: measured / local / imported (ms)")
    for key in sorted(groups):
        g = groups[key]
        if len(g) < 2:
            continue
        cells = "   ".join(f"{w}x {statistics.median(r[0] for r in g[w]):6.1f} / "
                           f"{statistics.median(r[1] for r in g[w]):6.1f} / {statistics.median(r[2] for r in g[w]):6.1f}"
                           for w in sorted(g))
        print(f"  {key[0]:14} {key[1]:7} {key[2]:9} {key[3]:6} {cells}")


TARGET = {"b200_sxm": "b200", "b300_sxm": "b300", "h200_sxm": "h200", "h100_sxm": "h100"}


def per_kernel(floors: dict) -> None:
    """The floor perfmodel leaves (measured minus imported) per kernel launch of the group's
    1024-token prefill step as perfmodel builds it (`api.step`, eager, the embedded profile: only
    the count is read). An engine that launches a prefill forward op by op from Python pays host
    time per op; if that is what the floor is, it scales with the ops of the forward."""
    from perfmodel import api

    counts: dict = {}
    print()
    print("floor left (measured - imported, ms) per kernel of the group's 1024-token prefill step"
          " (perfmodel's count, api.step eager)")
    by: dict = defaultdict(list)
    for key, (floor, _slope) in sorted(floors.items()):
        model, engine, system, layout, _moe = key
        width, parallel = layout.split("x ")[0], layout.split(" ")[-1]
        ck = (model, system, width, parallel)
        if ck not in counts:
            res = api.step(target=TARGET[system], gpus=int(width), model=model, parallel=parallel, graphs=False,
                           prefill=["1x1024@0"])
            counts[ck] = res.n_kernels
        left = floor[0] - floor[2]
        us = left * 1e3 / counts[ck]
        by[(engine, model)].append(us)
        print(f"  {model:14} {engine:7} {system:9} {layout:20} {_moe:6} left {left:7.1f} ms  kernels {counts[ck]:5}"
              f"  {us:6.1f} us/kernel")
    print(f"  left out (measured slope above {STALL} x the local way's: the 8k prompts stalled):")
    for key in STALLED:
        print("    " + " ".join(key))
    print()
    print("by engine and model, median us per kernel (groups)")
    for (engine, model), v in sorted(by.items()):
        print(f"  {engine:7} {model:14} {statistics.median(v):6.1f} ({len(v)})")


AIC_RESULTS = ["silicon-validation/aic_estimator_4_per_group.jsonl",
               "silicon-validation/aic_estimator_8_per_group.jsonl",
               "engine-calibrations/aiconfigurator_per_group2.jsonl"]


def estimator() -> None:
    """aiconfigurator's estimator on DeepSeek-R1's rows at C <= 8, where its saved results
    (evidence/engine-calibrations/run.py AIC_RESULTS) priced them: it sums the database's per-op
    times, as the imported way does."""
    from perfmodel.silicon_validate import read_aic

    est: dict = {}
    for name in AIC_RESULTS:
        path = ROWS.parents[1] / name
        est.update({k: v for k, v in read_aic(path.read_text(), name).items() if "ttft_ms" in v})
    print()
    print("aiconfigurator's estimator on DeepSeek-R1's rows at C <= 8 (its saved results): TTFT ms")
    print(f"  {'row':76} {'C':>2} {'prompt':>6} {'measured':>9} {'estimator':>9} {'imported':>9}")
    for p in json.loads(ROWS.read_text())["points"]:
        if p["model"] != "deepseek-v3" or p["id"] not in est or not p["predicted"].get("imported"):
            continue
        m = re.search(r"C=(\d+), (\d+)/(\d+)", p["scenario"])
        if int(m.group(1)) > 8:
            continue
        print(f"  {p['id']:76} {m.group(1):>2} {m.group(2):>6} {p['measured']['ttft_ms']:9.1f}"
              f" {est[p['id']]['ttft_ms']:9.1f} {p['predicted']['imported']['ttft_ms']:9.1f}")


if __name__ == "__main__":
    main()
    by_width()
    per_kernel(FLOORS)
    estimator()
