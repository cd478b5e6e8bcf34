#!/usr/bin/env bash
# Lead, eleventh session, call 1: the offline labs of the tenth session.
# 1. the split matmul's fused reduction (engine): --s8 replay, then bits + times at 1 / 64 rows;
# 2. the indexer's persistent-grid logits kernel (round10b): gpu tests with it, bits, times;
# 3. the indexer's whole suite on CUDA (the tenth session's three test fixes).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$PWD/packages/ds41-cache/src:$PWD/packages/ds41-indexer/src:$PWD/packages/ds41-attention/src:$PWD/packages/ds41-runner/src PYTHONUNBUFFERED=1
unset TRITON_INTERPRET
R=$OUT; t0=$(date +%s); P="-p no:cacheprovider"
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
{
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
el "fused reduce --s8"
timeout 60 python3 scripts/matmul_fused_reduce_lab.py --s8 > $R/fused_reduce_s8.log 2>&1; echo "rc=$?"; tail -6 $R/fused_reduce_s8.log
el "fused reduce lab"
timeout 150 python3 scripts/matmul_fused_reduce_lab.py --rows 1,64 --json $R/fused_reduce.json > $R/fused_reduce.log 2>&1; echo "rc=$?"; tail -30 $R/fused_reduce.log
el "indexer round10b (persistent grid)"
mkdir -p $R/idx; TEST_S=140 LAB_S=90 OUT=$R/idx bash packages/ds41-indexer/scripts/issue12/round10b_call1.sh 2>&1 | tail -45
el "indexer suite, all, on CUDA"
timeout 120 python3 -m pytest -q -rfE $P -n 8 packages/ds41-indexer/tests > $R/indexer_tests_s11.log 2>&1
echo "rc=$?"; grep -E "^(FAILED|ERROR)" $R/indexer_tests_s11.log | cut -c1-200 | head -12; tail -1 $R/indexer_tests_s11.log
el "all done"
} 2>&1 | tee $R/lead_s11_call1.log
