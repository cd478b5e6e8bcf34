#!/usr/bin/env bash
# Twenty-seventh session, call 3 (issue 11): the fourth persistent design
# (persistent_items_s27.patch: rings running on across a program's items, consumer 0 copying
# the next Q once consumer 1 has read its output back) against main by ab_patch.sh: bits on
# four format pairs, times at T = 132..4096 in one process, and the attention gpu suite on the
# patched tree if it is at most 0.99 of main's time at T = 1024 and 4096. Carry [".whl"].
set -u
cd "$(dirname "$0")/../.."
PATCH=packages/ds41-attention/scripts/lab/persistent_items_s27.patch NAME=ps TAG=s27c3 \
  ROWS=132,264,1024,2112,4096 GAIN=0.99 OUT=${OUT:-/tmp/ab_patch} \
  bash packages/ds41-attention/scripts/ab_patch.sh
