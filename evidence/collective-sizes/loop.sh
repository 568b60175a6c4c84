#!/usr/bin/env bash
# The silicon rows of a few groups, imported way, 8 rows a group: before and after the all-reduce
# laws by size. Writes NAME.json (one JSON line a group: the command's output) and NAME.txt
# (each group's TTFT and TPOT median |error| and signed median).
#   bash evidence/collective-sizes/loop.sh NAME
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
out=evidence/collective-sizes/$1
: > "$out.json"
echo "perfmodel git commit: $(git rev-parse HEAD)$(git diff --quiet HEAD -- perfmodel || echo ' (perfmodel/ modified)')" > "$out.txt"
while read -r model engine system; do
  perfmodel validate --silicon --way imported --model "$model" --engine "$engine" --system "$system" \
    --sample 8 --format json | python -c "import json, sys; print(json.dumps(json.load(sys.stdin)))" >> "$out.json"
done <<'GROUPS'
deepseek-v3 sglang h200_sxm
deepseek-v3 trtllm h200_sxm
deepseek-v3 sglang b200_sxm
deepseek-v3 trtllm b200_sxm
llama-3.1-70b trtllm h200_sxm
llama-3.1-70b vllm b200_sxm
gpt-oss-120b trtllm b200_sxm
kimi-k2.6 vllm b200_sxm
minimax-m2.5 vllm h200_sxm
GROUPS
python - "$out.json" >> "$out.txt" <<'PY'
import json, statistics, sys
print(f"{'model':14} {'engine':7} {'system':9} {'rows':>4} | TTFT median |err|, signed | TPOT median |err|, signed")
for line in open(sys.argv[1]):
    d = json.loads(line)
    pts = [p for p in d["points"] if p["predicted"].get("imported")]
    if not pts:
        continue
    p0 = pts[0]
    def err(k):
        return [p["predicted"]["imported"][k] / p["measured"][k] - 1 for p in pts]
    t, o = err("ttft_ms"), err("tpot_ms")
    print(f"{p0['model']:14} {p0['engine']:7} {p0['system']:9} {len(pts):4} | "
          f"{statistics.median(abs(e) for e in t):6.1%} {statistics.median(t):+7.1%} | "
          f"{statistics.median(abs(e) for e in o):6.1%} {statistics.median(o):+7.1%}")
PY
