"""Torch paths of the row-wise ops: every row reduced in a fixed order that depends on the row
length alone (elementwise ops only), so a row's bits never depend on the row count."""

from __future__ import annotations

import torch


def row_sum(x: torch.Tensor) -> torch.Tensor:
    """`x: f32 [M, N]` -> `[M, 1]`: each row summed in a fixed pairwise order.

    The row is zero-padded to a power of two (adding zeros is exact), then halves are added
    elementwise until one column is left: the order depends on N alone, never on M, and uses
    only elementwise ops (no library reduction whose blocking could follow the shape).
    """
    n = x.shape[-1]
    width = 1 << max(0, (n - 1).bit_length())
    if width != n:
        x = torch.nn.functional.pad(x, (0, width - n))
    while width > 1:
        width //= 2
        x = x[:, :width] + x[:, width : 2 * width]
    return x


def rmsnorm_torch(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """fp32 `x * rsqrt(sum(x^2) / D + eps) * w` (the CPU path; fixed-order row sums)."""
    x32 = x.to(torch.float32)
    ms = row_sum(x32 * x32) / x32.shape[-1]
    # 1 / sqrt: both correctly rounded, so a row's factor is the same bits whether torch
    # evaluates it in a vector lane or in the scalar tail (which depends on the row count).
    inv = 1.0 / torch.sqrt(ms + eps)
    return x32 * inv * weight.to(torch.float32)


UNMARKED = -1
"""A row no stage has marked non-finite (`mark_nonfinite_torch`)."""


def mark_nonfinite_torch(first: torch.Tensor, x: torch.Tensor, stage: int) -> None:
    """`first[t] = stage` for rows of `x: [T, D]` with a NaN/inf that no earlier stage marked
    (`first: int64 [T]`, UNMARKED = none yet); device ops only, no host sync."""
    bad = ~torch.isfinite(x).all(dim=-1)
    first.copy_(torch.where(bad & (first == UNMARKED), stage, first))
