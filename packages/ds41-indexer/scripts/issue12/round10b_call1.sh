#!/bin/bash
# Issue 12, tenth session, second round (helper idx10b): one H200 call for the persistent-grid
# lab kernel (gluon12_kernels.py, PERSIST, DYN). From a copy of the tree's root with the four
# packages' src on PYTHONPATH (about 60 s cold start + <= 140 s tests + <= 90 s lab; the tests
# compile every kernel variant they use, so they run on 8 xdist workers (the H200 host has 16
# cores; idx10's call took 124 s at -n 4)):
# 1. the indexer's GPU tests (-n 8) with the lab kernel in place of the package's
#    (-p gluon12_plugin): one-consumer launches run the persistent kernel with items of the
#    TILES the launcher or the test asks for, on 7 / 3 / 61 programs at T16 / T32 / T64 and one
#    wave at T128 (GLUON12_SLOTS), so programs run many items and cross rows, claiming them
#    (DYN) at T16 and T64 and taking static shares at T32 and T128 (GLUON12_DYN); the launch
#    counts per process land in $OUT/persist_launches.txt;
# 2. gluon12_lab.py: the package's dispatched logits against the same with the lab kernel (one
#    wave of programs: static items of 32 tiles, claimed items of 32 and of 64 tiles), every
#    result bitwise the Triton kernel's, then the fused call and its logits stage with each
#    kernel, same top-k as the package's (exit 1 on any mismatch).
set -o pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
S=packages/ds41-indexer/scripts/issue12
export PYTHONPATH=$PYTHONPATH:$PWD/$S
t0=$(date +%s)
GLUON12_COUNT=$OUT/persist_launches.txt timeout ${TEST_S:-140} python3 -m pytest -q -m gpu -n ${TEST_N:-8} \
  -p gluon12_plugin -p no:cacheprovider packages/ds41-indexer/tests > $OUT/gpu_tests_persist.log 2>&1
echo "gpu tests (lab kernel) rc=$? $(( $(date +%s) - t0 )) s"
tail -2 $OUT/gpu_tests_persist.log | cut -c1-300
cat $OUT/persist_launches.txt 2>/dev/null | cut -c1-200
t1=$(date +%s)
timeout ${LAB_S:-90} python3 $S/gluon12_lab.py --json $OUT/lab.json --iters ${ITERS:-7} \
  > $OUT/lab.log 2>&1
echo "lab rc=$? $(( $(date +%s) - t1 )) s"
cut -c1-200 $OUT/lab.log
# optional (HIDDEN_S=<seconds>): the same at 64 x 32K, 32 x 32K and 64 x 128K with the launch
# hidden (bench.LAUNCH_HIDDEN: GPU time only), to split the ~12 us a call that is not per-span
# work into the host's launch and the GPU's
if [ "${HIDDEN_S:-0}" -gt 0 ]; then
  t2=$(date +%s)
  timeout ${HIDDEN_S} python3 $S/gluon12_lab.py --launch-hidden --json $OUT/lab_hidden.json \
    --plan 64:32768,32:32768,64:131072 --persist s32,d64 > $OUT/lab_hidden.log 2>&1
  echo "lab (launch hidden) rc=$? $(( $(date +%s) - t2 )) s"
  cut -c1-200 $OUT/lab_hidden.log
fi
