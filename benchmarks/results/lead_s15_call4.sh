#!/usr/bin/env bash
# Issue 11 lab: the cluster exchange probe, three exchange modes (global stores written out: Triton
# predicates stores of a cluster-replicated layout to CTA 0). Carry [".whl", ".dev_lead/s15_call4.sh"].
set -u
export PYTHONUNBUFFERED=1; unset TRITON_INTERPRET
export PYTHONPATH=$PWD/packages/ds41-attention/src
R=$OUT
{
timeout 60 python3 packages/ds41-attention/scripts/cluster_exchange_probe.py --offsets
timeout 150 python3 packages/ds41-attention/scripts/cluster_exchange_probe.py; echo "probe rc=$?"
} 2>&1 | tee $R/cluster_exchange_s15c4.log
