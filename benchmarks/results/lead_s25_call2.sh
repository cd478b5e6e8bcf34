#!/usr/bin/env bash
# Twenty-fifth session, call 2 (issue 11): call 1's A/B again with GAIN=1.0, so that the
# patch is applied and the attention, runner and integration gpu suites run on it (call 1's
# times were 0.992-0.996 of main's at T = 1024 / 4096, above ab_patch.sh's default 0.995 at
# one point). The patch is commit 4be87f4 (the file left scripts/lab when it was adopted).
# Carry [".whl"].
set -u
cd "$(dirname "$0")/../.."
PATCH=packages/ds41-attention/scripts/lab/softmax_base2.patch NAME=b2 TAG=s25c2 BITS=new \
  RUNNER=1 GAIN=1.0 OUT=${OUT:-/tmp/ab_patch} bash packages/ds41-attention/scripts/ab_patch.sh
