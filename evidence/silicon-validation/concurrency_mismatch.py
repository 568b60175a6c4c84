"""Rows whose provenance note's `silicon_concurrency=` differs from the concurrency the row's
fields give (batch_size x attention_dp_size, what aiconfigurator's cli_estimate and perfmodel take),
and the local way's TPOT errors on them and on the others, from a validate --silicon JSON.

    python evidence/silicon-validation/concurrency_mismatch.py evidence/silicon-validation/all_rows.json"""

import json
import re
import statistics
import sys

from perfmodel import silicon

noted = {}
for line in (silicon.aic.Database.installed().root / silicon.CSV_NAME).read_text().splitlines()[1:]:
    m = re.search(r"silicon_concurrency=(\d+)", line)
    noted[line.split(",", 1)[0]] = int(m[1]) if m else None
rows = {r.id: r for r in silicon.load_rows()}
res = json.load(open(sys.argv[1]))
for way in res["ways"]:
    groups: dict[str, list[float]] = {"differs": [], "agrees or no note": []}
    examples = []
    for p in res["points"]:
        q = p["predicted"].get(way)
        if not q:
            continue
        r = rows[p["id"]]
        n = noted.get(p["id"])
        key = "differs" if n is not None and n != r.concurrency else "agrees or no note"
        groups[key].append(q["tpot_ms"] / p["measured"]["tpot_ms"] - 1)
        if key == "differs" and len(examples) < 5:
            examples.append(f"{p['id']}: batch_size {r.batch_size} x attention_dp {r.attention_dp_size}, note {n}")
    for key, errs in groups.items():
        if errs:
            print(f"{way}: {key}: {len(errs)} priced rows, TPOT median |error| {statistics.median(abs(e) for e in errs):.1%}, "
                  f"signed {statistics.median(errs):+.1%}")
    print("\n".join(f"  e.g. {x}" for x in examples))
