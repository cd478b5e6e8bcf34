#!/usr/bin/env bash
# Prepared in the nineteenth session for the next device session (not run): main against the
# lab patch packages/ds41-attention/scripts/lab/pair_fetch_in_decode.patch (the pair kernel's
# producer issues its next copies before the decode), applied to a renamed copy of the
# package. Bits on four format pairs (one-CTA and pair kernels), then times at T = 1..64, where
# the pair kernel serves. Carry [".whl"].
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1; unset TRITON_INTERPRET
export PYTHONPATH=/tmp/site:$PWD/packages/ds41-cache/src:$PWD/packages/ds41-indexer/src:$PWD/packages/ds41-attention/src:$PWD/packages/ds41-runner/src
R=$OUT
rm -rf /tmp/ab && mkdir -p /tmp/ab && cp -r packages/ds41-attention/src/ds41_attention /tmp/ab/ds41_attention_pp
patch -s -p5 -d /tmp/ab/ds41_attention_pp < packages/ds41-attention/scripts/lab/pair_fetch_in_decode.patch || exit 1
export AB_DIR=/tmp/ab TREES=main:ds41_attention,pp:ds41_attention_pp
PHASE=bits timeout 200 python3 benchmarks/results/lead_s17_ab.py > $R/s20_pair_bits.log 2>&1; echo "bits rc=$?"
grep -c "BITS DIFFER" $R/s20_pair_bits.log; tail -1 $R/s20_pair_bits.log
ROWS=1,8,32,64 PHASE=time timeout 200 python3 benchmarks/results/lead_s17_ab.py > $R/s20_pair_time.log 2>&1; echo "time rc=$?"
tail -12 $R/s20_pair_time.log
