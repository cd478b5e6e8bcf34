"""`visible_entries`: how many compressed entries a row can see, n(p) = (p + 1) // ratio."""

from __future__ import annotations

import torch

from ds41_cache.backend import resolve_backend
from ds41_cache.outputs import empty

from ._checks import check_positive_int, check_tensor
from .ops.logits.naive import visible_entries as visible_entries_torch


def visible_entries(
    req_idx: torch.Tensor, pos: torch.Tensor, ratio: int, *, backend: str = "auto"
) -> torch.Tensor:
    """int32 [T]: n(p) = floor((p + 1) / ratio) for each row, 0 for padding rows
    (`req_idx < 0`): the `n_visible` of `index_topk` and `candidate_blocks` (SPEC section 6).

    req_idx, pos: int32 [T] on one device; ratio: the compression ratio (> 0). The Triton
    backend is one launch (the torch expression is seven elementwise kernels); both give the
    same values.
    """
    check_tensor(req_idx, "req_idx", dtypes=(torch.int32,), ndim=1)
    check_tensor(pos, "pos", dtypes=(torch.int32,), ndim=1, device=req_idx.device)
    if pos.shape != req_idx.shape:
        raise ValueError(f"pos must have shape {list(req_idx.shape)}, got {list(pos.shape)}")
    check_positive_int(ratio, "ratio")
    if resolve_backend(backend, req_idx.device) == "torch":
        return visible_entries_torch(req_idx, pos, ratio)
    from .ops.topk.triton_kernels import visible_counts

    return visible_counts(req_idx, pos, ratio, empty)
