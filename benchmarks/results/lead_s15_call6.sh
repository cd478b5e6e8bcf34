#!/usr/bin/env bash
# Issue 11 lab: the two-CTA D split (gluon_lab SPLIT 2, clusters of two, partial scores
# exchanged through DSMEM) against its one-CTA bits (SPLIT 1) and production.
# Carry [".whl", ".dev_lead/s15_call6.sh", "benchmarks/results/lead_s15_split_smoke.py"].
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1; unset TRITON_INTERPRET
export PYTHONPATH=/tmp/site:$PWD/packages/ds41-cache/src:$PWD/packages/ds41-indexer/src:$PWD/packages/ds41-attention/src:$PWD/packages/ds41-runner/src
R=$OUT; t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
{
el "smoke"
timeout 120 python3 benchmarks/results/lead_s15_split_smoke.py > $R/split_smoke.log 2>&1; echo "smoke rc=$?"; tail -5 $R/split_smoke.log | cut -c1-300
el "profile"
timeout 380 python3 packages/ds41-attention/scripts/gluon_profile.py --rows 1,64,128,1024,4096 \
  --variants pipe,split1,split2 --bits split2:split1 --check split1 --quick split2 --baselines gluon \
  --tile-sweep --sweep gluon,pipe,split1,split2 --sweep-rows 1,132 --hidden gluon,split2 \
  --json $R/attention_s15_split.json > $R/attention_s15_split.log 2>&1; echo "rc=$?"
grep -E "^bits|CHECK|FAIL" $R/attention_s15_split.log | head -20
grep -v '^{' $R/attention_s15_split.log | tail -16
el "done"
} 2>&1 | tee $R/lead_s15_call6.log
