#!/usr/bin/env bash
# Same-machine A/B of kernel variants: copies of src/ds41_attention, each edited by hand, placed
# under scripts/_variants/<name>/ds41_attention (H = the committed version, git show HEAD:...).
# Phase 1 (parallel): the GPU tests of the working tree's package, and the compiles of every
# variant's configs. Phase 2: each variant checked (reference, invariance) and timed in turn.
set -u
cd "$(dirname "$0")/../../.."
A=packages/ds41-attention
export PYTHONUNBUFFERED=1
unset TRITON_INTERPRET
out=${OUT:-/tmp/ab}
mkdir -p "$out"
cfg_for() {
  case "$1" in
    S) echo "${CFG_S:-64,64,8,1,1,0;64,32,8,1,1,0;64,128,8,1,1,0}" ;;
    *) echo "64,64,8,1" ;;
  esac
}
VARS=${VARIANTS:-H S SQ SE}
(PYTHONPATH=packages/ds41-cache/src:$A/src timeout 100 python3 -m pytest -q -p no:cacheprovider \
   -n 6 $A/tests/test_gpu.py > "$out/tests.log" 2>&1; echo "pytest rc=$?" >> "$out/tests.log") &
for v in $VARS; do
  PYTHONPATH=packages/ds41-cache/src:$A/scripts/_variants/$v python3 $A/scripts/perf_sweep.py \
    --phase compile --configs "$(cfg_for "$v")" > "$out/compile_$v.log" 2>&1 &
done
wait
tail -3 "$out/tests.log"
for v in $VARS ${REPEAT:-H}; do
  echo "== variant $v"
  PYTHONPATH=packages/ds41-cache/src:$A/scripts/_variants/$v timeout 90 python3 \
    $A/scripts/perf_sweep.py --phase time --configs "$(cfg_for "$v")" --rows 1,64,1024,4096 \
    --out "$out" 2>&1 | tee -a "$out/ab.log" | grep -v "^{" | grep -v "^total\|^config\|^$"
  mv "$out/sweep.json" "$out/sweep_$v.json" 2>/dev/null
done
