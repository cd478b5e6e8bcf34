#!/bin/bash
# Issue 12, ninth session, round 2 (helper idx9b, prepared offline; not yet run): one H200 call
# for the lab kernel gluon10_kernels.py (PFAC: the block scale factors computed by the
# producer; LIM: int32 tile-relative column masks). From a copy of the tree's root, with
# PYTHONPATH holding the four packages' src AND packages/ds41-indexer/scripts/issue12:
# 1. the indexer's GPU tests with the lab kernel (GLUON10_KNOBS, default PFAC + LIM) in place
#    of the package's Gluon kernel (gluon10_pfac_plugin.py): bitwise the Triton kernel at
#    every program shape, scale and query range edges, bad pages, rows alone, graph replay;
#    pfac_launches.txt counts the lab launches of each process (nonzero: the lab kernel ran);
# 2. gluon10_lab.py: done flags (PFAC, LIM, both) == the package kernel's on range edges and
#    bad pages, then the package's dispatched logits against the same with the lab kernel
#    (PFAC + LIM, PFAC, LIM, off; single launches of nearby shapes) at 256 x 1M, 64 x 128K,
#    64 x 32K, 256 x 128K, 1 x 128K, every timed result bitwise the Triton kernel's (exit
#    status 1 if any check failed);
# 3. the one-row sizes again with the launch hidden (bench.LAUNCH_HIDDEN).
# About 60 s cold start + ~110 s tests + ~180 s lab + ~25 s (timeouts: 470 s).
set -o pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
S=packages/ds41-indexer/scripts/issue12
(nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,driver_version --format=csv; uname -r) > $OUT/gpu.txt 2>&1
t0=$(date +%s)
GLUON10_COUNT=$OUT/pfac_launches.txt timeout ${TEST_S:-170} python3 -m pytest -q -m gpu -n 4 \
  -p gluon10_pfac_plugin packages/ds41-indexer/tests -p no:cacheprovider \
  > $OUT/gpu_tests_pfac.log 2>&1
echo "gpu tests (lab PFAC kernel) rc=$? $(( $(date +%s) - t0 )) s"
tail -2 $OUT/gpu_tests_pfac.log | cut -c1-300; cat $OUT/pfac_launches.txt 2>/dev/null
t1=$(date +%s)
timeout ${LAB_S:-260} python3 $S/gluon10_lab.py --json $OUT/lab.json --iters ${ITERS:-7} \
  > $OUT/lab.log 2>&1
echo "lab rc=$? $(( $(date +%s) - t1 )) s"
t2=$(date +%s)
timeout ${HID_S:-40} python3 $S/gluon10_lab.py --json $OUT/lab_hidden.json --iters 11 --no-flags \
  --launch-hidden --sizes 1:131072,1:1048576 > $OUT/lab_hidden.log 2>&1
echo "lab (launch hidden, one row) rc=$? $(( $(date +%s) - t2 )) s"
grep -E "flags|same=|failed" $OUT/lab.log | cut -c1-170
echo "== launch hidden"; grep -E "same=|failed" $OUT/lab_hidden.log | cut -c1-170
