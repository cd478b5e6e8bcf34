#!/usr/bin/env bash
# Prepared in the twenty-third session for the next one (issue 11): main (a446d05 or later)
# against scripts/lab/validity_kstep.patch (the keys' validity as a 17th k-step of Q.K^T), by
# scripts/ab_patch.sh: bits on four format pairs, times at T = 1..4096 in one process, and
# the attention gpu suite on the patched tree if the bits are equal and it is >= 0.5% faster
# at T = 1024 and 4096 under both timings. Carry [".whl"]. About 5 minutes with the suite.
PATCH=packages/ds41-attention/scripts/lab/validity_kstep.patch NAME=vk TAG=s24p \
  bash packages/ds41-attention/scripts/ab_patch.sh
