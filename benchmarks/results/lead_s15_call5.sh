#!/usr/bin/env bash
# Issue 11 lab: what one CTA of a two-CTA D split would take (gluon_lab DROP 4: half the decode,
# half of Q.K^T, half of P.V, no exchange) beside the lab's full kernel (pipe) and production,
# rows and the tile sweep. Carry [".whl", ".dev_lead/s15_call5.sh"].
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1; unset TRITON_INTERPRET
export PYTHONPATH=/tmp/site:$PWD/packages/ds41-cache/src:$PWD/packages/ds41-indexer/src:$PWD/packages/ds41-attention/src:$PWD/packages/ds41-runner/src
R=$OUT; t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
{
el "gluon_profile drop4"
timeout 400 python3 packages/ds41-attention/scripts/gluon_profile.py --rows 1,64,128,1024,2048,4096 \
  --variants pipe,pipe_drop4 --check none --baselines gluon --tile-sweep --sweep gluon,pipe,pipe_drop4 \
  --sweep-rows 1,132 --json $R/attention_s15_drop4.json > $R/attention_s15_drop4.log 2>&1; echo "rc=$?"
grep -v '^{' $R/attention_s15_drop4.log | tail -14
el "done"
} 2>&1 | tee $R/lead_s15_call5.log
