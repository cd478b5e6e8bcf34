#!/usr/bin/env bash
# Twenty-fifth session, call 7 (issue 11): the producer's copies arriving on the raw slot's
# landed barrier asynchronously (lab patch async_landed.patch: cp.async.mbarrier.arrive.noinc
# a thread, no per-tile wait_group, thread barrier and elected arrival on the producer's
# chain), by ab_patch.sh: bits on four format pairs, times, the attention suite if adopted.
# Carry [".whl"].
set -u
cd "$(dirname "$0")/../.."
PATCH=packages/ds41-attention/scripts/lab/async_landed.patch NAME=al TAG=s25c7 \
  OUT=${OUT:-/tmp/ab_patch} bash packages/ds41-attention/scripts/ab_patch.sh
