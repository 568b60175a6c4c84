"""The routed experts of expert-parallel layouts priced from the database's expert-parallel rows
(`aic.EP_DISTRIBUTION`, the busiest GPU under aiconfigurator's skewed routing) against the law fitted
on its tensor-parallel rows alone, on the silicon sample's rows of such layouts (run from the
repository root: python evidence/moe-ep-import/before_after.py [per-group N]).

Every aggregated row perfmodel expresses whose layout spreads the experts over two or more
expert-parallel groups (`Layout.experts_ep`; one group holds every expert, as a TP split does, and
is priced as one), at most N per engine, system and model (default 8, spread over their
loads: `silicon.stratified`), priced the imported way (b), uncalibrated, twice: "law" with the
expert-parallel rows left unread (EP_DISTRIBUTION set to a routing no row has: what the import
did before it read them), "rows" as shipped. Errors: predicted / measured - 1 (+: too slow).
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

from perfmodel import aic, silicon
from perfmodel.model.layers import Layout
from perfmodel.request import resolve_profile
from perfmodel.silicon_validate import _Imports, price

per_group = int(sys.argv[1]) if len(sys.argv) > 1 else 8
db = aic.Database.installed()


def spread_over_groups(e: silicon.Expressed) -> bool:
    """Experts spread over two or more expert-parallel groups (one group holds them all, as TP does)."""
    lay = Layout(e.parallel, e.gpus)
    return lay.experts_ep and lay.moe_split // lay.moe_tp > 1


expressed = [e for e in silicon.express_all(silicon.load_rows(db))[0] if spread_over_groups(e)]
rows = silicon.stratified(expressed, per_group, silicon.group_key)
local = resolve_profile(None)
shipped = aic.EP_DISTRIBUTION


def run(distribution: str) -> dict[str, dict]:
    aic.EP_DISTRIBUTION = distribution
    with tempfile.TemporaryDirectory(prefix="perfmodel-ep-") as d:
        imports = _Imports(db, local, Path(d))
        out = {}
        for e in rows:
            try:
                prof = str(imports.path(e.row))
            except ValueError as x:
                out[e.row.id] = {"error": str(x)}
                continue
            out[e.row.id] = price(e, profile=prof)
    aic.EP_DISTRIBUTION = shipped
    return out


law, ours = run("none"), run(shipped)
sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
print(f"perfmodel at {sha}; aiconfigurator-core {db.version}; {len(expressed)} expressed rows of expert-parallel layouts, "
      f"{len(rows)} kept (at most {per_group} per engine, system and model)")
groups: dict[tuple, list] = defaultdict(list)
for e in rows:
    a, b = law[e.row.id], ours[e.row.id]
    if "error" in a or "error" in b:
        print(f"  skipped {e.row.id}: {a.get('error') or b.get('error')}")
        continue
    groups[(e.row.backend, e.row.system, e.model, e.parallel, e.gpus)].append(
        {f: (a[f] / getattr(e.row, f) - 1, b[f] / getattr(e.row, f) - 1) for f in ("tpot_ms", "ttft_ms")})


def med(xs):
    return statistics.median(xs) if xs else float("nan")


print(f"\n{'engine':7} {'system':9} {'model':16} {'layout':18} {'n':>3}  {'TPOT law':>9} {'rows':>7}  {'TTFT law':>9} {'rows':>7}"
      "   (signed median error)")
every = []
for k in sorted(groups):
    g = groups[k]
    every += g
    print(f"{k[0]:7} {k[1]:9} {k[2]:16} {k[3] + ' x' + str(k[4]):18} {len(g):3}  {med([x['tpot_ms'][0] for x in g]):+9.1%} "
          f"{med([x['tpot_ms'][1] for x in g]):+7.1%}  {med([x['ttft_ms'][0] for x in g]):+9.1%} {med([x['ttft_ms'][1] for x in g]):+7.1%}")
for f in ("tpot_ms", "ttft_ms"):
    print(f"\nall {len(every)} rows, {f}: median |error| law {med([abs(x[f][0]) for x in every]):.1%}, "
          f"rows {med([abs(x[f][1]) for x in every]):.1%}; signed {med([x[f][0] for x in every]):+.1%} -> "
          f"{med([x[f][1] for x in every]):+.1%}")
