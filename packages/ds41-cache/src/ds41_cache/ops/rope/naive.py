"""Torch reference of the in-place RoPE: `rope.rotate_last` written back over the rope part."""

from __future__ import annotations

import torch

from ...rope import rotate_last


def rope_inplace(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, inverse: bool
) -> torch.Tensor:
    """Rotate the last R = 2 * cos.shape[-1] channels of `x: [N, ..., D]` in place (the fp32
    rotation of `apply_rope`, cast back to x.dtype) and return `x`; `cos`, `sin`: f32
    `[N, R/2]`."""
    r = 2 * cos.shape[-1]
    x[..., x.shape[-1] - r :] = rotate_last(x, cos, sin, inverse)
    return x
