#!/usr/bin/env bash
# Issue 11 lab: timing of the two-CTA D split (split2) beside its one-CTA bits (split1), the lab
# kernel (pipe) and production (gluon); V4.1-Flash problem only (mxfp8 + nvfp4).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1; unset TRITON_INTERPRET
export PYTHONPATH=/tmp/site:$PWD/packages/ds41-cache/src:$PWD/packages/ds41-indexer/src:$PWD/packages/ds41-attention/src:$PWD/packages/ds41-runner/src
R=$OUT
timeout 230 python3 packages/ds41-attention/scripts/gluon_profile.py --rows 1,64,128,1024,4096 \
  --variants pipe,split1,split2 --check none --baselines gluon --tile-sweep \
  --sweep gluon,pipe,split1,split2 --sweep-rows 1,132 --json $R/attention_s15_split_time.json \
  > $R/attention_s15_split_time.log 2>&1; echo "rc=$?"
grep -v '^{' $R/attention_s15_split_time.log | tail -12
