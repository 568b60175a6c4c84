"""The silicon rows whose provenance note's `silicon_concurrency=` differs from the concurrency their
fields give (batch_size x attention_dp_size), each priced at both concurrencies (local way,
InferenceX-style drawn lengths where the row is InferenceX's), with the measured TTFT and TPOT
and the concurrency each row's id names (`_c<N>_`). Run from the repository root:

    python evidence/concurrency-note/run.py

Errors: predicted / measured - 1 (+: too slow)."""

import re
import statistics
import subprocess
from dataclasses import replace

from perfmodel import silicon
from perfmodel.silicon_validate import price

git = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
rows = silicon.load_rows()
print(f"perfmodel at {git}; {len(rows)} aggregated rows")
errs: dict[str, list[float]] = {"fields": [], "note": []}
print(f"{'row':<96} {'C fields':>8} {'C note':>6} {'C id':>5} {'TPOT':>7} {'fields':>7} {'note':>7}  "
      f"{'TTFT':>8} {'fields':>7} {'note':>7}")
for r in rows:
    m = re.search(r"silicon_concurrency=(\d+)", r.source)
    if not m or int(m[1]) == r.concurrency:
        continue
    note = int(m[1])
    c_id = re.search(r"_c(\d+)_", r.id)
    out = {}
    for kind, row in (("fields", r), ("note", replace(r, batch_size=note // r.attention_dp_size))):
        try:
            e = silicon.express(row)
        except silicon.NotExpressible as x:
            out[kind] = {"error": str(x)}
            continue
        out[kind] = price(e)
    cells = []
    for fig, meas in (("tpot_ms", r.tpot_ms), ("ttft_ms", r.ttft_ms)):
        cells.append(f"{meas:7.1f}" if fig == "tpot_ms" else f"{meas:8.0f}")
        for kind in ("fields", "note"):
            v = out[kind].get(fig)
            cells.append(f"{v / meas - 1:+7.1%}" if v else "    n/a")
            if v and fig == "tpot_ms":
                errs[kind].append(v / meas - 1)
    print(f"{r.id[:96]:<96} {r.concurrency:8d} {note:6d} {c_id[1] if c_id else '-':>5} {' '.join(cells[:3])}  "
          f"{' '.join(cells[3:])}" + "".join(f"  [{k}: {v['error'][:80]}]" for k, v in out.items() if "error" in v))
for kind, e in errs.items():
    if e:
        print(f"TPOT at the {kind}' concurrency: {len(e)} rows priced, median |error| "
              f"{statistics.median(abs(x) for x in e):.1%}, signed median {statistics.median(e):+.1%}")
