"""Torch reference of the paged insert and gather: apply_rope -> encode -> byte copy."""

from __future__ import annotations

import torch

from ...paged import PagedCache
from ...rope import apply_rope
from ..codec import naive as codec


def _page_offset(cache: PagedCache, slots: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    s = slots.to(torch.int64)
    return s // cache.page_size, s % cache.page_size


def insert(
    cache: PagedCache,
    x: torch.Tensor,
    slots: torch.Tensor,
    positions: torch.Tensor | None,
    freqs: torch.Tensor | None,
) -> None:
    """Write rows `x[i]` ([N, D]) at `slots[i]`, RoPE'd at `positions` if `freqs`; slots
    outside [0, num_slots) (-1, or out of range when unvalidated) are skipped."""
    keep = (slots >= 0) & (slots < cache.num_slots)
    if freqs is not None:
        assert positions is not None
        x = apply_rope(x, positions, freqs)
    data, scales = codec.encode(cache.fmt, x[keep])
    page, off = _page_offset(cache, slots[keep])
    cache.data_view()[page, off] = data
    if cache.scale_bytes:
        cache.scale_view()[page, off] = scales


def gather(cache: PagedCache, slots: torch.Tensor) -> torch.Tensor:
    """Decode the rows at `slots` ([N]) -> bf16 [N, D]; a slot outside [0, num_slots) (-1, or
    out of range when unvalidated) gives a row of zeros."""
    valid = (slots >= 0) & (slots < cache.num_slots)
    page, off = _page_offset(cache, torch.where(valid, slots, 0))
    rows = codec.decode(cache.fmt, cache.data_view()[page, off], cache.scale_view()[page, off])
    return torch.where(valid[:, None], rows, torch.zeros_like(rows))
