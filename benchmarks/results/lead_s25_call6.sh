#!/usr/bin/env bash
# Twenty-fifth session, call 6 (issue 11): the next program's first records prefetched into
# L2 by the idle producer (lab patch prefetch_first_records_s25.patch; the eighteenth
# session's version spilled in the producer and was 1-3% slower; this port compiles without
# spills), by ab_patch.sh: bits on four format pairs, times, the suites if adopted.
# Carry [".whl"].
set -u
cd "$(dirname "$0")/../.."
PATCH=packages/ds41-attention/scripts/lab/prefetch_first_records_s25.patch NAME=pfr TAG=s25c6 \
  OUT=${OUT:-/tmp/ab_patch} bash packages/ds41-attention/scripts/ab_patch.sh
