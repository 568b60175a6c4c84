"""TPOT and TTFT errors of a validate --silicon JSON by the layout each row was priced in (the
named layouts and the mixed ones), per way.

    python evidence/silicon-validation/by_layout.py evidence/silicon-validation/all_rows.json"""

import json
import sys

from perfmodel.silicon_validate import error_stats

res = json.load(open(sys.argv[1]))
for way in res["ways"]:
    groups: dict[str, list[dict]] = {}
    for p in res["points"]:
        if way in p["predicted"]:
            groups.setdefault(p["scenario"].split(" ")[4].rstrip(","), []).append(p)
    for lay, ps in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        t = error_stats(q["predicted"][way]["tpot_ms"] / q["measured"]["tpot_ms"] - 1 for q in ps)
        f = error_stats(q["predicted"][way]["ttft_ms"] / q["measured"]["ttft_ms"] - 1 for q in ps)
        print(f"{way}: {lay}: {t['n']} rows, TPOT median |error| {t['median_abs']:.1%}, signed {t['signed_median']:+.1%}; "
              f"TTFT median |error| {f['median_abs']:.1%}, signed {f['signed_median']:+.1%}")
