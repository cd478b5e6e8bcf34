#!/usr/bin/env bash
# Twenty-fifth session, call 4 (issue 11): Nsight Compute (full set) on the one-CTA kernel at
# T = 1056 (8 waves) of the committed tree (the base-2 softmax, 4be87f4), with the
# per-partition stall summary, beside the twenty-fourth session's attention_s24_ncu_vk_1056_*
# (its tree before the change). Carry [".whl"].
set -u
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
R=$OUT; m=ds41_attention; tag=attention_s25_ncu_b2_1056
timeout -s KILL 240 ncu --clock-control none --set full --import-source no -k regex:_gluon_sparse_attn_kernel \
   --launch-skip 2 --launch-count 1 -f -o /tmp/ncu_$m python3 benchmarks/results/lead_s23_ncu.py $m 1056 > /tmp/ncu_$m.txt 2>&1
echo "ncu rc=$?"; tail -2 /tmp/ncu_$m.txt
ncu --import /tmp/ncu_$m.ncu-rep --page details --print-details all > $R/${tag}_details.txt 2>&1
ncu --import /tmp/ncu_$m.ncu-rep --page source --print-source sass --csv > /tmp/ncu_${m}_sass.csv 2>&1
python3 packages/ds41-attention/scripts/ncu_partitions.py /tmp/ncu_${m}_sass.csv > $R/${tag}_partitions.txt 2>&1
gzip -c /tmp/ncu_${m}_sass.csv > $R/${tag}_sass.csv.gz
grep -E "^    (Duration|Elapsed Cycles|SM Active Cycles|Issued Warp Per Scheduler|Shared Memory|L1/TEX Hit|Tensor)" $R/${tag}_details.txt | head -8
cat $R/${tag}_partitions.txt
