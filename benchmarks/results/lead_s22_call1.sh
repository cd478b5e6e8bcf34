#!/usr/bin/env bash
# Twenty-second session, call 1 (issue 12; prepared in the twenty-first session): the rowclaim lab
# kernel (packages/ds41-indexer/scripts/issue12/pairs_kernels.py `_rowclaim_kernel`: the
# production layout, programs taking their row's spans from a per-row counter) against the
# production kernel: bits on the Gluon tests' scenarios and the bench's caches, then times
# (the counters' zeroing included). A short first run first, so a hang costs 100 s.
# Expected 2-5% at 64 x 32K from a fluid model; measured 4-22% slower at every size (same bits).
# Carry [".whl"].
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1; unset TRITON_INTERPRET
S=$PWD/packages
export PYTHONPATH=/tmp/site:$S/ds41-cache/src:$S/ds41-indexer/src:$S/ds41-attention/src:$S/ds41-runner/src
L=packages/ds41-indexer/scripts/issue12
timeout 100 python3 $L/pairs_lab.py --kernel rowclaim --once 64x32768:t:g > $OUT/rowclaim_once.log 2>&1
rc=$?; tail -3 $OUT/rowclaim_once.log; echo "once rc=$rc"
[ $rc -eq 0 ] || exit 1
timeout 400 python3 $L/pairs_lab.py --kernel rowclaim --json $OUT/rowclaim.json 2>&1 \
  | tee $OUT/rowclaim.log | grep -v '^{"rows'
