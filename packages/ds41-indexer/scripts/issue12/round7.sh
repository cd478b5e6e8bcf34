#!/bin/bash
# Issue 12, seventh round. From the device copy's root with PYTHONPATH holding the four
# packages' src and the folder holding ds41_indexer_old (the package at main 85a81ce).
#   round7.sh lab      (call 1): the indexer's GPU tests, then gluon7_lab.py (kernel variants)
#   round7.sh compare  (call 2): the indexer's GPU tests, compare.py (old vs this package), then
#                      gluon7_lab.py on a few variants and sizes
set -o pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $OUT/gpu.txt 2>&1
t0=$(date +%s)
timeout ${TEST_S:-100} python3 -m pytest -q -m gpu -n 4 packages/ds41-indexer/tests -p no:cacheprovider \
  > $OUT/gpu_tests.log 2>&1
echo "gpu tests rc=$? $(( $(date +%s) - t0 )) s"; tail -3 $OUT/gpu_tests.log | cut -c1-300
t1=$(date +%s)
if [ "$1" = lab ]; then
  timeout ${LAB_S:-120} python3 packages/ds41-indexer/scripts/issue12/gluon7_lab.py --json $OUT/gluon7_lab.json \
    > $OUT/gluon7_lab.log 2>&1
  echo "gluon7_lab rc=$? $(( $(date +%s) - t1 )) s"; cut -c1-100 $OUT/gluon7_lab.log | tail -75
else
  timeout ${BENCH_S:-85} python3 packages/ds41-indexer/scripts/issue12/compare.py --json $OUT/compare.json \
    --iters ${ITERS:-5} --sizes ${SIZES:-1048576:256,32768:64,131072:64,131072:1,4096:1,1048576:1} \
    > $OUT/compare.log 2>&1
  echo "compare rc=$? $(( $(date +%s) - t1 )) s"; tail -8 $OUT/compare.log | cut -c1-200
  t2=$(date +%s)
  timeout ${LAB_S:-30} python3 packages/ds41-indexer/scripts/issue12/gluon7_lab.py --json $OUT/gluon7_lab.json \
    --sizes ${LAB_SIZES:-64:131072,256:1048576,1:131072} --iters 7 \
    --variants "old,N1 T16 R64 S4,N1 T32 R64 S4,N2 T16 R64 C80 S4,no swizzle N1 T16 R64,old factor N1 T16 R64" \
    > $OUT/gluon7_lab.log 2>&1
  echo "gluon7_lab rc=$? $(( $(date +%s) - t2 )) s"; cut -c1-100 $OUT/gluon7_lab.log | tail -24
fi
