"""Torch reference of the row RMSNorm (`compressor.rms_norm`), fp32 math, elementwise ops only."""

from __future__ import annotations

import torch


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """`x: [T, D]` -> bf16 `[T, D]`: `bf16((x * rsqrt(ms + eps)) * w)`, `ms` the halving fold
    of `x * x` divided by D (see `compressor.rms_norm`)."""
    x = x.to(torch.float32)
    sq = x * x
    width = sq.shape[-1]
    while width > 1:
        half = width // 2
        folded = sq[:, :half] + sq[:, half : 2 * half]
        if width % 2:
            folded = torch.cat([folded[:, :1] + sq[:, 2 * half :], folded[:, 1:]], dim=1)
        sq, width = folded, half
    ms = sq[:, 0:1] / x.shape[-1]
    return ((x * torch.rsqrt(ms + eps)) * weight.to(torch.float32)).to(torch.bfloat16)
