#!/usr/bin/env bash
# (Recorded; it ran from a .dev_lead/ copy with the drivers beside it, paths shown as committed.)
# Seventeenth session, call 4: ncu (full set) on the staged-output kernels: one-CTA at
# T = 1056, pair at T = 64; per-partition summaries of the stall samples.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1; unset TRITON_INTERPRET
export PYTHONPATH=/tmp/site:$PWD/packages/ds41-cache/src:$PWD/packages/ds41-indexer/src:$PWD/packages/ds41-attention/src:$PWD/packages/ds41-runner/src
R=$OUT
for cfg in "onecta 1056 _gluon_sparse_attn_kernel" "pair 64 _gluon_pair_attn_kernel"; do
  set -- $cfg
  timeout 150 ncu --clock-control none --set full --import-source no -k regex:$3 --launch-skip 2 --launch-count 1 \
     -f -o /tmp/ncu_$1 python3 benchmarks/results/lead_s17_ncu.py $1 $2 > /tmp/ncu_$1.txt 2>&1; echo "ncu $1 rc=$?"
  ncu --import /tmp/ncu_$1.ncu-rep --page details --print-details all > $R/ncu_s17s_$1_$2_details.txt 2>&1
  ncu --import /tmp/ncu_$1.ncu-rep --page source --print-source sass --csv > /tmp/ncu_$1_sass.csv 2>&1
  python3 packages/ds41-attention/scripts/ncu_partitions.py /tmp/ncu_$1_sass.csv > $R/ncu_s17s_$1_$2_partitions.txt 2>&1
  gzip -c /tmp/ncu_$1_sass.csv > $R/ncu_s17s_$1_$2_sass.csv.gz
  grep -E "^    (Duration|Elapsed Cycles|SM Active Cycles|Issued Warp Per Scheduler)" $R/ncu_s17s_$1_$2_details.txt | head -4
  cat $R/ncu_s17s_$1_$2_partitions.txt
done
