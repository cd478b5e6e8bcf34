#!/usr/bin/env bash
# Twenty-second session, call 4 (issue 12): the producer prefetching its next pages into L2
# (scripts/issue12/prefetch_lab.py: every mask + 1 tiles, the pages dist .. dist + mask tiles
# ahead, cp.async.bulk.prefetch.L2) against the production kernel: bits, CUDA-graph medians.
# Carry [".whl"].
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1; unset TRITON_INTERPRET
S=$PWD/packages
export PYTHONPATH=/tmp/site:$S/ds41-cache/src:$S/ds41-indexer/src:$S/ds41-attention/src:$S/ds41-runner/src
L=packages/ds41-indexer/scripts/issue12
timeout 400 python3 $L/prefetch_lab.py --run --json $OUT/prefetch_s22c4.json 2>&1 \
  | tee $OUT/prefetch_s22c4.log | grep -v '^{"rows'
