#!/usr/bin/env bash
# Twenty-first session, call 10 (issue 12): the pairs lab kernel with its producers as the oldest warps (call 9: per-span stamps;
# 64 x 32K after passing the scenario checks): one launch per size, 30 s each. Carry [".whl"].
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1; unset TRITON_INTERPRET
S=$PWD/packages
export PYTHONPATH=/tmp/site:$S/ds41-cache/src:$S/ds41-indexer/src:$S/ds41-attention/src:$S/ds41-runner/src
for s in 64x32768:t 64x32768:s; do
  timeout 30 python3 packages/ds41-indexer/scripts/issue12/pairs_lab.py --once $s > /tmp/o 2>&1
  rc=$?; tail -2 /tmp/o | cut -c1-300; echo "$s rc=$rc"
done
