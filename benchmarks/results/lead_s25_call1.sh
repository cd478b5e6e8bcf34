#!/usr/bin/env bash
# Twenty-fifth session, call 1 (issue 11): the softmax in base 2 (the kernels take the scale
# times log2(e); P = ex2(fma(S, c, -m)) instead of a rounded multiply, a subtraction, a
# multiply by log2(e) and a non-ftz ex2: consumer 0's tile loop 537 -> 453 instructions,
# the pair kernel's Q.K^T warpgroup 365 -> 281, offline, no spills), by ab_patch.sh with
# BITS=new (the rounding changes, so adoption rests on the times, then the attention gpu
# suite checks float64 bounds and invariance on the patched tree) and the runner suites.
# The patch is commit 4be87f4 (the file left scripts/lab when it was adopted). Carry [".whl"].
set -u
cd "$(dirname "$0")/../.."
PATCH=packages/ds41-attention/scripts/lab/softmax_base2.patch NAME=b2 TAG=s25c1 BITS=new \
  RUNNER=1 OUT=${OUT:-/tmp/ab_patch} bash packages/ds41-attention/scripts/ab_patch.sh
