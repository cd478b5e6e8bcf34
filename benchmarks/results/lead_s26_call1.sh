#!/usr/bin/env bash
# Twenty-sixth session, call 1 (issue 12): which scheduler a warp-specialized program's warps
# run on (the probe), then the logits kernel with a 4-warp producer (scripts/issue12/
# producer4_lab.py) against the production kernel: bits and CUDA-graph medians at the bench's
# sizes, and Nsight Compute's per-scheduler instruction counts of both at 64 x 32K.
# Carry [".whl"].
set -u
source scripts/device_env.sh
L=packages/ds41-indexer/scripts/issue12
timeout 420 python3 $L/producer4_lab.py --sched --run --json $OUT/producer4_s26c1.json 2>&1 \
  | tee $OUT/producer4_s26c1.log | grep -v '^{"rows'
M=smsp__inst_executed.sum,smsp__inst_executed.max,smsp__inst_executed.min,smsp__inst_executed.avg
M=$M,smsp__issue_active.avg.pct_of_peak_sustained_active,smsp__issue_active.max.pct_of_peak_sustained_active
M=$M,smsp__issue_active.min.pct_of_peak_sustained_active,gpu__time_duration.sum
timeout 120 ncu --metrics $M -k regex:_gluon_logits_kernel --launch-skip 1 --launch-count 3 \
  python3 $L/producer4_lab.py --launch-both 64x32768 > $OUT/producer4_s26c1_ncu.txt 2>&1
echo "ncu rc=$?"
grep -E "_gluon_logits_kernel|smsp__|gpu__time" $OUT/producer4_s26c1_ncu.txt | head -40
