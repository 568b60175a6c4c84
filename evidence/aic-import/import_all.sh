#!/bin/bash
# Every system and engine of the installed aiconfigurator-core (`pip install 'perfmodel[aic]'`):
# `perfmodel profile import-aic` at the package's maintained version, then a projection with the
# profile it wrote. Run from anywhere: bash evidence/aic-import/import_all.sh > log
cd "$(dirname "$0")/../.." || exit 2
work=$(mktemp -d)
perfmodel profile import-aic --list --format csv | tail -n +2 | while IFS=, read -r system gpu engine current versions tables; do
  echo "== perfmodel profile import-aic --system $system --engine $engine@$current --out $system-$engine.json"
  perfmodel profile import-aic --system "$system" --engine "$engine@$current" --out "$work/$system-$engine.json" 2>&1 | sed "s|$work/||"
  echo "exit ${PIPESTATUS[0]}"
  if [ -n "$gpu" ]; then
    echo "== perfmodel project --profile $system-$engine.json --target $gpu --gpus 2 --model qwen3-30b-a3b --concurrency 1,32 -f csv"
    perfmodel project --profile "$work/$system-$engine.json" --target "$gpu" --gpus 2 --model qwen3-30b-a3b --concurrency 1,32 -f csv 2>&1 \
      | cut -d, -f1-6 | sed "s|$work/||"
    echo "exit ${PIPESTATUS[0]}"
  fi
done
rm -rf "$work"
