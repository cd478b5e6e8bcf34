"""`index_logits`: the unfused paged indexer logits (SPEC section 6)."""

from __future__ import annotations

import torch

from ds41_cache.backend import interpreter_active, resolve_backend
from ds41_cache.outputs import empty
from ds41_cache.paged import PagedCache

from ._checks import check_index_cache, check_positive_int, check_rows_in_table, check_tensor
from .ops.logits.naive import paged_logits_torch


def check_paged_inputs(
    q: torch.Tensor,
    weights: torch.Tensor,
    key_cache: PagedCache,
    block_table: torch.Tensor,
    req_idx: torch.Tensor,
    pos: torch.Tensor,
    ratio: int,
    candidates: torch.Tensor | None,
    validate: bool,
) -> None:
    """Shape/dtype checks of the paged indexer inputs; with `validate`, value checks too (finite
    q and weights, request ids, positions and the pages they use)."""
    check_tensor(q, "q", dtypes=(torch.bfloat16,), ndim=3)
    t, hi, di = q.shape
    dev = q.device
    if di <= 0 or di & (di - 1) or di % 32:
        raise ValueError(f"q head dim must be a power of two and a multiple of 32, got {di}")
    check_tensor(weights, "weights", dtypes=(torch.float32,), ndim=2, device=dev)
    if tuple(weights.shape) != (t, hi):
        raise ValueError(f"weights must have shape {[t, hi]}, got {list(weights.shape)}")
    check_index_cache(key_cache, di)
    if key_cache.device != dev:
        raise ValueError(f"key_cache must be on {dev}, got {key_cache.device}")
    check_tensor(block_table, "block_table", dtypes=(torch.int32,), ndim=2, device=dev)
    check_tensor(req_idx, "req_idx", dtypes=(torch.int32,), ndim=1, device=dev)
    check_tensor(pos, "pos", dtypes=(torch.int32,), ndim=1, device=dev)
    for name, x in (("req_idx", req_idx), ("pos", pos)):
        if x.shape[0] != t:
            raise ValueError(f"{name} must have shape {[t]}, got {list(x.shape)}")
    check_positive_int(ratio, "ratio")
    if candidates is not None:
        check_tensor(candidates, "candidates", dtypes=(torch.bool,), ndim=2, device=dev)
        if candidates.shape[0] != t:
            raise ValueError(f"candidates must have {t} rows, got shape {list(candidates.shape)}")
    if validate:
        # A NaN or inf query/weight makes NaN scores, whose order no backend defines: reject
        # them here, before any backend runs, so every backend behaves the same.
        for name, x in (("q", q), ("weights", weights)):
            if x.numel() and not bool(torch.isfinite(x).all()):
                raise ValueError(f"{name} must be finite (no NaN or inf) when validate=True")
        check_rows_in_table(
            block_table, req_idx, pos, ratio, key_cache.page_size, key_cache.num_pages
        )


def index_logits(
    q: torch.Tensor,
    weights: torch.Tensor,
    key_cache: PagedCache,
    block_table: torch.Tensor,
    req_idx: torch.Tensor,
    pos: torch.Tensor,
    ratio: int,
    *,
    num_entries: int | None = None,
    candidates: torch.Tensor | None = None,
    out_dtype: torch.dtype = torch.float32,
    backend: str = "auto",
    validate: bool = True,
) -> torch.Tensor:
    """Paged indexer logits -> `out_dtype` [T, N] (N = num_entries, default P * page_size).

    q: [T, Hi, Di] bf16 (MXFP4-dequantized queries); weights: [T, Hi] f32 head weights;
    key_cache: index keys (`mxfp4` or `fp8_index`) by entry, paged through block_table:
    int32 [R, P]; req_idx, pos: int32 [T] (req_idx -1 = padding row, all -inf). Entry `s` of
    row t is scored iff `s < n(p) = (p + 1) // ratio`, else `-inf`; with `candidates` (bool
    [T, Nc]) entries outside the mask (or at `s >= Nc`) are `-inf` too. `out_dtype` bf16 clamps
    finite scores to the bf16 range, so they stay finite, and keeps `-inf`.
    """
    check_paged_inputs(
        q, weights, key_cache, block_table, req_idx, pos, ratio, candidates, validate
    )
    if out_dtype not in (torch.float32, torch.bfloat16):
        raise TypeError(f"out_dtype must be float32 or bfloat16, got {out_dtype}")
    n = block_table.shape[1] * key_cache.page_size if num_entries is None else num_entries
    if n < 0:
        raise ValueError(f"num_entries must be >= 0, got {n}")
    which = resolve_backend(backend, q.device)
    if which == "torch":
        return paged_logits_torch(
            q, weights, key_cache, block_table, req_idx, pos, ratio, n, candidates, out_dtype
        )
    from .ops.logits.gluon_launch import paged_logits_gpu

    out = empty((q.shape[0], n), out_dtype, q.device)
    paged_logits_gpu(
        q.contiguous(),
        weights.contiguous(),
        key_cache,
        block_table.contiguous(),
        req_idx,
        pos,
        ratio,
        out,
        candidates.contiguous() if candidates is not None else None,
        upcast=interpreter_active(),
    )
    return out
