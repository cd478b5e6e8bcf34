"""Torch reference of `paged.lookup_slots`: vectorized, no host syncs (CUDA-graph safe)."""

from __future__ import annotations

import torch


def lookup_slots(
    block_table: torch.Tensor,
    req_idx: torch.Tensor,
    positions: torch.Tensor,
    page_size: int,
    needed: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(slots int64, missing bool), both shaped like `positions` ([T] or [T, N]); see
    `paged.lookup_slots`."""
    pos = positions.to(torch.int64)
    req = req_idx.to(torch.int64)
    req = req.reshape(req.shape + (1,) * (pos.dim() - req.dim()))
    in_table = (req >= 0) & (req < block_table.shape[0]) & (pos >= 0)
    rows = req.clamp(0, block_table.shape[0] - 1)
    cols = pos.clamp(min=0) // page_size
    in_table &= cols < block_table.shape[1]
    page = block_table[rows, cols.clamp(max=block_table.shape[1] - 1)].to(torch.int64)
    have = needed & in_table & (page >= 0)
    slots = torch.where(have, page * page_size + pos % page_size, torch.full_like(pos, -1))
    return slots, needed & ~have
