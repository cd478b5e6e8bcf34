#!/usr/bin/env bash
# Memory and race checks of every ds41 GPU kernel in one call (the record is RELIABILITY.md):
#   bash scripts/sanitize.sh [OUTDIR] [memcheck,racecheck,app[,consan]]
# - memcheck: compute-sanitizer over the `gpu` tests of ds41-cache, -indexer and -attention;
# - racecheck: compute-sanitizer over the `gpu` tests of the indexer and of the attention's
#   Triton kernels (DS41_TEST_PIN_TRITON=1 and -k "not gluon": racecheck does not model the
#   Gluon kernel's barrier-then-one-thread mbarrier hand-offs and flags every one of them);
# - consan (opt-in): Triton's concurrency sanitizer over the Gluon kernel (models mbarriers,
#   named barriers, cp.async and wgmma groups); with Triton 3.6 its instrumented compile of
#   this kernel did not finish within 245 s on the H200 host (RELIABILITY.md);
# - app: memcheck over the runner's own kernels through the app (`tiny` and `flash_mini`,
#   eager and CUDA-graph steps); the runner's `gpu` tests are too slow under memcheck.
# The checks run side by side on the one GPU; SANITIZE_TIMEOUT (s, default 420) bounds each.
# Narrow a run with MEMCHECK_PKGS, RACECHECK_PKGS (package names) and APP_RUNS (model:graph).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-${OUT:-sanitize_out}}
only=${2:-memcheck,racecheck,app}
mkdir -p "$out"
source scripts/device_env.sh
limit=${SANITIZE_TIMEOUT:-420}
cs=(compute-sanitizer --target-processes all --error-exitcode 1 --print-limit 100)
tests=(-q -m gpu -p no:cacheprovider -n 3)
job() {  # job NAME CMD...: run CMD under the time limit, log to $out/NAME.log
  local name=$1; shift
  ( timeout "$limit" "$@" >"$out/$name.log" 2>&1; echo "$name rc=$?" >>"$out/rc.txt" ) &
}
rm -f "$out/rc.txt"
if [[ $only == *memcheck* ]]; then
  for p in ${MEMCHECK_PKGS:-cache indexer attention}; do
    job "memcheck_$p" "${cs[@]}" --tool memcheck python3 -m pytest "${tests[@]}" "packages/ds41-$p/tests"
  done
fi
if [[ $only == *racecheck* ]]; then
  for p in ${RACECHECK_PKGS:-indexer attention}; do
    if [[ $p == attention ]]; then
      DS41_TEST_PIN_TRITON=1 job racecheck_attention_triton "${cs[@]}" --tool racecheck \
        python3 -m pytest "${tests[@]}" -k "not gluon" packages/ds41-attention/tests
    else
      job "racecheck_$p" "${cs[@]}" --tool racecheck python3 -m pytest "${tests[@]}" "packages/ds41-$p/tests"
    fi
  done
fi
if [[ $only == *consan* ]]; then
  TRITON_INSTRUMENTATION_MODE=consan job consan_gluon python3 packages/ds41-attention/scripts/consan_check.py
fi
if [[ $only == *app* ]]; then
  for run in ${APP_RUNS:-tiny:eager tiny:cuda_graph flash_mini:eager flash_mini:cuda_graph}; do
    m=${run%%:*} g=${run##*:}
    job "memcheck_app_${m}_$g" "${cs[@]}" --tool memcheck python3 -m ds41_runner device=cuda \
      model=$m graph=$g workload=tiny plot=false progress=false "hydra.run.dir=$out/app_${m}_$g"
  done
fi
wait
echo "=== sanitize summary ($out)"
sort "$out/rc.txt"
for f in "$out"/*.log; do
  printf '%-40s %s\n' "$(basename "$f")" \
    "$(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY|consan: [0-9]+ launches|passed|failed' "$f" | tail -2 | tr '\n' ' ')"
done
! grep -q "rc=[^0]" "$out/rc.txt"
