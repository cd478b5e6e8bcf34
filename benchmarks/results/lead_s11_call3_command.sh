#!/usr/bin/env bash
# Lead, eleventh session, call 3: PDL per boundary (synthetic chain), a decode step's graph
# replay wall time vs its kernel time, the indexer's test_logits failures' text.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$PWD/packages/ds41-cache/src:$PWD/packages/ds41-indexer/src:$PWD/packages/ds41-attention/src:$PWD/packages/ds41-runner/src PYTHONUNBUFFERED=1
unset TRITON_INTERPRET
R=$OUT; t0=$(date +%s); P="-p no:cacheprovider"
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
{
el "pdl chain probe"
timeout 60 python3 scripts/pdl_chain_probe.py --json $R/pdl_chain_probe.json 2>&1 | tail -8
el "profile_step with graph replays"
timeout 120 python3 benchmarks/profile_step.py --batch 1,64 --graph-replays 50 > $R/profile_step_s11_graph.txt 2>&1
grep -E "us of kernels|graph replay" $R/profile_step_s11_graph.txt
el "indexer test_logits"
timeout 100 python3 -m pytest -q -rfE --tb=short $P -n 8 packages/ds41-indexer/tests/test_logits.py > $R/indexer_test_logits.log 2>&1
echo "rc=$?"; grep -E "^(FAILED|ERROR)|Error|error" $R/indexer_test_logits.log | cut -c1-250 | head -20; tail -1 $R/indexer_test_logits.log
el "all done"
} 2>&1 | tee $R/lead_s11_call3.log
