"""Input validation shared by the public wrappers (errors name the argument and the expectation)."""

from __future__ import annotations

import torch

from ds41_cache.paged import PagedCache

INDEX_KEY_FORMATS = ("mxfp4", "fp8_index")


def check_tensor(
    x: object,
    name: str,
    *,
    dtypes: tuple[torch.dtype, ...],
    ndim: int,
    device: torch.device | None = None,
) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in dtypes:
        names = " or ".join(str(d).replace("torch.", "") for d in dtypes)
        raise TypeError(f"{name} must be {names}, got {str(x.dtype).replace('torch.', '')}")
    if x.dim() != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions, got shape {list(x.shape)}")
    if device is not None and x.device != device:
        raise ValueError(f"{name} must be on {device}, got {x.device}")
    return x


def check_shape(x: torch.Tensor, name: str, expected: tuple[int, ...]) -> None:
    if tuple(x.shape) != expected:
        raise ValueError(f"{name} must have shape {list(expected)}, got {list(x.shape)}")


def check_positive_int(v: object, name: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        raise ValueError(f"{name} must be a positive int, got {v!r}")
    return v


def check_index_cache(cache: object, head_dim: int) -> PagedCache:
    if not isinstance(cache, PagedCache):
        raise TypeError(f"key_cache must be a PagedCache, got {type(cache).__name__}")
    if cache.fmt not in INDEX_KEY_FORMATS:
        raise ValueError(f"key_cache.fmt must be one of {INDEX_KEY_FORMATS}, got {cache.fmt!r}")
    if cache.dim != head_dim:
        raise ValueError(f"key_cache.dim must equal the index head dim {head_dim}, got {cache.dim}")
    return cache


def check_rows_in_table(
    block_table: torch.Tensor,
    req_idx: torch.Tensor,
    pos: torch.Tensor,
    ratio: int,
    page_size: int,
    num_pages: int,
) -> None:
    """Host-syncing range checks of request ids, positions and the block-table pages they use."""
    if req_idx.numel() == 0:
        return
    n_req, n_cols = block_table.shape
    lo, hi = int(req_idx.min()), int(req_idx.max())
    if lo < -1 or hi >= n_req:
        raise IndexError(f"req_idx must lie in [-1, {n_req}), got values in [{lo}, {hi}]")
    if int(pos.min()) < 0:
        raise ValueError(f"pos must be >= 0, got min {int(pos.min())}")
    live = req_idx >= 0
    if not bool(live.any()):
        return
    n_vis = torch.div(pos[live].to(torch.int64) + 1, ratio, rounding_mode="floor")
    pages_needed = -(-n_vis // page_size)
    capacity = n_cols * page_size
    if int(n_vis.max()) > capacity:
        raise IndexError(
            f"pos beyond the block table: n(p) = (p+1)//ratio must be <= {capacity} "
            f"({n_cols} pages x {page_size} entries), got {int(n_vis.max())}"
        )
    cols = torch.arange(n_cols, device=block_table.device)
    used = cols[None, :] < pages_needed[:, None]
    pages = block_table[req_idx[live].to(torch.int64)]
    bad = used & ((pages < 0) | (pages >= num_pages))
    if bool(bad.any()):
        row, col = (int(v) for v in bad.nonzero()[0])
        raise IndexError(
            f"block_table entries used by live rows must lie in [0, {num_pages}); "
            f"page {col} of the request of live row {row} is {int(pages[row, col])}"
        )
