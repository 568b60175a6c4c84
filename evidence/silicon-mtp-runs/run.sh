#!/usr/bin/env bash
# The silicon rows of the groups this claim touches, before and after, raw output kept
# (evidence/silicon-validation/run.sh writes NAME.json, NAME.txt, NAME.meta.txt):
#   bash evidence/silicon-mtp-runs/run.sh before|after
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
tag=$1
run() { bash evidence/silicon-validation/run.sh "../silicon-mtp-runs/$1_$tag" --way local,imported "${@:2}"; }
run trtllm_h200_dsr1 --engine trtllm --system h200_sxm --model deepseek-v3
run trtllm_b200_dsr1 --engine trtllm --system b200_sxm --model deepseek-v3
run sglang_h200_dsr1 --engine sglang --system h200_sxm --model deepseek-v3
run trtllm_h100_qwen235 --engine trtllm --system h100_sxm --model qwen3-235b-a22b
