# The foreign bench again on a fresh GPU from a profile without it: the embedded H200 profile on an
# H200, evidence/h100-profile/h100-sxm.json on an H100; then validate and diag_mixed.py. Run from the
# repository root on the GPU machine, with pydantic wheels in .whl/ and $OUT an empty folder.
set -x
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "$GPU"
python3 -m pip install -q --no-index --no-deps --target /tmp/s1 .whl/*.whl
python3 -m pip install -q --no-deps --no-build-isolation --no-index --target /tmp/s2 . 2>&1 | tail -2
export PYTHONPATH=/tmp/s1:/tmp/s2
REPO=$PWD
nvidia-smi > $OUT/nvidia-smi.txt 2>&1
(lscpu | head -20; nproc; uptime) >> $OUT/nvidia-smi.txt 2>&1
if echo "$GPU" | grep -q H200; then SRC=/tmp/s2/perfmodel/data/h200-sxm.json; NAME=h200; else SRC=$REPO/evidence/h100-profile/h100-sxm.json; NAME=h100; fi
cd /tmp
python3 - "$SRC" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
for k in ('foreign', 'foreign_prefill'):
    p['benches'].pop(k, None)
json.dump(p, open('/tmp/a.json', 'w'))
PY
( time python3 -m perfmodel.cli measure --out /tmp/a.json --resume --force --only foreign --no-progress ) > $OUT/run_${NAME}.log 2>&1
python3 -m perfmodel.cli validate --profile /tmp/a.json --no-published --tolerance 100 > $OUT/validate_${NAME}.txt 2>&1
python3 $REPO/evidence/foreign-prefill-outliers/diag_mixed.py > $OUT/diag_mixed_${NAME}.log 2>&1
cp /tmp/a.json $OUT/${NAME}_foreign.json
cp /tmp/a.log $OUT/${NAME}_foreign.log 2>/dev/null
ls -la $OUT
