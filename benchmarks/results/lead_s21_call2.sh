#!/usr/bin/env bash
# Twenty-first session, call 2 (issue 12): call 1 again with the raw stamps;: the stamped timeline of a one-wave logits launch
# (packages/ds41-indexer/scripts/issue12/timeline.py) at 64 x 32K and neighbours, with other
# program shapes of the production kernel timed beside it. Carry [".whl"].
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1; unset TRITON_INTERPRET
S=$PWD/packages
export PYTHONPATH=/tmp/site:$S/ds41-cache/src:$S/ds41-indexer/src:$S/ds41-attention/src:$S/ds41-runner/src
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv
timeout 400 python3 packages/ds41-indexer/scripts/issue12/timeline.py --run \
  --sizes 64x32768,64x16384 --configs "" \
  --json $OUT/timeline_s21c2.json 2>&1 | tee $OUT/timeline_s21c2.log | grep -v '^{'
