#!/usr/bin/env bash
# Lead, tenth session, call 1: the compressor's libdevice exp (bits vs torch), then the
# attention lab9 kernel (issue 11: producer records into registers): bits first, then times.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/packages/ds41-cache/src:$PWD/packages/ds41-indexer/src:$PWD/packages/ds41-attention/src:$PWD/packages/ds41-runner/src PYTHONUNBUFFERED=1
unset TRITON_INTERPRET
R=$OUT; t0=$(date +%s); P="-p no:cacheprovider"
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
{
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
el "compress_bench (exp mismatches, paths' bits, times)"
timeout 60 python3 packages/ds41-cache/scripts/compress_bench.py --json $R/compress_bench_s10.json 2>&1 | tail -16
el "cache compress tests on the GPU"
timeout 90 python3 -m pytest -q $P -n 4 packages/ds41-cache/tests/test_compress_kernel.py packages/ds41-cache/tests/test_compressor.py packages/ds41-cache/tests/test_codec.py 2>&1 | tail -4
el "attention lab9 profile"
timeout ${LAB_S:-360} python3 packages/ds41-attention/scripts/gluon_profile.py --variants lab9,lab9_nohand,lab9_ks4,lab9_ks4p136,lab9_p136 --check lab9 --quick lab9_ks4p136 --bits lab9:gluon,lab9_ks4p136:gluon --tile-sweep --sweep gluon,lab9,lab9_ks4p136 --sweep-rows 1,132 --hidden gluon,lab9 --json $R/attention_s10_lab9.json > $R/attention_s10_lab9.log 2>&1
echo "rc=$?"; grep -iE "bits|differ|equal|fail|error" $R/attention_s10_lab9.log | head -12; tail -40 $R/attention_s10_lab9.log
el "all done"
} 2>&1 | tee $R/lead_s10_call1.log
