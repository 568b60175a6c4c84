"""How far any correction of a given kind could take the imported step's errors, chosen with the
measured answers (run from the repository root: python evidence/engine-calibrations/bound.py).

An engine calibration held out by system (LOSO) learns its terms on the other systems' rows: it
cannot know what the held-out system's rows alone would need. This prints, for the 82 rows the
shipped calibrations were fitted on (run.py's errors_*.json, their uncalibrated imported-way
predictions) and for every silicon row the imported way priced (../silicon-validation/all_rows.json),
the median |error| of TPOT and TTFT after the best correction of each kind, each group's terms
chosen with the measured figures themselves (in sample: no held-out fit can do better on average):

  one scale per group         predicted x s
  one shift per group         predicted + a (ms; any sign)
  scale and shift per group   predicted x s + a

for groups: every row together, each engine, each engine and system, each engine, system and model.
Terms are found by coordinate descent on the pooled median |error| over a grid (a few sweeps from
each group's median log-ratio), so a figure is what such a correction reaches, up to the grid's
0.5% step. Also: the rows within 10% and the same rows' shipped figures (fitted, held out by system).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

HERE = Path(__file__).parent
ENGINES = ("vllm", "sglang", "trtllm")
GROUPS = {"all rows": lambda r: "all", "engine": lambda r: r["engine"],
          "engine, system": lambda r: (r["engine"], r["system"]),
          "engine, system, model": lambda r: (r["engine"], r["system"], r["model"])}
SCALES = [math.exp(x / 200) for x in range(-300, 301)]  # 0.22x .. 4.5x, 0.5% steps


def med_abs(errs) -> float:
    return float(np.median(np.abs(np.asarray(errs, dtype=float))))


def best(rows, key, kind, sweeps=3):
    """`_best` of `kind`; for scale and shift together, from the better start of the two."""
    starts = (kind,) if kind != "both" else ("scale", "shift")
    return min((_best(rows, key, kind, start, sweeps) for start in starts), key=lambda f: f[0])


def _best(rows, key, kind, start, sweeps):
    """The pooled median |error| after per-group (scale, shift) terms that minimise it (coordinate
    descent on a grid, from each group's own L1 optimum of `start`'s kind), the number of groups
    and each group's terms."""
    meas = np.array([r["measured"] for r in rows])
    pred = np.array([r["predicted"] for r in rows])
    labels = [key(r) for r in rows]
    groups = {g: np.array([i for i, x in enumerate(labels) if x == g]) for g in dict.fromkeys(labels)}
    s, a = np.ones(len(rows)), np.zeros(len(rows))
    for idx in groups.values():  # start: the group's median log ratio (scale) or median difference (shift)
        if start == "shift":
            a[idx] = np.median(meas[idx] - pred[idx])
        else:
            s[idx] = math.exp(np.median(np.log(meas[idx] / pred[idx])))
    err = np.abs((pred * s + a) / meas - 1)
    for _ in range(sweeps if len(groups) > 1 or kind == "both" else 1):
        for idx in groups.values():
            rest = np.delete(err, idx)
            typical = float(np.median(meas[idx]))
            cands = ([(x, a[idx][0]) for x in SCALES] if kind in ("scale", "both") else []) + \
                    ([(s[idx][0], typical * x / 200) for x in range(-200, 201)] if kind in ("shift", "both") else [])
            scored = [(float(np.median(np.concatenate([rest, np.abs((pred[idx] * cs + ca) / meas[idx] - 1)]))), cs, ca)
                      for cs, ca in cands]
            _, s[idx], a[idx] = min(scored, key=lambda t: t[0])
            err[idx] = np.abs((pred[idx] * s[idx] + a[idx]) / meas[idx] - 1)
    return float(np.median(err)), len(groups), {g: (s[idx][0], a[idx][0]) for g, idx in groups.items()}


def held_out(rows, kind):
    """Pooled median |error| when each engine's one correction of `kind` is chosen (as `best`, on
    the pooled median of the engine's other systems' rows) without the system it is applied to."""
    errs = []
    for e in sorted({r["engine"] for r in rows}):
        mine = [r for r in rows if r["engine"] == e]
        for sysname in sorted({r["system"] for r in mine}):
            train = [r for r in mine if r["system"] != sysname]
            test = [r for r in mine if r["system"] == sysname]
            if not train:
                continue
            sc, ad = best(train, lambda r: "all", kind)[2]["all"]
            errs += [(r["predicted"] * sc + ad) / r["measured"] - 1 for r in test]
    return med_abs(errs)


def report(title, rows_by_fig, shipped=None):
    print(f"== {title} ==")
    for fig, rows in rows_by_fig.items():
        unc = [r["predicted"] / r["measured"] - 1 for r in rows]
        line = f"  {fig:<8} n {len(rows):4d}  uncalibrated {med_abs(unc):6.1%}, {sum(abs(e) <= 0.10 for e in unc)} within 10%"
        if shipped:
            line += "".join(f"; {k} {med_abs(v[fig]):6.1%}" for k, v in shipped.items())
        print(line)
        for gname, key in GROUPS.items():
            cells = []
            for kind in ("scale", "shift", "both"):
                m, n, _ = best(rows, key, kind)
                cells.append(f"{kind} {m:6.1%}")
            print(f"  {fig:<8} best per {gname:<22} ({n:3d} groups): " + ", ".join(cells))
        print(f"  {fig:<8} one per engine, held out by system:         "
              + ", ".join(f"{kind} {held_out(rows, kind):6.1%}" for kind in ("scale", "shift", "both")))


def main() -> None:
    fitted_rows = {"tpot_ms": [], "ttft_ms": []}
    shipped = {"fitted": {"tpot_ms": [], "ttft_ms": []}, "held out by system": {"tpot_ms": [], "ttft_ms": []}}
    for e in ENGINES:
        for r in json.loads((HERE / f"errors_{e}.json").read_text())[e]["rows"]:
            fitted_rows[r["figure"]].append({"engine": e, "system": r["system"], "model": r["model"],
                                             "measured": r["measured"],
                                             "predicted": r["measured"] * (1 + r["uncalibrated"])})
            shipped["fitted"][r["figure"]].append(r["fitted"])
            shipped["held out by system"][r["figure"]].append(r["leave-one-system-out"])
    report("the 82 rows the shipped calibrations were fitted on (imported way, uncalibrated)", fitted_rows, shipped)
    data = json.loads((HERE.parent / "silicon-validation" / "all_rows.json").read_text())
    all_rows = {"tpot_ms": [], "ttft_ms": []}
    for p in data["points"]:
        pred = p["predicted"].get("imported") or {}
        for fig in all_rows:
            if fig in pred:
                all_rows[fig].append({"engine": p["engine"], "system": p["system"], "model": p["model"],
                                      "measured": p["measured"][fig], "predicted": pred[fig]})
    report(f"every silicon row the imported way priced ({data['database']})", all_rows)


if __name__ == "__main__":
    main()
