#!/bin/bash
# Issue 12, tenth session, second round (helper idx10b): one H200 call for the persistent-grid
# lab kernel (gluon12_kernels.py, PERSIST). From a copy of the tree's root with the four
# packages' src on PYTHONPATH:
# 1. the indexer's GPU tests (-n 4) with the lab kernel in place of the package's
#    (-p gluon12_plugin; GLUON12_SLOTS default: 7 / 3 / 61 programs at the T16 / T32 / T64
#    shapes the tests ask for, one wave at T128, so programs run many spans and cross rows);
#    the launch counts per process land in $OUT/persist_launches.txt;
# 2. gluon12_lab.py: the package's dispatched logits against the same with the lab kernel (one
#    wave of programs), every result bitwise the Triton kernel's, then the fused call and its
#    logits stage with each kernel (exit 1 on any mismatch).
set -o pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
S=packages/ds41-indexer/scripts/issue12
export PYTHONPATH=$PYTHONPATH:$PWD/$S
t0=$(date +%s)
GLUON12_COUNT=$OUT/persist_launches.txt timeout ${TEST_S:-130} python3 -m pytest -q -m gpu -n 4 \
  -p gluon12_plugin -p no:cacheprovider packages/ds41-indexer/tests > $OUT/gpu_tests_persist.log 2>&1
echo "gpu tests (lab kernel) rc=$? $(( $(date +%s) - t0 )) s"
head -5 $OUT/gpu_tests_persist.log | grep gluon12 | cut -c1-200
tail -2 $OUT/gpu_tests_persist.log | cut -c1-300
cat $OUT/persist_launches.txt 2>/dev/null | cut -c1-200
t1=$(date +%s)
timeout ${LAB_S:-80} python3 $S/gluon12_lab.py --json $OUT/lab.json --iters ${ITERS:-7} \
  > $OUT/lab.log 2>&1
echo "lab rc=$? $(( $(date +%s) - t1 )) s"
cut -c1-200 $OUT/lab.log
