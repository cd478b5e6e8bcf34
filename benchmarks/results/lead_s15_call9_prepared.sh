#!/usr/bin/env bash
# PREPARED in the fifteenth session, NOT RUN (its device time ran out): the two-CTA D split lab
# kernel with st.async pushes, two tiles ahead on three K stages (split2a, measured in call 8),
# on four K stages (split2a_ks4) and three tiles ahead on four K stages (split2a_la3): bits
# against the one-CTA S0 + S1 kernel (split1), then times at T = 1 / 64 beside production.
# Copy to .dev_lead/ and run with carry [".whl", ".dev_lead/s16_call.sh"], timeout ~200.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1; unset TRITON_INTERPRET
export PYTHONPATH=/tmp/site:$PWD/packages/ds41-cache/src:$PWD/packages/ds41-indexer/src:$PWD/packages/ds41-attention/src:$PWD/packages/ds41-runner/src
R=$OUT
timeout 170 python3 packages/ds41-attention/scripts/gluon_profile.py --rows 1,64 \
  --variants split1,split2a,split2a_ks4,split2a_la3 --check none --baselines gluon \
  --bits split2a_ks4:split1,split2a_la3:split1 --bits-quick --tile-sweep \
  --sweep gluon,split2a,split2a_ks4,split2a_la3 --sweep-rows 1,64 \
  --json $R/attention_split2a_la3.json > $R/attention_split2a_la3.log 2>&1; echo "rc=$?"
grep -E "^bits|CHECK" $R/attention_split2a_la3.log
grep -v '^{' $R/attention_split2a_la3.log | tail -6
