#!/bin/bash
# Issue 12, ninth session, call 3 (as round9_final.sh, at the commit after 68f0f7d): the
# indexer's GPU tests, compare.py at the bench's large sizes and, twice, at one row (launch
# included), then once with the launch hidden.
set -o pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
S=packages/ds41-indexer/scripts/issue12
t0=$(date +%s)
timeout ${TEST_S:-130} python3 -m pytest -q -m gpu -n 4 packages/ds41-indexer/tests -p no:cacheprovider \
  > $OUT/gpu_tests.log 2>&1
echo "gpu tests rc=$? $(( $(date +%s) - t0 )) s"; tail -2 $OUT/gpu_tests.log | cut -c1-300
t1=$(date +%s)
timeout 60 python3 $S/compare.py --floor --json $OUT/compare.json --iters 7 \
  --sizes 1048576:256,32768:64,131072:64,4096:1,131072:1,1048576:1,4096:1,131072:1 > $OUT/compare.log 2>&1
echo "compare rc=$? $(( $(date +%s) - t1 )) s"
t2=$(date +%s)
timeout 25 python3 $S/compare.py --floor --launch-hidden --json $OUT/compare_hidden.json --iters 11 \
  --sizes 4096:1,131072:1,1048576:1 > $OUT/compare_hidden.log 2>&1
echo "compare hidden rc=$? $(( $(date +%s) - t2 )) s"
echo "== launch included"; grep -E "floor|^ *[0-9]+ +[0-9]+ \|" $OUT/compare.log | cut -c1-170
echo "== launch hidden"; grep -E "floor|^ *[0-9]+ +[0-9]+ \|" $OUT/compare_hidden.log | cut -c1-170
