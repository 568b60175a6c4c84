"""TTFT and TPOT errors of two validate runs (before / after the InferenceX servers' settings) on the
same rows, per engine: all rows both priced, those a script's settings cover ("scripts":
`perfmodel.silicon.server_settings` of the silicon row, `perfmodel.published_serving.server_settings`
of the published point, not None), and those whose server waits (the after run's scenario names
batch_wait_iters or recv_interval).

    python evidence/server-settings/compare.py BEFORE.json AFTER.json > NAME.txt

Statistics: `perfmodel.silicon_validate.error_stats` (median |error|, p90, signed median).
"""

import json
import sys
from collections import defaultdict

from perfmodel.silicon_validate import error_stats


def _scripted() -> set[str]:
    """The ids of the silicon rows and published points whose run a script's settings cover."""
    from perfmodel import published_serving, silicon

    out = {p.id for p in published_serving.load() if published_serving.server_settings(p) is not None}
    for e in silicon.express_all(silicon.load_rows())[0]:
        if silicon.server_settings(e.row, e.gpus) is not None:
            out.add(e.row.id)
    return out


def _points(path: str) -> dict:
    return {p["id"]: p for p in json.load(open(path))["points"] if p["predicted"].get("local")}


def _errs(p: dict) -> tuple[float, float]:
    m, q = p["measured"], p["predicted"]["local"]
    return q["ttft_ms"] / m["ttft_ms"] - 1, q["tpot_ms"] / m["tpot_ms"] - 1


def _fmt(s: dict) -> str:
    if not s["n"]:
        return "-"
    return f"{100 * s['median_abs']:5.1f}% ({100 * s['signed_median']:+6.1f}%)"


def main(before: str, after: str) -> None:
    b, a = _points(before), _points(after)
    both = sorted(set(b) & set(a))
    print(f"before: {before}\nafter:  {after}\nrows priced by both: {len(both)}")
    print("median |error| (signed median) of the mean TTFT and TPOT, predicted / measured - 1\n")
    print(f"{'rows':24} {'n':>5}  {'TTFT before':>17} {'TTFT after':>17}  {'TPOT before':>17} {'TPOT after':>17}")
    groups: dict[str, list[str]] = defaultdict(list)
    scripted = _scripted()
    for i in both:
        eng = a[i]["engine"]
        groups[eng].append(i)
        groups["all"].append(i)
        for setting in ("batch_wait_iters", "recv_interval"):  # the rows that wait, by the after run's scenario
            if setting in a[i]["scenario"]:
                groups[f"{eng}, {setting}"].append(i)
        if i in scripted:
            groups[f"{eng}, scripts"].append(i)
            groups["all, scripts"].append(i)
    for g in sorted(groups, key=lambda k: (k.split(",")[0] != "all", k)):
        ids = groups[g]
        eb, ea = [_errs(b[i]) for i in ids], [_errs(a[i]) for i in ids]
        row = [error_stats(e[k] for e in es) for k in (0, 1) for es in (eb, ea)]
        print(f"{g:24} {len(ids):5}  {_fmt(row[0]):>17} {_fmt(row[1]):>17}  {_fmt(row[2]):>17} {_fmt(row[3]):>17}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
