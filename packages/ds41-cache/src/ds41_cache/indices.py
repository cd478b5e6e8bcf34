"""Per-row cache slots for sparse attention: `sparse_paged_indices` (SPEC section 7).

A row `t` (request `r`, position `p`) attends to the window positions
`lo = max(0, p - W + 1, replay_start[r]) .. p` (ascending, then -1 to width `W`) and to the
compressed entries of its top-k row that are visible, `0 <= e < n(p) = (p + 1) // ratio`
(kept in their top-k order, valid first, then -1). A padding row (`r = -1`) has lengths 0 and
only -1. A row's outputs depend on `(r, p)`, the block tables and its top-k row only.
"""

from __future__ import annotations

import torch

from .backend import Backend, resolve_backend
from .ops.indices import naive


def sparse_paged_indices(
    req_idx: torch.Tensor,
    pos: torch.Tensor,
    swa_block_table: torch.Tensor,
    window: int,
    replay_start: torch.Tensor,
    topk_entries: torch.Tensor | None,
    comp_block_table: torch.Tensor | None,
    ratio: int,
    *,
    swa_page_size: int,
    comp_page_size: int,
    backend: Backend = "auto",
    validate: bool = True,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """Window and compressed-cache slots of every token row.

    req_idx: int32 `[T]` (-1 = padding row); pos: int32 `[T]`; swa_block_table: int32
    `[R, P]`; replay_start: int32 `[R]`; topk_entries: int32 `[T, K]` (ascending, -1 padded)
    or None; comp_block_table: int32 `[R, Pc]` (needed when ratio > 0 and top-k is given).
    Returns `swa_slots: int32 [T, window]`, `swa_lens: int32 [T]`, `comp_slots: int32 [T, K]`
    and `comp_lens: int32 [T]` (both None when `ratio == 0` or `topk_entries is None`).

    `validate=True` also checks value ranges (host syncs) and raises IndexError, on every
    backend, when a slot is needed where the block table holds -1 (or past its columns).
    With `validate=False` nothing syncs (CUDA-graph safe) and every backend gives the same
    outputs: such a slot comes out as -1 *inside* the row's length (the lengths count the
    positions/entries the row reads, not the pages that exist), and out-of-range inputs never
    make a kernel read outside the tables: a req_idx outside [0, R) is a padding row, a
    position or entry past the table's columns is a missing page.
    """
    _check(
        req_idx,
        pos,
        swa_block_table,
        window,
        replay_start,
        topk_entries,
        comp_block_table,
        ratio,
        swa_page_size,
        comp_page_size,
    )
    if validate:
        _check_values(req_idx, pos, swa_block_table, replay_start, topk_entries)
    args = (
        req_idx,
        pos,
        swa_block_table,
        window,
        replay_start,
        topk_entries,
        comp_block_table,
        ratio,
        swa_page_size,
        comp_page_size,
    )
    if resolve_backend(backend, req_idx.device) == "triton":
        from .ops.indices import triton_kernels

        out = triton_kernels.sparse_paged_indices(*args)
        if validate:
            _raise_if_missing(_missing_from_outputs(*out), req_idx, pos)
        return out
    swa, swa_len, comp, comp_len, missing = naive.sparse_paged_indices(*args)
    if validate:
        _raise_if_missing(missing, req_idx, pos)
    # The reference computes every element of its outputs, so they are returned as they are.
    return swa, swa_len, comp, comp_len


def _missing_from_outputs(
    swa: torch.Tensor,
    swa_len: torch.Tensor,
    comp: torch.Tensor | None,
    comp_len: torch.Tensor | None,
) -> torch.Tensor:
    """Rows with a -1 slot inside their length: a needed page the block table lacks (a slot
    that exists is `page * page_size + offset >= 0`). bool [T]."""
    j = torch.arange(swa.shape[1], device=swa.device)
    missing = ((swa < 0) & (j < swa_len[:, None])).any(dim=1)
    if comp is not None and comp_len is not None:
        k = torch.arange(comp.shape[1], device=comp.device)
        missing |= ((comp < 0) & (k < comp_len[:, None])).any(dim=1)
    return missing


def _raise_if_missing(missing: torch.Tensor, req_idx: torch.Tensor, pos: torch.Tensor) -> None:
    if bool(missing.any()):
        row = int(torch.nonzero(missing)[0, 0])
        raise IndexError(
            f"row {row} (req_idx {int(req_idx[row])}, pos {int(pos[row])}) needs a page its "
            f"block table does not hold (-1 or past the table's columns): ensure() the pages "
            f"before building indices"
        )


def _check(
    req_idx: torch.Tensor,
    pos: torch.Tensor,
    swa_block_table: torch.Tensor,
    window: int,
    replay_start: torch.Tensor,
    topk_entries: torch.Tensor | None,
    comp_block_table: torch.Tensor | None,
    ratio: int,
    swa_page_size: int,
    comp_page_size: int,
) -> None:
    for name, value in (
        ("window", window),
        ("swa_page_size", swa_page_size),
        ("comp_page_size", comp_page_size),
    ):
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if not isinstance(ratio, int) or isinstance(ratio, bool) or ratio < 0:
        raise ValueError(f"ratio must be an int >= 0, got {ratio!r}")
    if req_idx.dim() != 1:
        raise ValueError(f"req_idx must be 1-D [T], got shape {list(req_idx.shape)}")
    t = req_idx.shape[0]
    tensors: dict[str, tuple[torch.Tensor, int | None]] = {
        "req_idx": (req_idx, 1),
        "pos": (pos, 1),
        "swa_block_table": (swa_block_table, 2),
        "replay_start": (replay_start, 1),
    }
    use_comp = ratio > 0 and topk_entries is not None
    if use_comp:
        assert topk_entries is not None
        if comp_block_table is None:
            raise ValueError(
                "comp_block_table must be an int32 [R, Pc] tensor when ratio > 0 "
                "and topk_entries is given, got None"
            )
        tensors["topk_entries"] = (topk_entries, 2)
        tensors["comp_block_table"] = (comp_block_table, 2)
    for name, (x, ndim) in tensors.items():
        if x.dtype != torch.int32 or x.dim() != ndim:
            shape = "[T]" if ndim == 1 else "[rows, cols]"
            raise TypeError(f"{name} must be int32 {shape}, got {x.dtype} {list(x.shape)}")
        if x.device != req_idx.device:
            raise ValueError(f"{name} is on {x.device}, req_idx on {req_idx.device}")
    if pos.shape[0] != t:
        raise ValueError(f"pos must be int32 [{t}] like req_idx, got {list(pos.shape)}")
    num_req = swa_block_table.shape[0]
    if tuple(replay_start.shape) != (num_req,) or swa_block_table.shape[1] == 0 or num_req == 0:
        raise ValueError(
            f"replay_start must be int32 [R] with R = swa_block_table rows ({num_req}), "
            f"got {list(replay_start.shape)} (and the table needs >= 1 row and column)"
        )
    if use_comp:
        assert topk_entries is not None and comp_block_table is not None
        if topk_entries.shape[0] != t or topk_entries.shape[1] == 0:
            raise ValueError(
                f"topk_entries must be int32 [{t}, K>0], got {list(topk_entries.shape)}"
            )
        if comp_block_table.shape[0] != num_req or comp_block_table.shape[1] == 0:
            raise ValueError(
                f"comp_block_table must be int32 [{num_req}, Pc>0] (one row per request), "
                f"got {list(comp_block_table.shape)}"
            )


def _check_values(
    req_idx: torch.Tensor,
    pos: torch.Tensor,
    swa_block_table: torch.Tensor,
    replay_start: torch.Tensor,
    topk_entries: torch.Tensor | None,
) -> None:
    """Value-range checks (host syncs)."""
    if req_idx.numel() == 0:
        return
    num_req = swa_block_table.shape[0]
    lo, hi = int(req_idx.min()), int(req_idx.max())
    if lo < -1 or hi >= num_req:
        raise IndexError(f"req_idx must lie in [-1, {num_req}), got values in [{lo}, {hi}]")
    real = req_idx >= 0
    if not bool(real.any()):
        return
    p = pos[real]
    if int(p.min()) < 0:
        raise ValueError(f"pos must be >= 0 on non-padding rows, got {int(p.min())}")
    start = replay_start[req_idx[real].to(torch.int64)]
    late = start > p
    if bool(late.any()):
        i = int(torch.nonzero(late)[0, 0])
        raise ValueError(
            f"replay_start of request {int(req_idx[real][i])} is {int(start[i])}, past the "
            f"position {int(p[i])} of a row of it (replay_start must be <= pos)"
        )
