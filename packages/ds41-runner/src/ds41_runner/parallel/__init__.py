"""Tensor parallelism over `torch.distributed` (NCCL on GPUs, gloo on the CPU).

`torchrun --nproc-per-node=N -m ds41_runner parallel.tp=N ...`: each process builds its
rank's shard of the model (`TPModel`, split in `shard`) and runs the same engine. In mode "bi"
the ranks exchange only copies (all_gather), never sums, and add partial results in the order
of the single-process kernels: tokens and log-probs are bitwise those of `parallel.tp=1`.
"""

from __future__ import annotations

from .dist import TPGroup, current, init_tensor_parallel, rank, shutdown

__all__ = ["TPGroup", "current", "init_tensor_parallel", "rank", "shutdown"]
