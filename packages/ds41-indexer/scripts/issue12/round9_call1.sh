#!/bin/bash
# Ninth session, call 1: gluon9_lab.py (variants, bitwise vs the Triton kernel), then an ncu
# stall profile of the dispatched logits at 64 x 128K. Run from the tree's root.
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
S=packages/ds41-indexer/scripts/issue12
t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw --format=csv > $OUT/env.txt 2>&1
timeout 160 python3 $S/gluon9_lab.py --json $OUT/lab.json 2>&1 | tee $OUT/lab.log
echo "lab $(( $(date +%s) - t0 )) s"
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
echo "ncu: $NCU"
timeout 70 $NCU --clock-control none -k regex:_gluon_logits -c 1 --section WarpStateStats \
  --section SourceCounters --section SchedulerStats --section Occupancy --section LaunchStats \
  --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
  -o $OUT/ncu9 python3 $S/gluon9_lab.py --profile > $OUT/ncu_run.log 2>&1
tail -5 $OUT/ncu_run.log
timeout 20 $NCU -i $OUT/ncu9.ncu-rep --page details > $OUT/ncu_details.txt 2>&1
timeout 20 $NCU -i $OUT/ncu9.ncu-rep --page source --csv --print-source sass > $OUT/ncu_sass.csv 2>&1
ls -la $OUT; echo "all $(( $(date +%s) - t0 )) s"
grep -E "Warp Cycles|Issued|Eligible|No Eligible|Stall|Active Warps|Theoretical Occ|Achieved Occ|Registers|Block Limit" $OUT/ncu_details.txt | head -40
grep -E "same=" $OUT/lab.log | awk '{print $1, $2, $3, $4, $5, $6, $7, $8, $9, $10}' | tail -80
