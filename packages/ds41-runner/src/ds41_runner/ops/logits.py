"""Row-wise log-softmax over the vocabulary in fp32, in a fixed order per row."""

from __future__ import annotations

import torch

from ds41_cache.backend import resolve_backend
from ds41_cache.outputs import empty

from .rowwise.naive import log_softmax_torch


def log_softmax(logits: torch.Tensor, *, backend: str = "auto") -> torch.Tensor:
    """`logits: [M, V]` -> fp32 `[M, V]` log-probabilities, `x - max - log(sum exp(x - max))`."""
    if logits.dim() != 2:
        raise ValueError(f"logits must be [M, V], got {list(logits.shape)}")
    x = logits.to(torch.float32)
    if resolve_backend(backend, x.device) == "torch":
        return log_softmax_torch(x)
    from .rowwise.triton_kernels import launch_log_softmax

    out = empty(tuple(x.shape), torch.float32, x.device)
    if x.shape[0] == 0:
        return out
    return launch_log_softmax(x.contiguous(), out)
