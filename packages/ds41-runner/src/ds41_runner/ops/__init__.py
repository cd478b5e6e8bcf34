"""Batch-invariant building blocks of the runner: linear, RMSNorm, log-softmax, sampling.

Each op pairs a readable torch path with a Triton kernel (`matmul/`, `rowwise/`). In mode "bi"
a row's result depends on that row alone, never on how many rows share the call or where the
row sits; mode "fast" uses plain torch ops.
"""
