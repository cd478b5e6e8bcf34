#!/usr/bin/env bash
# Lead, thirteenth session, call 5: the cost of the Triton pass after the Gluon logits kernel (main
# a7cec62), .dev_lead/s13_pass_cost.py; then the bench with the new program-shape thresholds.
# carry [".whl", ".dev_lead/s13_call5.sh"], timeout_s ~240.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1; unset TRITON_INTERPRET
export PYTHONPATH=/tmp/site:$PWD/packages/ds41-cache/src:$PWD/packages/ds41-indexer/src:$PWD/packages/ds41-attention/src:$PWD/packages/ds41-runner/src
R=$OUT; t0=$(date +%s)
{
timeout 150 python3 .dev_lead/s13_pass_cost.py; echo "rc=$?"
echo "[$(( $(date +%s) - t0 )) s] bench (program shapes: four spans from 2,048, eight from 4,096)"
timeout 120 python3 -m ds41_indexer.bench --json $R/indexer_bench_s13c5.json > $R/indexer_bench_s13c5.log 2>&1; echo "bench rc=$?"; tail -17 $R/indexer_bench_s13c5.log | cut -c1-112
echo "[$(( $(date +%s) - t0 )) s] all done"
} 2>&1 | tee $R/lead_s13_call5.log
