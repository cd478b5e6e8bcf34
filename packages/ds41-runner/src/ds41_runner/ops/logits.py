"""Row-wise log-softmax over the vocabulary in fp32, in a fixed order per row."""

from __future__ import annotations

import torch

from .vocab import log_softmax_segmented


def log_softmax(logits: torch.Tensor, *, backend: str = "auto") -> torch.Tensor:
    """`logits: [M, V]` -> fp32 `[M, V]` log-probabilities `x - lse`, with `lse` reduced over
    the vocabulary's fixed segments (`ops.vocab`): the bits a tensor-parallel run gets from
    its ranks' partials."""
    if logits.dim() != 2:
        raise ValueError(f"logits must be [M, V], got {list(logits.shape)}")
    return log_softmax_segmented(logits.to(torch.float32), backend=backend)
