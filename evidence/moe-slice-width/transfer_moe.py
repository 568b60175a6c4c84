"""`validate --transfer`'s MoE rows before and after the per-slice cost: per system, engine and expert
format, the local profile's median |error| and median signed error (+: priced too slow), and the
memory-bound part's.

    python evidence/moe-slice-width/transfer_moe.py evidence/transfer-rules/validate_transfer_37392bb.json \\
        evidence/moe-slice-width/validate_transfer_463b8c6.json"""

import json
import statistics
import sys

before, after = (json.load(open(p)) for p in sys.argv[1:3])
key = lambda r: (r["system"], r["engine"], r["dtype"])  # noqa: E731
prev = {key(r): r for r in before["rows"] if r["op"] == "moe"}
print(f"MoE rows priced from the local profile: before {sys.argv[1].rsplit('/', 1)[-1]}, after {sys.argv[2].rsplit('/', 1)[-1]}")
print(f"{'system':>12} {'engine':>17} {'dtype':>12} {'rows':>5} {'med |err|':>10} {'after':>7} {'signed':>8} {'after':>7}"
      f" {'memory signed':>14} {'after':>7}")
pct = lambda x: "—" if x is None else f"{x:+.0%}"  # noqa: E731
moved = {"before": [], "after": []}
for r in after["rows"]:
    if r["op"] != "moe" or key(r) not in prev:
        continue
    b, a = prev[key(r)]["local"], r["local"]
    print(f"{r['system']:>12} {r['engine'] + ' ' + r['version']:>17} {r['dtype']:>12} {r['n']:>5} {b['median_abs_err']:>10.0%}"
          f" {a['median_abs_err']:>7.0%} {pct(b['bias']):>8} {pct(a['bias']):>7} {pct(b['memory_bias']):>14} {pct(a['memory_bias']):>7}")
    if r["dtype"] not in ("bfloat16", "int4_wo"):
        moved["before"].append(b["median_abs_err"])
        moved["after"].append(a["median_abs_err"])
print(f"\nformats the rule prices (all but bfloat16 and int4_wo), {len(moved['after'])} groups: median of the groups' median"
      f" |error| {statistics.median(moved['before']):.1%} before, {statistics.median(moved['after']):.1%} after")
