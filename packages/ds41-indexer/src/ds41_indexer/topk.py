"""`index_topk`: the reference selector every backend agrees with bitwise (SPEC section 6)."""

from __future__ import annotations

import torch

from ds41_cache.backend import resolve_backend
from ds41_cache.outputs import empty

from ._checks import check_positive_int, check_tensor
from .ops.topk.naive import index_topk_torch


def check_topk_inputs(
    logits: torch.Tensor, n_visible: torch.Tensor, k: int, validate: bool
) -> None:
    check_tensor(logits, "logits", dtypes=(torch.float32, torch.bfloat16), ndim=2)
    t, n = logits.shape
    check_tensor(n_visible, "n_visible", dtypes=(torch.int32,), ndim=1, device=logits.device)
    if n_visible.shape[0] != t:
        raise ValueError(f"n_visible must have shape {[t]}, got {list(n_visible.shape)}")
    check_positive_int(k, "k")
    if validate and t:
        lo, hi = int(n_visible.min()), int(n_visible.max())
        if lo < 0 or hi > n:
            raise ValueError(f"n_visible must lie in [0, {n}] (logits columns), got [{lo}, {hi}]")
        if bool(torch.isnan(logits).any()):
            raise ValueError("logits must not contain NaN")


def index_topk(
    logits: torch.Tensor,
    n_visible: torch.Tensor,
    k: int,
    *,
    backend: str = "auto",
    validate: bool = True,
) -> torch.Tensor:
    """Per-row top-k entries -> int32 [T, k].

    logits: f32 (or bf16) [T, N]; n_visible: int32 [T] (entries `e < n_visible[t]` are
    candidates, whatever their score, `-inf` included). Row t takes `min(k, n_visible[t])`
    entries by descending score, ties to the lower entry index (-0.0 ties with +0.0), emits
    them sorted ascending, then -1 up to width k. NaN scores are not supported.
    """
    check_topk_inputs(logits, n_visible, k, validate)
    if resolve_backend(backend, logits.device) == "torch":
        return index_topk_torch(logits, n_visible, k)
    from .ops.topk.triton_kernels import index_topk_triton

    return index_topk_triton(logits.contiguous(), n_visible.contiguous(), k, empty)
