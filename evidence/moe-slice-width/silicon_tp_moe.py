"""The silicon rows' TPOT errors for MoE models by the width of the expert slices each GPU runs.

    python evidence/moe-slice-width/silicon_tp_moe.py evidence/silicon-validation/all_rows.json

Rows of models with routed experts, grouped by engine, the routed experts' weight format, and the
slice width (expert intermediate / moe_tp of the layout each row was priced in: `tp` splits every
expert over the GPUs, `tp+ep` and `dp-attn+ep` keep experts whole, a mixed layout by its moe_tp).
Signed: the median of predicted / measured - 1 (+: predicted too slow)."""

import json
import re
import sys
from collections import defaultdict

from perfmodel.scenario import layout_split, parse_parallel
from perfmodel.silicon_validate import error_stats
from perfmodel.specs import registry

res = json.load(open(sys.argv[1]))
groups: dict[tuple, list[float]] = defaultdict(list)
for p in res["points"]:
    pred = p["predicted"].get("local")
    if not pred:
        continue
    m = re.match(r"(\S+) on (\d+)x \S+ ([^,]+), (\w+),.*routed_experts=(\w+)", p["scenario"])
    if not m:
        continue
    model, n, lay, engine, wd = m[1], int(m[2]), m[3], m[4], m[5]
    spec = registry.load_model(model)
    if spec.moe is None:
        continue
    width = spec.moe.expert_intermediate_size // layout_split(parse_parallel(lay), n).moe_tp
    groups[(engine, wd, width)].append(pred["tpot_ms"] / p["measured"]["tpot_ms"] - 1)
print(f"{'engine':>7} {'experts':>9} {'slice width':>11} {'rows':>5} {'TPOT med |err|':>15} {'signed':>8}")
for (engine, wd, width), errs in sorted(groups.items()):
    s = error_stats(errs)
    print(f"{engine:>7} {wd:>9} {width:>11} {s['n']:>5} {s['median_abs']:>15.1%} {s['signed_median']:>+8.1%}")
