#!/usr/bin/env bash
# Twenty-third session, call 2 (issue 11): Nsight Compute (full set) on the one-CTA kernel at
# T = 1056 (8 waves), main (80dbdd3, .dev_ab/ds41_attention_main) and the branch's consumer-1
# decode, with the per-partition stall summaries. Carry [".whl", ".dev_ab"]. Its outputs are
# committed as attention_s23_ncu_{main,c1dec}_1056_*; the c1dec partitions file was redone off
# the GPU with ncu_partitions.py after its fix (the producer at 112 registers opens with a
# DEALLOC, which the script did not treat as a partition start).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1; unset TRITON_INTERPRET
S=$PWD/packages
export PYTHONPATH=/tmp/site:$PWD/.dev_ab:$S/ds41-cache/src:$S/ds41-indexer/src:$S/ds41-attention/src:$S/ds41-runner/src
R=$OUT
for m in ds41_attention_main ds41_attention; do
  timeout -s KILL 200 ncu --clock-control none --set full --import-source no -k regex:_gluon_sparse_attn_kernel \
     --launch-skip 2 --launch-count 1 -f -o /tmp/ncu_$m python3 benchmarks/results/lead_s23_ncu.py $m 1056 > /tmp/ncu_$m.txt 2>&1
  echo "ncu $m rc=$?"; tail -2 /tmp/ncu_$m.txt
  ncu --import /tmp/ncu_$m.ncu-rep --page details --print-details all > $R/attention_s23_ncu_${m}_details.txt 2>&1
  ncu --import /tmp/ncu_$m.ncu-rep --page source --print-source sass --csv > /tmp/ncu_${m}_sass.csv 2>&1
  python3 packages/ds41-attention/scripts/ncu_partitions.py /tmp/ncu_${m}_sass.csv > $R/attention_s23_ncu_${m}_partitions.txt 2>&1
  gzip -c /tmp/ncu_${m}_sass.csv > $R/attention_s23_ncu_${m}_sass.csv.gz
  grep -E "^    (Duration|Elapsed Cycles|SM Active Cycles|Issued Warp Per Scheduler|Shared Memory|L1/TEX Hit|Tensor)" $R/attention_s23_ncu_${m}_details.txt | head -8
  cat $R/attention_s23_ncu_${m}_partitions.txt
done
