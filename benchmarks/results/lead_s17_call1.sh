#!/usr/bin/env bash
# (Recorded; it ran from a .dev_lead/ copy with the drivers beside it, paths shown as committed.)
# Seventeenth session, call 1: ncu (full set, clocks untouched) on the one-CTA kernel at
# T = 1056 (8 full waves) and the pair kernel at T = 64; then the attention gpu suite (the
# fallback test never ran on a GPU).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1; unset TRITON_INTERPRET
export PYTHONPATH=/tmp/site:$PWD/packages/ds41-cache/src:$PWD/packages/ds41-indexer/src:$PWD/packages/ds41-attention/src:$PWD/packages/ds41-runner/src
R=$OUT
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
echo "ncu=$NCU"
for cfg in "onecta 1056 _gluon_sparse_attn_kernel" "pair 64 _gluon_pair_attn_kernel"; do
  set -- $cfg
  timeout 150 $NCU --clock-control none --set full --import-source no -k regex:$3 --launch-skip 2 --launch-count 1 \
     -f -o $R/ncu_$1_$2 python3 benchmarks/results/lead_s17_ncu.py $1 $2 > $R/ncu_$1_$2.txt 2>&1; echo "ncu $1 rc=$?"
  tail -3 $R/ncu_$1_$2.txt
  if [ -f $R/ncu_$1_$2.ncu-rep ]; then
    $NCU --import $R/ncu_$1_$2.ncu-rep --page details --print-details all > $R/ncu_$1_$2_details.txt 2>&1
    $NCU --import $R/ncu_$1_$2.ncu-rep --page source --print-source sass --csv > $R/ncu_$1_$2_sass.csv 2>&1
    ls -la $R/ncu_$1_$2*
  fi
done
workers=(); python3 -c "import xdist" 2>/dev/null && workers=(-n 4)
timeout 260 python3 -m pytest -q -rfE -m gpu packages/ds41-attention/tests -p no:cacheprovider "${workers[@]}" > $R/attention_gpu_s17c1.log 2>&1; echo "tests rc=$?"
grep -E "^(FAILED|ERROR)" $R/attention_gpu_s17c1.log | head; tail -1 $R/attention_gpu_s17c1.log
