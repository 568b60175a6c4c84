#!/usr/bin/env bash
# perfmodel validate --published-serving on the shipped published serving points, raw output kept.
#   bash evidence/published-serving/run.sh NAME [validate options...]
# writes NAME.json (the command's JSON output: every point's published and predicted figures, the
# points not expressed with their reason), NAME.txt (the same result as the command's table) and
# NAME.meta.txt (command, commit, time). Uncalibrated, from the embedded profile unless --profile.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
out=evidence/published-serving/$1
shift
cmd=(perfmodel validate --published-serving "$@" --tolerance 100 --format json)
{
  echo "command: ${cmd[*]}"
  echo "perfmodel git commit: $(git rev-parse HEAD)$(git diff --quiet HEAD -- perfmodel || echo ' (perfmodel/ modified)')"
  echo "started: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
} > "$out.meta.txt"
/usr/bin/time -f "wall %e s, cpu %U s user %S s sys, max rss %M kB" "${cmd[@]}" > "$out.json" 2>> "$out.meta.txt"
echo "finished: $(date -u +%Y-%m-%dT%H:%M:%SZ)" >> "$out.meta.txt"
COLUMNS=200 python -c "import json, sys; from perfmodel import render; render.published_serving_table(json.load(open(sys.argv[1])))" "$out.json" > "$out.txt"
