#!/usr/bin/env bash
# Twenty-first session, call 3 (issue 12): the per-SM rate with 1, 2, 4 programs an SM and with L2-resident keys;: the stamped timeline of a one-wave logits launch
# (packages/ds41-indexer/scripts/issue12/timeline.py) at 64 x 32K and neighbours, with other
# program shapes of the production kernel timed beside it. Carry [".whl"].
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1; unset TRITON_INTERPRET
S=$PWD/packages
export PYTHONPATH=/tmp/site:$S/ds41-cache/src:$S/ds41-indexer/src:$S/ds41-attention/src:$S/ds41-runner/src
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv
timeout 400 python3 packages/ds41-indexer/scripts/issue12/timeline.py --run \
  --sizes 64x32768,64x32768:hot,16x32768:1x64,32x32768:1x64,16x32768:1x64:hot --configs "" \
  --json $OUT/timeline_s21c3.json 2>&1 | tee $OUT/timeline_s21c3.log | grep -v '^{'
