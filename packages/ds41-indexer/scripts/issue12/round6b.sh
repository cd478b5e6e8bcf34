#!/bin/bash
# Issue 12, sixth round, call 2: the Gluon kernel's bitwise tests, then gluon6_lab.py (kernel
# variants). From the device copy's root with PYTHONPATH holding the four packages' src.
set -o pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
t0=$(date +%s)
timeout ${TEST_S:-60} python3 -m pytest -q -m gpu -n 4 packages/ds41-indexer/tests/test_gluon_logits.py \
  -p no:cacheprovider > $OUT/gluon_tests.log 2>&1
echo "gluon tests rc=$? $(( $(date +%s) - t0 )) s"; tail -4 $OUT/gluon_tests.log | cut -c1-300
t1=$(date +%s)
timeout ${LAB_S:-80} python3 packages/ds41-indexer/scripts/issue12/gluon6_lab.py --json $OUT/gluon6_lab.json \
  > $OUT/gluon6_lab.log 2>&1
echo "gluon6_lab rc=$? $(( $(date +%s) - t1 )) s"; cut -c1-200 $OUT/gluon6_lab.log | tail -30
