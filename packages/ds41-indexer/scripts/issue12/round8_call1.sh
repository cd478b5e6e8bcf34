#!/bin/bash
# Eighth session, call 1 (staging: a copy of the tree with 8a886fc's packages/ds41-cache and
# packages/ds41-indexer exported beside it as ../old; run from the copy's root).
# eighth session, call 1: the 4K one-row top-k, main (e129ff3) vs 8a886fc, launch floor
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
S=packages/ds41-indexer/scripts/issue12/launch8.py
NEWPP=$PYTHONPATH
OLDPP=/tmp/site:$PWD/../old/packages/ds41-cache/src:$PWD/../old/packages/ds41-indexer/src
(uname -a; nvidia-smi; nproc; grep -m1 "model name" /proc/cpuinfo) > $OUT/env.txt 2>&1
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv -lms 250 > $OUT/clocks.csv 2>&1 &
CLK=$!
t0=$(date +%s)
timeout 100 python3 $S --label main --variants --json $OUT/main.json 2>&1 | tee $OUT/launch8.log
echo "main $(( $(date +%s) - t0 )) s"
PYTHONPATH=$OLDPP timeout 60 python3 $S --label 8a886fc --json $OUT/old.json 2>&1 | tee -a $OUT/launch8.log
echo "old $(( $(date +%s) - t0 )) s"
timeout 40 python3 $S --label main2 --json $OUT/main2.json 2>&1 | tee -a $OUT/launch8.log
echo "main2 $(( $(date +%s) - t0 )) s"
for pp in NEWPP OLDPP; do
  PYTHONPATH=${!pp} timeout 40 python3 -m ds41_indexer.bench --contexts 4096,131072 --rows 1 --iters 31 2>&1 | tee -a $OUT/bench_$pp.log
done
echo "all $(( $(date +%s) - t0 )) s"
kill $CLK
cat $OUT/env.txt | head -30
grep "^\[" $OUT/launch8.log
