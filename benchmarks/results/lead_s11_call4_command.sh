#!/usr/bin/env bash
# Lead, eleventh session, call 4: programmatic dependent launch (PDL) in the decode step's
# Triton kernels: the decode step with PDL off (DS41_PDL=0) and on (graph replay wall time),
# then the gpu tests of the three changed packages with PDL on; the indexer tile diagnostic.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$PWD/packages/ds41-cache/src:$PWD/packages/ds41-indexer/src:$PWD/packages/ds41-attention/src:$PWD/packages/ds41-runner/src PYTHONUNBUFFERED=1
unset TRITON_INTERPRET
R=$OUT; t0=$(date +%s); P="-p no:cacheprovider"
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
{
el "indexer tile diagnostic"
timeout 40 python3 .dev_lead/s11_idx_diag.py 2>&1 | tail -30
for pdl in 0 1; do
el "profile_step DS41_PDL=$pdl"
DS41_PDL=$pdl timeout 110 python3 benchmarks/profile_step.py --batch 1,64 --graph-replays 100 > $R/profile_step_s11_pdl$pdl.txt 2>&1
grep -E "us of kernels|graph replay|Error" $R/profile_step_s11_pdl$pdl.txt
done
el "runner gpu tests (PDL on)"
timeout 150 python3 -m pytest -q -rfE $P -m gpu -n 4 packages/ds41-runner/tests > $R/runner_gpu_s11.log 2>&1
echo "rc=$?"; grep -E "^(FAILED|ERROR)" $R/runner_gpu_s11.log | cut -c1-200 | head; tail -1 $R/runner_gpu_s11.log
el "cache gpu tests"
timeout 90 python3 -m pytest -q -rfE $P -m gpu -n 4 packages/ds41-cache/tests > $R/cache_gpu_s11.log 2>&1
echo "rc=$?"; grep -E "^(FAILED|ERROR)" $R/cache_gpu_s11.log | cut -c1-200 | head; tail -1 $R/cache_gpu_s11.log
el "indexer gpu tests"
timeout 150 python3 -m pytest -q -rfE $P -m gpu -n 8 packages/ds41-indexer/tests > $R/indexer_gpu_s11.log 2>&1
echo "rc=$?"; grep -E "^(FAILED|ERROR)" $R/indexer_gpu_s11.log | cut -c1-200 | head; tail -1 $R/indexer_gpu_s11.log
el "all done"
} 2>&1 | tee $R/lead_s11_call4.log
