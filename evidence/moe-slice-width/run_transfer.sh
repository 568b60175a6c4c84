#!/usr/bin/env bash
# perfmodel validate --transfer (every system, engine and op of aiconfigurator-core's per-op database)
# at the current commit, as JSON, with the table rendered from it:
#   bash evidence/moe-slice-width/run_transfer.sh   -> validate_transfer_<commit>.{json,txt,meta.txt}
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
out=evidence/moe-slice-width/validate_transfer_$(git rev-parse --short HEAD)
{
  echo "command: perfmodel validate --transfer --format json"
  echo "perfmodel git commit: $(git rev-parse HEAD)$(git diff --quiet HEAD -- perfmodel || echo ' (perfmodel/ modified)')"
  echo "started: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
} > "$out.meta.txt"
/usr/bin/time -f "wall %e s, cpu %U s user %S s sys" perfmodel validate --transfer --format json > "$out.json" 2>> "$out.meta.txt" || echo "exit $?" >> "$out.meta.txt"
echo "finished: $(date -u +%Y-%m-%dT%H:%M:%SZ)" >> "$out.meta.txt"
COLUMNS=250 python -c "import json, sys; from perfmodel import render; render.transfer_table(json.load(open(sys.argv[1])))" "$out.json" > "$out.txt"
