#!/usr/bin/env bash
# Twenty-first session, call 6 (issue 12): the lab kernel of four producer/consumer pairs an SM
# taking spans as they come (packages/ds41-indexer/scripts/issue12/pairs_lab.py): bits against
# the production kernel on the Gluon tests' scenarios and the bench's caches, then times of
# both. Carry [".whl"].
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1; unset TRITON_INTERPRET
S=$PWD/packages
export PYTHONPATH=/tmp/site:$S/ds41-cache/src:$S/ds41-indexer/src:$S/ds41-attention/src:$S/ds41-runner/src
# a short first run (a hang in the new protocol costs 100 s, not the whole call)
timeout 100 python3 packages/ds41-indexer/scripts/issue12/pairs_lab.py --sizes 64x32768 \
  --iters 5 > $OUT/pairs_s21c6_first.log 2>&1; rc=$?
tail -5 $OUT/pairs_s21c6_first.log; echo "first rc=$rc"
[ $rc -eq 0 ] || exit 1
timeout 300 python3 packages/ds41-indexer/scripts/issue12/pairs_lab.py \
  --json $OUT/pairs_s21c6.json 2>&1 | tee $OUT/pairs_s21c6.log | grep -v '^{"rows'
