#!/usr/bin/env bash
# Issue 11 lab: the D split with st.async pushes (split2a, XMODE 1): bits against split1, then
# times at T = 1 / 64 beside production and split2 (release-arrive pushes).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1; unset TRITON_INTERPRET
export PYTHONPATH=/tmp/site:$PWD/packages/ds41-cache/src:$PWD/packages/ds41-indexer/src:$PWD/packages/ds41-attention/src:$PWD/packages/ds41-runner/src
R=$OUT
timeout 60 python3 benchmarks/results/lead_s15_split_smoke.py > $R/split2a_smoke.log 2>&1; echo "smoke rc=$?"; cut -c1-200 $R/split2a_smoke.log | tail -4
timeout 100 python3 packages/ds41-attention/scripts/gluon_profile.py --rows 1,64 \
  --variants split2,split2a --check none --baselines gluon --tile-sweep \
  --sweep gluon,split2,split2a --sweep-rows 1,64 --json $R/attention_s15_split2a.json \
  > $R/attention_s15_split2a.log 2>&1; echo "rc=$?"
grep -v '^{' $R/attention_s15_split2a.log | tail -6
