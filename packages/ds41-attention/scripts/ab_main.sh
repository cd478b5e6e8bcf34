#!/usr/bin/env bash
# One GPU call: the working tree's Gluon kernel and lab variants (gluon_profile.py names)
# against a previous production kernel (the tree at $OLD_TREE, default `..`: the device copy
# of main, one level above a `.dev_*` copy).
# 1. gluon_profile.py: float64 tolerance, rows alone == in batches, graph == eager on the new
#    kernel (every format pair), quick checks of the variants and the split path, variants
#    bitwise against the old kernel ($BITS), kernel times and tile sweeps;
# 2. the package's GPU tests ($TESTS_K: a -k filter; TESTS=0: none); 3. `ds41_attention.bench`
#    of this tree (BENCH=0: none; BENCH_OLD=1: the old one's too).
# VARIANTS, CHECK, QUICK, BITS, SWEEP, SWEEP_ROWS, ROWS: gluon_profile.py's options (empty
# CHECK / QUICK / BITS: none; BITS_QUICK=0: --bits on every format pair).
# Results under $OUT (default /tmp/ab_main). Step time limits: T_PROFILE, T_TESTS, T_BENCH;
# XDIST_N: pytest workers (default 4).
set -u -o pipefail
cd "$(dirname "$0")/../../.."
A=packages/ds41-attention
out=${OUT:-/tmp/ab_main}
old=${OLD_TREE:-..}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
unset TRITON_INTERPRET
python3 -c "import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())"
echo "== profile"
timeout "${T_PROFILE:-120}" python3 $A/scripts/gluon_profile.py \
  --old "$old/$A/src/ds41_attention/ops/sparse_attention/gluon_kernels.py" \
  --rows "${ROWS:-1,8,64,1024,4096}" --baselines gluon --variants "${VARIANTS:-old,chunk_64,gluon_s7}" \
  --check "${CHECK-gluon}" --quick "${QUICK-chunk_64,gluon_s7}" --bits "${BITS-chunk_n32c32:old}" \
  $([ "${BITS_QUICK:-1}" = 1 ] && echo --bits-quick) \
  --tile-sweep --sweep "${SWEEP:-gluon,old}" --sweep-rows "${SWEEP_ROWS:-1,132}" \
  --json "$out/profile.json" 2>&1 | tee "$out/profile.log"
echo "profile rc=$?"
if [ "${TESTS:-1}" = 1 ]; then
  echo "== gpu tests"
  xd=""
  python3 -c "import xdist" 2>/dev/null && xd="-n ${XDIST_N:-4}"
  timeout "${T_TESTS:-120}" python3 -m pytest -q -m gpu $A/tests -p no:cacheprovider $xd \
    ${TESTS_K:+-k "$TESTS_K"} > "$out/tests.log" 2>&1
  echo "pytest rc=$?" >> "$out/tests.log"
  grep -v "PytestBenchmarkWarning\|warner(" "$out/tests.log" | tail -12
fi
trees="new"
[ "${BENCH_OLD:-0}" = 1 ] && trees="new old"
[ "${BENCH:-1}" = 1 ] || trees=""
for tree in $trees; do
  echo "== bench $tree"
  pp=$PYTHONPATH
  [ $tree = old ] && pp="/tmp/site:$old/packages/ds41-cache/src:$old/$A/src"
  PYTHONPATH=$pp timeout "${T_BENCH:-60}" python3 -m ds41_attention.bench --rows 1,8,64,1024,4096 \
    --skip torch --reps 20 --json "$out/bench_$tree.json" 2>&1 | tail -8 | tee "$out/bench_$tree.log"
done
