"""RMSNorm, fp32 math per row: `y = x * rsqrt(mean(x^2) + eps) * w`, cast to `out_dtype`."""

from __future__ import annotations

import torch

from ds41_cache.backend import interpreter_active, resolve_backend
from ds41_cache.outputs import empty

from .rowwise.naive import UNMARKED, mark_nonfinite_torch, rmsnorm_torch, row_sum

__all__ = ["UNMARKED", "residual_rmsnorm", "rmsnorm", "rmsnorm_torch", "row_sum"]


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
    # The kernel takes a row stride: a column range of a wider projection (the attention's
    # fused `wq_a_kv` output) is read in place; only a non-unit column stride is copied.
    x = x if x.stride(1) == 1 else x.contiguous()
    return launch_rmsnorm(x, weight.contiguous(), eps, out, interpreter_active())


def residual_rmsnorm(
    x: torch.Tensor,
    delta: torch.Tensor | None,
    weight: torch.Tensor | None,
    eps: float,
    *,
    nonfinite: torch.Tensor | None = None,
    stage: int = 0,
    backend: str = "auto",
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The step between two blocks, in one launch on the Triton backend:

    1. `s = x + delta` (bf16 `[M, D]` each; torch's bf16 add), or `s = x` without `delta`;
    2. with `nonfinite: int64 [M]`: `nonfinite[t] = stage` for rows of `s` holding a NaN/inf
       that no earlier stage marked (`UNMARKED`), no host sync;
    3. with `weight: [D]`: `h = rmsnorm(s, weight, eps)` (bf16, the same bits).

    Returns `(s, h)` (`h` None without `weight`). The torch path runs the same steps as
    separate ops; both give the bits of `x + delta` followed by `rmsnorm`.
    """
    if x.dim() != 2 or x.dtype != torch.bfloat16:
        raise ValueError(f"x must be bf16 [M, D], got {x.dtype} {list(x.shape)}")
    if delta is not None and (delta.shape != x.shape or delta.dtype != torch.bfloat16):
        raise ValueError(
            f"delta must be bf16 {list(x.shape)} like x, got {delta.dtype} {list(delta.shape)}"
        )
    if weight is not None and weight.shape != (x.shape[1],):
        raise ValueError(f"weight must be [{x.shape[1]}], got {list(weight.shape)}")
    if nonfinite is not None and (
        nonfinite.dtype != torch.int64 or tuple(nonfinite.shape) != (x.shape[0],)
    ):
        raise ValueError(
            f"nonfinite must be int64 [{x.shape[0]}], got {nonfinite.dtype} {list(nonfinite.shape)}"
        )
    if resolve_backend(backend, x.device) == "torch" or x.shape[0] == 0:
        total = x if delta is None else x + delta
        if nonfinite is not None:
            mark_nonfinite_torch(nonfinite, total, stage)
        h = None if weight is None else rmsnorm(total, weight, eps, backend=backend)
        return total, h
    from .rowwise.triton_kernels import launch_residual_rmsnorm

    if x.stride(1) != 1 or (delta is not None and delta.stride(1) != 1):
        x = x.contiguous()
        delta = None if delta is None else delta.contiguous()
    total = x if delta is None else empty(tuple(x.shape), torch.bfloat16, x.device)
    h = None if weight is None else empty(tuple(x.shape), torch.bfloat16, x.device)
    launch_residual_rmsnorm(
        x, delta, None if weight is None else weight.contiguous(), eps,
        None if delta is None else total, h, nonfinite, stage,
    )  # fmt: skip
    return total, h
