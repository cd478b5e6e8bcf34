"""RMSNorm, fp32 math per row: `y = x * rsqrt(mean(x^2) + eps) * w`, cast to `out_dtype`."""

from __future__ import annotations

import torch

from ds41_cache.backend import interpreter_active, resolve_backend
from ds41_cache.outputs import empty

from .rowwise.naive import rmsnorm_torch, row_sum

__all__ = ["rmsnorm", "rmsnorm_torch", "row_sum"]


def rmsnorm(
    x: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    *,
    out_dtype: torch.dtype = torch.bfloat16,
    backend: str = "auto",
) -> torch.Tensor:
    """`x: [M, D]` any float, `weight: [D]` -> `[M, D]` `out_dtype` (fp32 math, per row)."""
    if x.dim() != 2:
        raise ValueError(f"x must be [M, D], got {list(x.shape)}")
    if weight.shape != (x.shape[1],):
        raise ValueError(f"weight must be [{x.shape[1]}], got {list(weight.shape)}")
    if resolve_backend(backend, x.device) == "torch":
        return rmsnorm_torch(x, weight, eps).to(out_dtype)
    from .rowwise.triton_kernels import launch_rmsnorm

    out = empty(tuple(x.shape), out_dtype, x.device)
    if x.shape[0] == 0:
        return out
    return launch_rmsnorm(x.contiguous(), weight.contiguous(), eps, out, interpreter_active())
