#!/usr/bin/env bash
# Sixteenth session, call 2 (issue 11 lab): QREG = 1 (three warpgroups, Q.K^T with Q in
# registers), three and four K stages: smoke, bits, float64 check, times.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1; unset TRITON_INTERPRET
export PYTHONPATH=/tmp/site:$PWD/packages/ds41-cache/src:$PWD/packages/ds41-indexer/src:$PWD/packages/ds41-attention/src:$PWD/packages/ds41-runner/src
R=$OUT
timeout 100 python3 benchmarks/results/lead_s16_pair_smoke.py pairq > $R/pairq_smoke.log 2>&1; echo "smoke rc=$?"
cut -c1-220 $R/pairq_smoke.log | tail -8
if grep -q "T=5: pair == production out True lse True" $R/pairq_smoke.log; then
timeout 330 python3 packages/ds41-attention/scripts/gluon_profile.py --rows 1,8,64,66,128 \
  --variants pair_ks4,pairq,pairq_ks4 --check pairq --baselines gluon \
  --bits pairq:gluon,pairq_ks4:gluon --tile-sweep --sweep gluon,pair_ks4,pairq,pairq_ks4 \
  --sweep-rows 1,64 --json $R/attention_s16_pairq.json > $R/attention_s16_pairq.log 2>&1
echo "rc=$?"
grep -E "^bits|CHECK|OK|FAIL|graph" $R/attention_s16_pairq.log | grep -v "new == old True" | cut -c1-200 | head -20
grep -c "new == old True" $R/attention_s16_pairq.log
grep -v '^{' $R/attention_s16_pairq.log | tail -10
fi
