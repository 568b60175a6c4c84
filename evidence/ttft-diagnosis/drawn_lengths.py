"""The silicon rows priced with fixed lengths and with the lengths their benchmark drew (run from
the repository root: python evidence/ttft-diagnosis/drawn_lengths.py [--per-group N]).

A stratified sample (`silicon.stratified`: at most N rows per model x system x engine, spanning
their loads) of the expressed rows, each priced on the local profile twice: as if every request
had the row's isl/osl (what the simulation did before `min_length_ratio`), and with the lengths
its benchmark drew (`Row.min_length_ratio`: 0.8 for InferenceX's runs, 1 otherwise). Prints the
median |error| and signed median of the mean TTFT and TPOT by group.
Errors: predicted / measured - 1 (+: perfmodel too slow).
"""

from __future__ import annotations

import argparse
import dataclasses
from collections import defaultdict

import numpy as np

from perfmodel import silicon
from perfmodel.silicon_validate import price


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--per-group", type=int, default=3)
    a = ap.parse_args()
    ok, _ = silicon.express_all(silicon.load_rows())
    sub = silicon.stratified(ok, a.per_group, silicon.group_key)
    res = []
    for e in sub:
        fixed = price(dataclasses.replace(e, row=dataclasses.replace(e.row, source="")))
        drawn = price(e)
        if "ttft_ms" in fixed and "ttft_ms" in drawn:
            res.append((e, fixed, drawn))
    print(f"{len(sub)} rows sampled ({a.per_group} per model x system x engine), {len(res)} priced; local profile")
    groups = {"all": lambda e: "all", "engine": lambda e: e.engine,
              "min_length_ratio": lambda e: f"{e.row.min_length_ratio:g}"}
    for by, key in groups.items():
        g = defaultdict(list)
        for x in res:
            g[key(x[0])].append(x)
        for k in sorted(g):
            line = f"{by:<16} {k:<7} n {len(g[k]):4d}"
            for name, j in (("fixed", 1), ("drawn", 2)):
                t = np.array([x[j]["ttft_ms"] / x[0].row.ttft_ms - 1 for x in g[k]])
                p = np.array([x[j]["tpot_ms"] / x[0].row.tpot_ms - 1 for x in g[k]])
                line += (f" | {name}: TTFT |err| {np.median(abs(t)):4.0%} signed {np.median(t):+4.0%}, "
                         f"TPOT |err| {np.median(abs(p)):4.0%} signed {np.median(p):+4.0%}")
            print(line)


if __name__ == "__main__":
    main()
