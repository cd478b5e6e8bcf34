#!/usr/bin/env bash
# Twenty-sixth session, call 2 (issue 12): (a) the logits kernel's producer on 2 or 4 warps
# (scripts/issue12/producer4_lab.py) at launches of few programs (two consumer warpgroups a
# program, where call 1 measured one row at 128K 7% faster with 4 warps); (b) the ring's
# stage, phase and span indices as masks and shifts (scripts/issue12/shift_lab.py), 64 x 32K
# three times. Bits and CUDA-graph medians against the production kernel. Carry [".whl"].
set -u
source scripts/device_env.sh
L=packages/ds41-indexer/scripts/issue12
timeout 240 python3 $L/producer4_lab.py --run --warps 2,4 \
  --sizes 1x4096,4x4096,1x32768,8x32768,1x131072,2x131072 --json $OUT/producer_nc2_s26c2.json \
  2>&1 | tee $OUT/producer_nc2_s26c2.log | grep -v '^{"rows'
timeout 300 python3 $L/shift_lab.py --run --json $OUT/shift_s26c2.json 2>&1 \
  | tee $OUT/shift_s26c2.log | grep -v '^{"rows'
