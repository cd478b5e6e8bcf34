#!/usr/bin/env bash
# Sixteenth session, call 1 (issue 11 lab): gluon_pair.py (two CTAs a row sharing the decode,
# one consumer) against production: smoke, bits on every check case, float64 check, times.
# Run twice: the first run launched 4T CTAs (the cluster launcher doubled a grid that Triton's
# launcher already multiplies by num_ctas; T = 5 failed the smoke), this record is the second.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1; unset TRITON_INTERPRET
export PYTHONPATH=/tmp/site:$PWD/packages/ds41-cache/src:$PWD/packages/ds41-indexer/src:$PWD/packages/ds41-attention/src:$PWD/packages/ds41-runner/src
R=$OUT
timeout 100 python3 benchmarks/results/lead_s16_pair_smoke.py > $R/pair_smoke.log 2>&1; echo "smoke rc=$?"
cut -c1-220 $R/pair_smoke.log | tail -8
if grep -q "T=5: pair == production out True lse True" $R/pair_smoke.log; then
timeout 330 python3 packages/ds41-attention/scripts/gluon_profile.py --rows 1,8,64,66,128,1024 \
  --variants pair,pair_ks4 --check pair --baselines gluon --bits pair:gluon,pair_ks4:gluon \
  --tile-sweep --sweep gluon,pair,pair_ks4 --sweep-rows 1,64 \
  --json $R/attention_s16_pair.json > $R/attention_s16_pair.log 2>&1; echo "rc=$?"
grep -E "^bits|CHECK|OK|FAIL|graph" $R/attention_s16_pair.log | cut -c1-200 | head -40
grep -v '^{' $R/attention_s16_pair.log | tail -12
fi
