#!/usr/bin/env bash
# Issue 11 lab: the cluster exchange probe (Gluon + inline PTX, DSMEM push between the two CTAs
# of a cluster). Then the indexer gpu suite and the bench on main's final tree (11c351a, first
# H200 run after the fourteenth session's two offline-only steps).
# Carry [".whl", ".dev_lead/s15_call2.sh"].
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1; unset TRITON_INTERPRET
export PYTHONPATH=/tmp/site:$PWD/packages/ds41-cache/src:$PWD/packages/ds41-indexer/src:$PWD/packages/ds41-attention/src:$PWD/packages/ds41-runner/src
R=$OUT; t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
{
el "cluster exchange probe"
timeout 90 python3 packages/ds41-attention/scripts/cluster_exchange_probe.py --offsets
timeout 120 python3 packages/ds41-attention/scripts/cluster_exchange_probe.py > $R/cluster_exchange_s15c2.log 2>&1; echo "probe rc=$?"; tail -12 $R/cluster_exchange_s15c2.log
el "indexer gpu tests (main 11c351a)"
timeout 170 python3 -m pytest -q -rfE -m gpu -n 4 -p no:cacheprovider packages/ds41-indexer/tests > $R/indexer_gpu_s15c2.log 2>&1; echo "indexer rc=$?"; grep -E "^(FAILED|ERROR)" $R/indexer_gpu_s15c2.log | head; tail -1 $R/indexer_gpu_s15c2.log
el "indexer bench"
timeout 100 python3 -m ds41_indexer.bench --json $R/indexer_bench_s15c2.json > $R/indexer_bench_s15c2.log 2>&1; echo "bench rc=$?"
tail -17 $R/indexer_bench_s15c2.log | cut -c1-112
el "done"
} 2>&1 | tee $R/lead_s15_call2.log
