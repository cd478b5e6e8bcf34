"""Torch reference of the paged indexer logits (SPEC section 6).

`L[t, s] = sum_h w[t, h] * relu(q[t, h] . k[s])` for `s < n(p)`, `-inf` beyond, with keys decoded
from the paged index-key cache. Every element is computed by elementwise float64 operations in
a fixed order (channels ascending, then heads ascending) and rounded once to fp32, so a row's
values never depend on the other rows, the row count or the column range being computed.
"""

from __future__ import annotations

import torch

from ds41_cache.insert import gather
from ds41_cache.outputs import empty
from ds41_cache.paged import PagedCache

BF16_MAX = torch.finfo(torch.bfloat16).max


def decode_index_rows(cache: PagedCache, slots: torch.Tensor) -> torch.Tensor:
    """Decode index-key rows: slots int64 [...] (all valid) -> float64 [..., Di] (exact).

    Decoding is `ds41_cache`'s torch gather; every decoded value is exact in bf16, so the
    float64 widening loses nothing.
    """
    if cache.fmt not in ("mxfp4", "fp8_index"):
        raise ValueError(f"key_cache.fmt must be 'mxfp4' or 'fp8_index', got {cache.fmt!r}")
    rows = gather(cache, slots.reshape(-1), backend="torch", validate=False)
    return rows.to(torch.float64).reshape(*slots.shape, cache.dim)


def visible_entries(req_idx: torch.Tensor, pos: torch.Tensor, ratio: int) -> torch.Tensor:
    """int32 [T]: n(p) = (p + 1) // ratio, 0 for padding rows (req_idx < 0)."""
    n = torch.div(pos.to(torch.int64) + 1, ratio, rounding_mode="floor")
    return torch.where(req_idx >= 0, n, torch.zeros_like(n)).to(torch.int32)


def cast_logits(logits: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """fp32 -> `dtype`; for bf16 finite scores clamp to +-bf16 max and -inf stays -inf."""
    if dtype == torch.float32:
        return logits
    finite = torch.clamp(logits, -BF16_MAX, BF16_MAX)
    return torch.where(torch.isinf(logits), logits, finite).to(dtype)


def paged_logits_torch(
    q: torch.Tensor,
    weights: torch.Tensor,
    cache: PagedCache,
    block_table: torch.Tensor,
    req_idx: torch.Tensor,
    pos: torch.Tensor,
    ratio: int,
    num_entries: int,
    candidates: torch.Tensor | None,
    out_dtype: torch.dtype = torch.float32,
    entry_base: int = 0,
) -> torch.Tensor:
    """Logits of entries `entry_base + [0, num_entries)` -> `out_dtype` [T, num_entries]."""
    t_rows = q.shape[0]
    n_max = int(visible_entries(req_idx, pos, ratio).max()) if t_rows else 0
    width = max(0, min(num_entries, n_max - entry_base))
    if width < num_entries:  # columns no row can see are -inf: score only the others
        out = empty((t_rows, num_entries), torch.float32, q.device)
        out.fill_(float("-inf"))
        if width:
            out[:, :width] = paged_logits_torch(
                q,
                weights,
                cache,
                block_table,
                req_idx,
                pos,
                ratio,
                width,
                candidates,
                entry_base=entry_base,
            )
        return cast_logits(out, out_dtype)
    n_heads = q.shape[1]
    dev = q.device
    entries = entry_base + torch.arange(num_entries, device=dev, dtype=torch.int64)
    n_vis = visible_entries(req_idx, pos, ratio).to(torch.int64)
    valid = entries[None, :] < n_vis[:, None]
    if candidates is not None:
        in_mask = entries < candidates.shape[1]
        cand = candidates[:, entries.clamp(max=max(candidates.shape[1] - 1, 0))]
        keep = cand & in_mask[None, :]
    else:
        keep = torch.ones_like(valid)
    ps = cache.page_size
    rows = req_idx.clamp(min=0).to(torch.int64)
    col = torch.where(valid, entries[None, :] // ps, torch.zeros_like(valid, dtype=torch.int64))
    pages = block_table.to(torch.int64)[rows[:, None], col]
    slots = torch.where(valid, pages * ps + entries[None, :] % ps, torch.zeros_like(col))
    keys = decode_index_rows(cache, slots)  # [T, N, Di] float64
    keys = torch.where(valid[..., None], keys, torch.zeros_like(keys))
    qd = q.to(torch.float64)
    wd = weights.to(torch.float64)
    total = torch.zeros((t_rows, num_entries), dtype=torch.float64, device=dev)
    for h in range(n_heads):
        dot = torch.zeros((t_rows, num_entries), dtype=torch.float64, device=dev)
        for d in range(q.shape[2]):
            dot = dot + qd[:, h, d, None] * keys[:, :, d]
        total = total + wd[:, h, None] * torch.relu(dot)
    out = empty((t_rows, num_entries), torch.float32, dev)
    out.copy_(torch.where(valid & keep, total, torch.full_like(total, float("-inf"))))
    return cast_logits(out, out_dtype)
