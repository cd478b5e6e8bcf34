#!/bin/bash
# Issue 12, eighth session, final call. From a copy of the tree's root, with PYTHONPATH holding
# the four packages' src and the folder holding `ds41_indexer_old` (main e129ff3's package):
# the indexer's GPU tests, compare.py (old and new package in one process, the bench's timing:
# launch included), compare.py --launch-hidden at the small sizes, launch8.py (three timings).
set -o pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
S=packages/ds41-indexer/scripts/issue12
(nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,driver_version --format=csv; uname -r) > $OUT/gpu.txt 2>&1
t0=$(date +%s)
timeout ${TEST_S:-130} python3 -m pytest -q -m gpu -n 4 packages/ds41-indexer/tests -p no:cacheprovider \
  > $OUT/gpu_tests.log 2>&1
echo "gpu tests rc=$? $(( $(date +%s) - t0 )) s"; tail -3 $OUT/gpu_tests.log | cut -c1-300
t1=$(date +%s)
timeout ${BENCH_S:-70} python3 $S/compare.py --floor --json $OUT/compare.json --iters ${ITERS:-7} \
  --sizes ${SIZES:-1048576:256,1048576:64,131072:64,32768:64,131072:1,4096:1,1048576:1} \
  > $OUT/compare.log 2>&1
echo "compare rc=$? $(( $(date +%s) - t1 )) s"
t2=$(date +%s)
timeout ${HIDDEN_S:-30} python3 $S/compare.py --floor --launch-hidden --json $OUT/compare_hidden.json \
  --iters 11 --sizes 4096:1,131072:1,1048576:1,32768:64 > $OUT/compare_hidden.log 2>&1
echo "compare --launch-hidden rc=$? $(( $(date +%s) - t2 )) s"
t3=$(date +%s)
timeout ${LAB_S:-25} python3 $S/launch8.py --label idx8 --json $OUT/launch8.json > $OUT/launch8.log 2>&1
echo "launch8 rc=$? $(( $(date +%s) - t3 )) s"
echo "== launch included"; grep -E "floor|^ *[0-9]+ +[0-9]+ \|" $OUT/compare.log | cut -c1-160
echo "== launch hidden"; grep -E "floor|^ *[0-9]+ +[0-9]+ \|" $OUT/compare_hidden.log | cut -c1-160
grep "^\[" $OUT/launch8.log
