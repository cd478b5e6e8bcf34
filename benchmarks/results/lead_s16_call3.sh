#!/usr/bin/env bash
# Sixteenth session, call 3: the production pair kernel (gluon_pair_kernels.py): smoke, the
# attention package's gpu suite, ds41_attention.bench (the closing table of issue 11).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1; unset TRITON_INTERPRET
export PYTHONPATH=/tmp/site:$PWD/packages/ds41-cache/src:$PWD/packages/ds41-indexer/src:$PWD/packages/ds41-attention/src:$PWD/packages/ds41-runner/src
R=$OUT
timeout 90 python3 benchmarks/results/lead_s16_prod_smoke.py > $R/prod_smoke.log 2>&1; echo "smoke rc=$?"
tail -4 $R/prod_smoke.log | cut -c1-200
grep -q "T=5: pair == one CTA out True lse True" $R/prod_smoke.log || exit 1
workers=(); python3 -c "import xdist" 2>/dev/null && workers=(-n 4)
timeout 280 python3 -m pytest -q -m gpu packages/ds41-attention/tests -p no:cacheprovider "${workers[@]}" > $R/attention_gpu_s16.log 2>&1; echo "tests rc=$?"
tail -5 $R/attention_gpu_s16.log | cut -c1-300
timeout 160 python3 -m ds41_attention.bench --rows 1,8,64,66,67,128,1024,4096 --reps 30 \
  --json $R/attention_bench_s16.json --plot $R/attention_bench_s16.png > $R/attention_bench_s16.log 2>&1; echo "bench rc=$?"
tail -12 $R/attention_bench_s16.log
