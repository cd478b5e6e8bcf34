"""RoPE on the runner's fresh activations, in place, with a step's cos/sin computed once.

`ds41_cache.rope.apply_rope` recomputes `cos`/`sin` of `pos * f` in every call and returns a
new tensor built with `torch.cat` (a copy of every channel). A decode step calls it twice per
layer on `[T, H, D]` tensors the layer has just produced (the queries, the attention output),
so the runner rotates the last R channels of those tensors in place instead, with the same
fp32 operations (`rope_cos_sin`, `rotate_pairs`, then the cast): the result is bitwise
`apply_rope`'s (tested).
"""

from __future__ import annotations

import torch

from ds41_cache.rope import rope_cos_sin, rotate_pairs


def step_cos_sin(positions: torch.Tensor, freqs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`positions: int [T]`, `freqs: f32 [R/2]` -> (cos, sin) f32 `[T, R/2]`, the tables
    `apply_rope` computes (`rope_cos_sin`)."""
    return rope_cos_sin(positions, freqs)


def rope_(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, *, inverse: bool = False
) -> torch.Tensor:
    """Rotate the last R = 2 * cos.shape[-1] channels of `x: [T, ..., D]` in place and return
    `x`; `cos`, `sin`: f32 `[T, R/2]` from `step_cos_sin`. Bitwise
    `apply_rope(x, positions, freqs, inverse=inverse)`."""
    r = 2 * cos.shape[-1]
    d = x.shape[-1]
    if cos.shape != sin.shape or cos.dim() != 2 or cos.shape[0] != x.shape[0] or r > d:
        raise ValueError(
            f"cos and sin must be [{x.shape[0]}, R/2] with R <= {d}, got {list(cos.shape)} "
            f"and {list(sin.shape)}"
        )
    shape = (x.shape[0],) + (1,) * (x.dim() - 2) + (r // 2,)
    c, s = cos.reshape(shape), sin.reshape(shape)
    pairs = x[..., d - r :].to(torch.float32).reshape(*x.shape[:-1], r // 2, 2)
    y0, y1 = rotate_pairs(pairs[..., 0], pairs[..., 1], c, s, inverse)
    x[..., d - r :] = torch.stack((y0, y1), dim=-1).flatten(-2).to(x.dtype)
    return x
