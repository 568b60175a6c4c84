#!/usr/bin/env bash
# perfmodel validate --silicon on aiconfigurator-core's silicon_sample.csv, raw output kept.
#   bash evidence/silicon-validation/run.sh NAME [validate options...]
# writes NAME.json (the command's JSON output: every row's measured and predicted figures),
# NAME.txt (the same result as the command's table) and NAME.meta.txt (command, versions, commit).
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
out=evidence/silicon-validation/$1
shift
cmd=(perfmodel validate --silicon "$@" --format json)
{
  echo "command: ${cmd[*]}"
  echo "perfmodel git commit: $(git rev-parse HEAD)$(git diff --quiet HEAD -- perfmodel || echo ' (perfmodel/ modified)')"
  python -c "
from importlib import metadata as m
for p in ('aiconfigurator-core', 'aiconfigurator'):
    try:
        print(p, m.version(p))
    except m.PackageNotFoundError:
        print(p, 'not installed')"
  echo "started: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
} > "$out.meta.txt"
/usr/bin/time -f "wall %e s, cpu %U s user %S s sys, max rss %M kB" "${cmd[@]}" > "$out.json" 2>> "$out.meta.txt"
echo "finished: $(date -u +%Y-%m-%dT%H:%M:%SZ)" >> "$out.meta.txt"
python -c "import json, sys; from perfmodel import render; render.silicon_table(json.load(open(sys.argv[1])))" "$out.json" > "$out.txt"
