#!/usr/bin/env bash
# Two more groups with attention-DP rows (vLLM's Qwen3-235B-FP8 and TRT-LLM's gpt-oss-120b on
# H200), which the step's prompt spreading moves: before (the package at 2882b0b, through
# evidence/server-settings/run.sh) and after (the working tree), raw output kept.
#   bash evidence/silicon-mtp-runs/extra.sh before|after
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
tag=$1
run() {
  if [ "$tag" = before ]; then
    bash evidence/server-settings/run.sh "../silicon-mtp-runs/$1_$tag" 2882b0b silicon-validation --way local,imported "${@:2}"
  else
    bash evidence/silicon-validation/run.sh "../silicon-mtp-runs/$1_$tag" --way local,imported "${@:2}"
  fi
}
run vllm_h200_qwen235 --engine vllm --system h200_sxm --model qwen3-235b-a22b
run trtllm_h200_gptoss --engine trtllm --system h200_sxm --model gpt-oss-120b
