"""`linear(x, w)`: the runner's matmul, batch invariant in mode "bi"."""

from __future__ import annotations

from typing import Literal

import torch

from ds41_cache.alloc import empty
from ds41_cache.backend import interpreter_active, resolve_backend

from .matmul.naive import rowwise_matmul

Mode = Literal["bi", "fast"]
MODES: tuple[str, ...] = ("bi", "fast")
_FLOATS = (torch.bfloat16, torch.float16, torch.float32)


def check_mode(mode: str) -> None:
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")


def linear(
    x: torch.Tensor,
    w: torch.Tensor,
    *,
    mode: str = "bi",
    out_dtype: torch.dtype | None = None,
    fp32: bool = False,
    backend: str = "auto",
) -> torch.Tensor:
    """`x: [M, K]`, `w: [N, K]` -> `x @ w^T: [M, N]` (dtype `out_dtype`, default `x.dtype`).

    Accumulation is fp32. `fp32=True` upcasts both operands to fp32 first (the compressor's
    projections, SPEC section 5). Mode "bi": each row's result is independent of M and of the
    other rows (Triton: fixed tiles, no split-K; torch: per-row products). Mode "fast":
    `torch.matmul`, whose blocking may depend on M.
    """
    check_mode(mode)
    if x.dim() != 2 or w.dim() != 2:
        raise ValueError(
            f"x and w must be 2-D ([M, K], [N, K]), got {list(x.shape)}, {list(w.shape)}"
        )
    if x.shape[1] != w.shape[1]:
        raise ValueError(f"w must be [N, {x.shape[1]}] to match x's K, got {list(w.shape)}")
    if x.dtype not in _FLOATS or w.dtype not in _FLOATS:
        raise TypeError(f"x and w must be bf16/fp16/fp32, got {x.dtype}, {w.dtype}")
    if x.device != w.device:
        raise ValueError(f"w is on {w.device}, x on {x.device}")
    dtype = x.dtype if out_dtype is None else out_dtype
    if fp32:
        x, w = x.to(torch.float32), w.to(torch.float32)
    if mode == "fast":
        if x.dtype != w.dtype:
            w = w.to(x.dtype)
        return torch.matmul(x, w.T).to(dtype)
    if resolve_backend(backend, x.device) == "torch":
        return rowwise_matmul(x, w, dtype)
    from .matmul.triton_kernels import launch_matmul

    interp = interpreter_active()
    if x.dtype != w.dtype:
        x, w = x.to(torch.float32), w.to(torch.float32)
    out = empty((x.shape[0], w.shape[0]), dtype, x.device)
    if x.shape[0] == 0 or w.shape[0] == 0:
        return out
    ieee = x.dtype == torch.float32 or interp
    return launch_matmul(x, w, out, interp, ieee)
