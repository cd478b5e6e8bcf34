#!/usr/bin/env bash
# Lead, eleventh session, call 5: serve_bench (burst, both modes) with PDL on and off.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$PWD/packages/ds41-cache/src:$PWD/packages/ds41-indexer/src:$PWD/packages/ds41-attention/src:$PWD/packages/ds41-runner/src PYTHONUNBUFFERED=1
unset TRITON_INTERPRET
R=$OUT; t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
{
for pdl in 1 0; do
el "serve_bench burst DS41_PDL=$pdl"
DS41_PDL=$pdl timeout 170 python3 -m ds41_runner.serve_bench --workloads burst --json $R/serve_h200_s11_pdl$pdl.json --markdown $R/serve_h200_s11_pdl$pdl.md > $R/serve_s11_pdl$pdl.log 2>&1
echo "rc=$?"; grep -E "^\||BI/fast" $R/serve_s11_pdl$pdl.log | head -8
done
el "all done"
} 2>&1 | tee $R/lead_s11_call5.log
