#!/usr/bin/env bash
# Measure here, project there, on two GPUs measured with the same code: each profile's
# end-to-end and torch-stack points predicted from the other GPU's benches through the transfer
# rules, and from its own. Run from the repository root: bash evidence/h100-profile/cross.sh
set -euo pipefail
d=evidence/h100-profile
sha=$(git rev-parse --short HEAD)
h100=$d/h100-sxm.json
h200=perfmodel/data/h200-sxm.json
python -m perfmodel validate --profile $h100 --no-published --tolerance 100 > $d/validate_h100_own_$sha.txt 2>&1
python -m perfmodel validate --profile $h100 --base $h200 --no-published --tolerance 100 > $d/validate_h100_from_h200_$sha.txt 2>&1
python -m perfmodel validate --profile $h200 --base $h100 --no-published --tolerance 100 > $d/validate_h200_from_h100_$sha.txt 2>&1
for f in $d/validate_*_$sha.txt; do echo "== $f"; grep -E '^(e2e|foreign)' $f; done
