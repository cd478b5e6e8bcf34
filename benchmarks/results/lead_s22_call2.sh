#!/usr/bin/env bash
# Twenty-second session, call 2 (issue 12): the paced lab kernel (scripts/issue12/pace_lab.py:
# programs of an SM held to equal progress through per-SM counters and nanosleep) against the
# production kernel: bits, CUDA-graph medians at several (mask, slack, ns), stamps by SM rank.
# It ran pace_lab.py's first form (two words an SM, read and waited for at each checkpoint);
# the committed pace_lab.py is call 3's (one packed word; kinds d and b). Carry [".whl"].
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1; unset TRITON_INTERPRET
S=$PWD/packages
export PYTHONPATH=/tmp/site:$S/ds41-cache/src:$S/ds41-indexer/src:$S/ds41-attention/src:$S/ds41-runner/src
L=packages/ds41-indexer/scripts/issue12
timeout 420 python3 $L/pace_lab.py --run --stamps --json $OUT/pace_s22c2.json 2>&1 \
  | tee $OUT/pace_s22c2.log | grep -v '^{"rows'
