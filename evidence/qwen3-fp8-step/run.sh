#!/usr/bin/env bash
# The quick loop of `validate --silicon` on Qwen3-235B-A22B-FP8's rows and on groups outside them,
# both ways, with aiconfigurator's saved 4-per-group estimator results beside; raw output kept.
#   bash evidence/qwen3-fp8-step/run.sh LABEL
# writes LABEL_<engine>_<system>_<model>.{json,txt,meta.txt} through evidence/silicon-validation/run.sh's
# format (the command's JSON, its table, the command, versions and commit).
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
label=$1
groups=(
  "vllm h200_sxm qwen3-235b-a22b"
  "sglang h200_sxm qwen3-235b-a22b"
  "trtllm h100_sxm qwen3-235b-a22b"
  "sglang h200_sxm deepseek-v3"
  "vllm b300_sxm kimi-k2.6"
)
for g in "${groups[@]}"; do
  read -r engine system model <<< "$g"
  out=evidence/qwen3-fp8-step/${label}_${engine}_${system}_${model}
  cmd=(perfmodel validate --silicon --way local,imported --engine "$engine" --system "$system" --model "$model"
       --aic-results evidence/silicon-validation/aic_estimator_4_per_group.jsonl --format json)
  {
    echo "command: ${cmd[*]}"
    echo "perfmodel git commit: $(git rev-parse HEAD)$(git diff --quiet HEAD -- perfmodel || echo ' (perfmodel/ modified)')"
    python -c "from importlib import metadata as m; print('aiconfigurator-core', m.version('aiconfigurator-core'))"
  } > "$out.meta.txt"
  "${cmd[@]}" > "$out.json" 2>> "$out.meta.txt"
  python -c "import json, sys; from perfmodel import render; render.silicon_table(json.load(open(sys.argv[1])))" "$out.json" > "$out.txt"
done
