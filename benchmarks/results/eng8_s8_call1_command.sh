#!/bin/bash
# eng8 GPU call: rsqrt probe; touched tests (gpu or interpreter) || runner gpu tests; profiles (mine, base e129ff3)
L=$OUT/eng8_s8_call1.log
test -d .dev_eng8/tree/packages/ds41-cache/src/ds41_cache/ops/norm || { echo "WRONG TREE"; pwd; ls; exit 3; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
T=$PWD/.dev_eng8/tree/packages
MINE=$T/ds41-cache/src:$T/ds41-indexer/src:$T/ds41-attention/src:$T/ds41-runner/src
B=$PWD/.dev_eng8/base/packages
BASE=$B/ds41-cache/src:$B/ds41-indexer/src:$B/ds41-attention/src:$B/ds41-runner/src
export PYTHONPATH=/tmp/site:$MINE PYTHONUNBUFFERED=1; unset TRITON_INTERPRET
t0=$(date +%s); st() { echo "=== [$(( $(date +%s) - t0 )) s] $*" | tee -a $L; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader | tee -a $L
st "rsqrt probe"
python3 .dev_eng8/tree/packages/ds41-cache/scripts/rsqrt_probe.py 2>&1 | tee -a $L
st "touched tests (gpu or interpreter) and runner gpu tests, concurrently"
python3 -m pytest -q -p no:cacheprovider -n 6 -m "gpu or interpreter" \
  .dev_eng8/tree/packages/ds41-cache/tests/test_rope_inplace.py .dev_eng8/tree/packages/ds41-cache/tests/test_lookup_slots.py \
  .dev_eng8/tree/packages/ds41-cache/tests/test_rms_norm_kernel.py .dev_eng8/tree/packages/ds41-cache/tests/test_compressor.py \
  .dev_eng8/tree/packages/ds41-indexer/tests/test_queries_keys.py .dev_eng8/tree/packages/ds41-runner/tests/test_ops_swiglu.py \
  .dev_eng8/tree/packages/ds41-runner/tests/test_step_tables.py > $OUT/touched_tests.log 2>&1 &
PA=$!
python3 -m pytest -q -p no:cacheprovider -n 4 -m gpu .dev_eng8/tree/packages/ds41-runner/tests > $OUT/runner_gpu_tests.log 2>&1 &
PB=$!
wait $PA; echo "touched rc=$?" | tee -a $L; tail -12 $OUT/touched_tests.log | tee -a $L
wait $PB; echo "runner gpu rc=$?" | tee -a $L; tail -12 $OUT/runner_gpu_tests.log | tee -a $L
# mode=bi only (the profile script loops over bi and fast; fast's small kernels are the same)
sed 's/for mode in ("bi", "fast"):/for mode in ("bi",):/' .dev_eng8/tree/benchmarks/profile_step.py > /tmp/ps_mine.py
sed 's/for mode in ("bi", "fast"):/for mode in ("bi",):/' .dev_eng8/base/benchmarks/profile_step.py > /tmp/ps_base.py
grep -c 'for mode in ("bi",)' /tmp/ps_mine.py /tmp/ps_base.py | tee -a $L
st "profile mine"
python3 /tmp/ps_mine.py --batch 64 --top 16 > $OUT/profile_step_s8_eng8.txt 2>&1; grep -A7 "^== " $OUT/profile_step_s8_eng8.txt | tee -a $L
st "profile base e129ff3"
PYTHONPATH=/tmp/site:$BASE python3 /tmp/ps_base.py --batch 64 --top 16 > $OUT/profile_step_s8_eng8_base.txt 2>&1; grep -A7 "^== " $OUT/profile_step_s8_eng8_base.txt | tee -a $L
st "done"
