#!/usr/bin/env bash
# Prepared in the seventeenth session; ran in the eighteenth (call 2, results in indexer_s18_ncu_64x32k*.txt): Nsight Compute on the indexer's Gluon logits
# kernel at 64 x 32K (issue 12's one open target), summarized per partition like the
# attention kernels' profile that found the seventeenth session's store bottleneck. Run with
# carry [".whl"], timeout ~200. The logits kernel at that size runs one consumer warpgroup
# and a one-warp producer: `--warps 1,4` if the producer's code comes first in the SASS (as
# the attention kernels' workers do); the rows printed below show the partition order.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1; unset TRITON_INTERPRET
export PYTHONPATH=/tmp/site:$PWD/packages/ds41-cache/src:$PWD/packages/ds41-indexer/src:$PWD/packages/ds41-attention/src:$PWD/packages/ds41-runner/src
R=$OUT
timeout 150 ncu --clock-control none --set full --import-source no -k regex:_gluon_logits_kernel \
  --launch-skip 2 --launch-count 1 -f -o /tmp/ncu_idx python3 benchmarks/results/lead_s18_indexer_ncu.py \
  > $R/ncu_idx_run.txt 2>&1; echo "ncu rc=$?"; grep -v "^==PROF==" $R/ncu_idx_run.txt | tail -3
ncu --import /tmp/ncu_idx.ncu-rep --page details --print-details all > $R/ncu_idx_64x32k_details.txt 2>&1
ncu --import /tmp/ncu_idx.ncu-rep --page source --print-source sass --csv > /tmp/ncu_idx_sass.csv 2>&1
gzip -c /tmp/ncu_idx_sass.csv > $R/ncu_idx_64x32k_sass.csv.gz
grep -n "USETMAXREG\|EXIT" /tmp/ncu_idx_sass.csv | cut -c1-120 | head -12
python3 packages/ds41-attention/scripts/ncu_partitions.py /tmp/ncu_idx_sass.csv --warps 1,4 > $R/ncu_idx_64x32k_partitions.txt 2>&1
cat $R/ncu_idx_64x32k_partitions.txt
grep -E "^    (Duration|Elapsed Cycles|SM Active Cycles|Issued Warp Per Scheduler|DRAM Throughput|L2 Hit Rate)" $R/ncu_idx_64x32k_details.txt | head -8
