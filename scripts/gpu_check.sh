#!/usr/bin/env bash
# The whole GPU picture in one call: every `gpu` test of every package, then the benchmarks.
# Works without nox or an install (the H200 here has neither): run from the repository root.
#   bash scripts/gpu_check.sh [OUTDIR]
# Wheels for packages the GPU image lacks (hydra-core, omegaconf, antlr4) may be carried in
# .whl/; they are installed into /tmp/site first when present.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-${OUT:-benchmarks/results}}
mkdir -p "$out"
source scripts/device_env.sh
status=0
# GPU_TEST_WORKERS (default 4) parallel pytest workers when pytest-xdist is present.
workers=()
python3 -c "import xdist" 2>/dev/null && workers=(-n "${GPU_TEST_WORKERS:-4}")
for pkg in ${GPU_PACKAGES:-cache indexer attention runner}; do
  echo "=== gpu tests: ds41-$pkg"
  python3 -m pytest -q -m gpu "packages/ds41-$pkg/tests" -p no:cacheprovider "${workers[@]}" \
    || status=1
done
echo "=== gpu tests: integration"
python3 -m pytest -q -m gpu tests -p no:cacheprovider || { rc=$?; [ $rc -eq 5 ] || status=1; }
echo "=== benchmarks"
python3 benchmarks/run_all.py --out "$out" ${BENCH_ONLY:+--only "$BENCH_ONLY"} \
  ${BENCH_TIMEOUT:+--timeout "$BENCH_TIMEOUT"} || status=1
exit $status
