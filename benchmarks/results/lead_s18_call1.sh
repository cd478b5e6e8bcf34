#!/usr/bin/env bash
# (prefetch_next_item.patch is in main since the eighteenth session: git show b1fe2f7:$L/prefetch_next_item.patch)
# Prepared in the seventeenth session; ran in the eighteenth (call 1), results in attention_s18_prefetch_*.log and attention_s18_fastpair.log. Before the call, from
# a clean main (P = packages/ds41-attention, L = $P/scripts/lab):
#   mkdir -p .dev_lead/ab18 && cd .dev_lead/ab18 && rm -rf ds41_attention_* &&
#   for v in old f p; do cp -r ../../$P/src/ds41_attention ds41_attention_$v; done &&
#   (cd ds41_attention_f && patch -p5 < ../../../$L/first_loads_before_q.patch) &&
#   (cd ds41_attention_p && patch -p5 < ../../../$L/prefetch_next_item.patch) && cd ../.. &&
#   git apply $L/first_loads_before_q.patch $L/prefetch_next_item.patch
# (check each copy's diff against main before the call); run with carry
# [".whl", ".dev_lead/ab18", this script], timeout ~500. The four packages, one process:
#   old  main;  f  the row's lengths and first slot columns loaded before Q's copies (both
#   kernels);  p  the producer, idle at its program's end, prefetches into L2 the Q rows, slot
#   rows and lengths of the program an SM count later in launch order (one-CTA kernel,
#   invariant mode);  fp  both (the working tree). Bits equal by construction (compiled for
#   sm_90a offline: no spills, same shared memory); the bits step compares old and fp.
# Then the fast path: the pair kernel against the planned and forced split counts, T = 8..66.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1; unset TRITON_INTERPRET
export PYTHONPATH=/tmp/site:$PWD/packages/ds41-cache/src:$PWD/packages/ds41-indexer/src:$PWD/packages/ds41-attention/src:$PWD/packages/ds41-runner/src
R=$OUT
export AB_DIR=.dev_lead/ab18
export TREES=old:ds41_attention_old,f:ds41_attention_f,p:ds41_attention_p,fp:ds41_attention
BITS_TREES=old,fp PHASE=bits timeout 200 python3 benchmarks/results/lead_s17_ab.py > $R/ab18_bits.log 2>&1; echo "bits rc=$?"
tail -3 $R/ab18_bits.log
ROWS=1,64,132,264,1024,4096 PHASE=time timeout 240 python3 benchmarks/results/lead_s17_ab.py > $R/ab18_time.log 2>&1; echo "time rc=$?"
tail -20 $R/ab18_time.log
timeout 200 python3 benchmarks/results/lead_s18_fastpair.py > $R/fastpair18.log 2>&1; echo "fastpair rc=$?"
tail -24 $R/fastpair18.log
