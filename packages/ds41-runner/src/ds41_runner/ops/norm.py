"""RMSNorm, fp32 math per row: `y = x * rsqrt(mean(x^2) + eps) * w`, cast to `out_dtype`."""

from __future__ import annotations

import torch

from ds41_cache.backend import interpreter_active, resolve_backend
from ds41_cache.outputs import empty

from .rowwise.naive import UNMARKED, mark_nonfinite_torch, rmsnorm_torch, row_sum

__all__ = [
    "UNMARKED",
    "embed_rmsnorm",
    "residual_rmsnorm",
    "rmsnorm",
    "rmsnorm_pair",
    "rmsnorm_torch",
    "row_sum",
]


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


def rmsnorm_pair(
    x1: torch.Tensor,
    w1: torch.Tensor,
    x2: torch.Tensor,
    w2: torch.Tensor,
    eps: float,
    *,
    backend: str = "auto",
) -> tuple[torch.Tensor, torch.Tensor]:
    """`(rmsnorm(x1, w1, eps), rmsnorm(x2, w2, eps))` (bf16), in one launch on the Triton
    backend: `x1: [M, D1]`, `x2: [M, D2]` (the same rows; e.g. two column ranges of one
    projection, read in place), each normalised by `rmsnorm`'s kernel body with its own width,
    block and weight, so the bits of the two separate calls. Two launches where the widths
    would take different warp counts; the torch path is the two calls."""
    if x1.dim() != 2 or x2.dim() != 2 or x1.shape[0] != x2.shape[0]:
        raise ValueError(
            f"x1 and x2 must be [M, D1] and [M, D2], got {list(x1.shape)} and {list(x2.shape)}"
        )
    for name, x, w in (("w1", x1, w1), ("w2", x2, w2)):
        if w.shape != (x.shape[1],):
            raise ValueError(f"{name} must be [{x.shape[1]}], got {list(w.shape)}")
    if resolve_backend(backend, x1.device) == "torch" or x1.shape[0] == 0:
        return rmsnorm(x1, w1, eps, backend=backend), rmsnorm(x2, w2, eps, backend=backend)
    from .rowwise.triton_kernels import launch_rmsnorm_pair, pair_warps_match

    if not pair_warps_match(x1.shape[1], x2.shape[1]):
        return rmsnorm(x1, w1, eps, backend=backend), rmsnorm(x2, w2, eps, backend=backend)
    x1 = x1 if x1.stride(1) == 1 else x1.contiguous()
    x2 = x2 if x2.stride(1) == 1 else x2.contiguous()
    out1 = empty(tuple(x1.shape), torch.bfloat16, x1.device)
    out2 = empty(tuple(x2.shape), torch.bfloat16, x2.device)
    launch_rmsnorm_pair(x1, w1.contiguous(), out1, x2, w2.contiguous(), out2, eps)
    return out1, out2


def embed_rmsnorm(
    tokens: torch.Tensor,
    req_idx: torch.Tensor,
    embed: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    *,
    nonfinite: torch.Tensor | None = None,
    stage: int = 0,
    backend: str = "auto",
) -> tuple[torch.Tensor, torch.Tensor]:
    """A step's first rows and their norm, in one launch on the Triton backend:

    1. `x = embed[tok]` with `tok = clamp(where(req_idx >= 0, tokens, 0), 0, V - 1)`
       (`tokens: int64 [M]`, `req_idx: int32 [M]`, `embed: bf16 [V, D]`);
    2. with `nonfinite: int64 [M]`: filled with `UNMARKED`, then `stage` on rows of `x` holding
       a NaN/inf;
    3. `h = rmsnorm(x, weight, eps)` (bf16).

    Returns `(x, h)`: the bits of those torch ops followed by `residual_rmsnorm(x, None,
    weight, ...)`, which the torch path runs."""
    if embed.dim() != 2 or embed.dtype != torch.bfloat16:
        raise ValueError(f"embed must be bf16 [V, D], got {embed.dtype} {list(embed.shape)}")
    if tokens.dim() != 1 or tokens.dtype != torch.int64 or req_idx.shape != tokens.shape:
        raise ValueError(
            f"tokens must be int64 [M] and req_idx [M], got {tokens.dtype} "
            f"{list(tokens.shape)} and {list(req_idx.shape)}"
        )
    m, (v, d) = tokens.shape[0], embed.shape
    if resolve_backend(backend, tokens.device) == "torch" or m == 0 or embed.stride(1) != 1:
        tok = torch.where(req_idx >= 0, tokens, torch.zeros_like(tokens)).clamp(0, v - 1)
        if nonfinite is not None:
            nonfinite.fill_(UNMARKED)
        x, h = residual_rmsnorm(
            embed[tok], None, weight, eps, nonfinite=nonfinite, stage=stage, backend=backend
        )
        assert h is not None
        return x, h
    if weight.shape != (d,):
        raise ValueError(f"weight must be [{d}], got {list(weight.shape)}")
    if nonfinite is not None and (nonfinite.dtype != torch.int64 or nonfinite.shape != (m,)):
        raise ValueError(
            f"nonfinite must be int64 [{m}], got {nonfinite.dtype} {list(nonfinite.shape)}"
        )
    from .rowwise.triton_kernels import launch_embed_rmsnorm

    x = empty((m, d), torch.bfloat16, tokens.device)
    h = empty((m, d), torch.bfloat16, tokens.device)
    launch_embed_rmsnorm(
        tokens.contiguous(), req_idx.contiguous(), embed, weight.contiguous(), eps, x, h,
        nonfinite, stage,
    )  # fmt: skip
    return x, h


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
