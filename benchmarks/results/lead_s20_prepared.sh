#!/usr/bin/env bash
# Prepared in the nineteenth session for the next device session (not run): main against two
# lab patches, each applied to a renamed copy of the package: pp =
# packages/ds41-attention/scripts/lab/pair_fetch_in_decode.patch (the pair kernel's producer
# issues its next copies before the decode), st = scripts/lab/staged_copy_addresses.patch (the
# one-CTA producer stages its copy addresses instead of converting layouts while copying).
# Bits on four format pairs (one-CTA and pair kernels), then times. Carry [".whl"].
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1; unset TRITON_INTERPRET
export PYTHONPATH=/tmp/site:$PWD/packages/ds41-cache/src:$PWD/packages/ds41-indexer/src:$PWD/packages/ds41-attention/src:$PWD/packages/ds41-runner/src
R=$OUT
L=packages/ds41-attention/scripts/lab
rm -rf /tmp/ab && mkdir -p /tmp/ab
for t in pp:pair_fetch_in_decode st:staged_copy_addresses; do
  cp -r packages/ds41-attention/src/ds41_attention /tmp/ab/ds41_attention_${t%%:*}
  patch -s -p5 -d /tmp/ab/ds41_attention_${t%%:*} < $L/${t#*:}.patch || exit 1
done
export AB_DIR=/tmp/ab TREES=main:ds41_attention,pp:ds41_attention_pp,st:ds41_attention_st
PHASE=bits timeout 240 python3 benchmarks/results/lead_s17_ab.py > $R/s20_bits.log 2>&1; echo "bits rc=$?"
grep -c "BITS DIFFER" $R/s20_bits.log; tail -1 $R/s20_bits.log
ROWS=1,64,132,1024,4096 PHASE=time timeout 240 python3 benchmarks/results/lead_s17_ab.py > $R/s20_time.log 2>&1; echo "time rc=$?"
tail -16 $R/s20_time.log
