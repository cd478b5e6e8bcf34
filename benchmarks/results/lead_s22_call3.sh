#!/usr/bin/env bash
# Twenty-second session, call 3 (issue 12): the paced lab kernel (scripts/issue12/pace_lab.py),
# one word an SM read deferred ("d") or waited for ("b"), against the production kernel: bits,
# CUDA-graph medians at several (kind, mask, slack, ns), stamps by start order on each SM.
# Carry [".whl"].
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1; unset TRITON_INTERPRET
S=$PWD/packages
export PYTHONPATH=/tmp/site:$S/ds41-cache/src:$S/ds41-indexer/src:$S/ds41-attention/src:$S/ds41-runner/src
L=packages/ds41-indexer/scripts/issue12
timeout 420 python3 $L/pace_lab.py --run --stamps --json $OUT/pace_s22c3.json 2>&1 \
  | tee $OUT/pace_s22c3.log | grep -v '^{"rows'
