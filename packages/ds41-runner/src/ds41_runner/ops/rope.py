"""RoPE on the runner's fresh activations, in place, with a step's cos/sin computed once.

`ds41_cache.rope.apply_rope` recomputes `cos`/`sin` of `pos * f` in every call and returns a
new tensor built with `torch.cat` (a copy of every channel). A decode step calls it twice per
layer on `[T, H, D]` tensors the layer has just produced (the queries, the attention output),
so the runner rotates the last R channels of those tensors in place instead, with the same
fp32 operations (`rope_cos_sin`, `rotate_pairs`, then the cast): the result is bitwise
`apply_rope`'s (tested). On the Triton backend a bf16 tensor is rotated by one kernel launch
(`elementwise/triton_kernels.py`); the torch path takes ten.
"""

from __future__ import annotations

import torch

from ds41_cache.backend import resolve_backend
from ds41_cache.rope import rope_cos_sin

from .elementwise.naive import rope_torch_


def step_cos_sin(positions: torch.Tensor, freqs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`positions: int [T]`, `freqs: f32 [R/2]` -> (cos, sin) f32 `[T, R/2]`, the tables
    `apply_rope` computes (`rope_cos_sin`)."""
    return rope_cos_sin(positions, freqs)


def rope_(
    x: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    *,
    inverse: bool = False,
    backend: str = "auto",
) -> torch.Tensor:
    """Rotate the last R = 2 * cos.shape[-1] channels of `x: [T, ..., D]` in place and return
    `x`; `cos`, `sin`: f32 `[T, R/2]` from `step_cos_sin`. Bitwise
    `apply_rope(x, positions, freqs, inverse=inverse)`. `backend`: "auto" (Triton on CUDA
    tensors), "triton" or "torch"; the Triton kernel serves bf16 `x` of 2 or 3 dims that it can
    read as 4-byte words (`rope_words_ok`), the torch path everything else."""
    r = 2 * cos.shape[-1]
    d = x.shape[-1]
    if cos.shape != sin.shape or cos.dim() != 2 or cos.shape[0] != x.shape[0] or r > d:
        raise ValueError(
            f"cos and sin must be [{x.shape[0]}, R/2] with R <= {d}, got {list(cos.shape)} "
            f"and {list(sin.shape)}"
        )
    if cos.dtype != torch.float32 or sin.dtype != torch.float32:
        raise TypeError(f"cos and sin must be float32, got {cos.dtype} and {sin.dtype}")
    if (
        resolve_backend(backend, x.device) != "triton"
        or x.dtype != torch.bfloat16
        or x.dim() not in (2, 3)
        or x.numel() == 0
    ):
        return rope_torch_(x, cos, sin, inverse)
    from .elementwise.triton_kernels import launch_rope_inplace, rope_words_ok

    x3 = x if x.dim() == 3 else x.unsqueeze(1)
    if not rope_words_ok(x3, r // 2):
        return rope_torch_(x, cos, sin, inverse)
    launch_rope_inplace(x3, cos.contiguous(), sin.contiguous(), inverse)
    return x
