#!/usr/bin/env bash
# Lead, eleventh session, call 6: the decode-step A/B again in the other order (PDL on first),
# then the indexer bench with PDL on and off (its top-k and flag pass take part).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$PWD/packages/ds41-cache/src:$PWD/packages/ds41-indexer/src:$PWD/packages/ds41-attention/src:$PWD/packages/ds41-runner/src PYTHONUNBUFFERED=1
unset TRITON_INTERPRET
R=$OUT; t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
{
for pdl in 1 0; do
el "profile_step DS41_PDL=$pdl"
DS41_PDL=$pdl timeout 110 python3 benchmarks/profile_step.py --batch 1,64 --graph-replays 100 > $R/profile_step_s11b_pdl$pdl.txt 2>&1
grep -E "us of kernels|graph replay|Error" $R/profile_step_s11b_pdl$pdl.txt
done
for pdl in 1 0; do
el "indexer bench DS41_PDL=$pdl"
DS41_PDL=$pdl timeout 90 python3 -m ds41_indexer.bench --json $R/indexer_bench_s11_pdl$pdl.json > $R/indexer_bench_s11_pdl$pdl.log 2>&1; echo "rc=$?"; tail -22 $R/indexer_bench_s11_pdl$pdl.log
done
el "all done"
} 2>&1 | tee $R/lead_s11_call6.log
