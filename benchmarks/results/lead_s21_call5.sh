#!/usr/bin/env bash
# Twenty-first session, call 5 (issue 12): unequal span counts for the programs of a row
# (packages/ds41-indexer/scripts/issue12/rank_split.py) at 64 x 32K, against production and
# the even split of the same lab code. Carry [".whl"].
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1; unset TRITON_INTERPRET
S=$PWD/packages
export PYTHONPATH=/tmp/site:$S/ds41-cache/src:$S/ds41-indexer/src:$S/ds41-attention/src:$S/ds41-runner/src
timeout 400 python3 packages/ds41-indexer/scripts/issue12/rank_split.py \
  --splits 4,4,4,4,4,4,4,4:5,5,5,4,4,3,3,3:6,5,5,4,4,3,3,2:5,5,4,4,4,4,3,3:6,6,5,4,4,3,2,2 \
  --json $OUT/rank_split_s21c5.json 2>&1 | tee $OUT/rank_split_s21c5.log | grep -v '^{'
