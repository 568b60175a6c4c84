#!/bin/sh
# The engine's host cost per step and per draft forward, fitted by `perfmodel calibrate` on the
# published EAGLE-3 figures (run from the repository root: sh evidence/engine-host-eagle3/run.sh).
set -e
D=evidence/engine-host-eagle3
{
  echo "perfmodel at $(git rev-parse --short HEAD)"
  echo "== vllm-project/vllm#20780: Llama-3.1-8B + EAGLE-3 on H100, chains of 2-7, acceptance length given =="
  COLUMNS=160 perfmodel calibrate $D/vllm-eagle3.yaml --out $D/vllm-eagle3.calib.json
  echo
  echo "== sgl-project/sglang#4716: Llama-3.3-70B on 8x H100, without speculation and EAGLE-3 at acceptance length 5.88 =="
  COLUMNS=160 perfmodel calibrate $D/sglang-eagle3.yaml --out $D/sglang-eagle3.calib.json
  echo
  echo "== the SGLang EAGLE-3 point with vLLM's host costs (another engine: a transfer, not a fit) =="
  COLUMNS=160 perfmodel project --target h100-sxm --gpus 8 --model llama-3.1-70b --spec chain --drafter eagle3 \
    --draft-tokens 8 --acceptance-length 5.88 --concurrency 1 --context 1200 --calibration $D/vllm-eagle3.calib.json \
    --format csv
} > $D/run.txt 2>&1
