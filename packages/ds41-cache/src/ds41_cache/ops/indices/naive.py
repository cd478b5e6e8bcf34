"""Torch reference of `sparse_paged_indices` (SPEC section 7), vectorized over rows.

No host syncs: every shape is fixed by the inputs' shapes, so the reference is CUDA-graph safe.
Besides the slots it returns, per row, whether a needed block-table entry was missing (-1, or
a column past the table), which the public wrapper turns into an error when validating.
"""

from __future__ import annotations

import torch

from ...paged import lookup_slots


def sparse_paged_indices(
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
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor | None, torch.Tensor]:
    """Returns (swa_slots int32 [T, W], swa_lens int32 [T], comp_slots int32 [T, K] | None,
    comp_lens int32 [T] | None, missing bool [T])."""
    num_req = swa_block_table.shape[0]
    pad = (req_idx < 0) | (req_idx >= num_req)
    r = torch.where(pad, 0, req_idx).to(torch.int64)
    p = pos.to(torch.int64)
    lo = torch.maximum((p - window + 1).clamp(min=0), replay_start[r].to(torch.int64))
    swa_len = torch.where(pad, 0, (p - lo + 1).clamp(min=0))
    j = torch.arange(window, device=pos.device)
    needed = j < swa_len[:, None]
    swa, missing = lookup_slots(swa_block_table, r, lo[:, None] + j, swa_page_size, needed)
    missing = missing.any(dim=1)
    if ratio == 0 or topk_entries is None:
        return swa.to(torch.int32), swa_len.to(torch.int32), None, None, missing
    assert comp_block_table is not None
    e = topk_entries.to(torch.int64)
    n_visible = (p + 1) // ratio
    valid = (e >= 0) & (e < n_visible[:, None]) & ~pad[:, None]
    comp, comp_missing = lookup_slots(comp_block_table, r, e.clamp(min=0), comp_page_size, valid)
    # Valid entries first, in their top-k order (ascending); the sort keys are unique.
    k = torch.arange(e.shape[1], device=e.device)
    order = torch.argsort(torch.where(valid, k, k + e.shape[1]), dim=1)
    comp = comp.gather(1, order)
    comp_len = valid.sum(dim=1)
    missing = missing | comp_missing.any(dim=1)
    return (
        swa.to(torch.int32),
        swa_len.to(torch.int32),
        comp.to(torch.int32),
        comp_len.to(torch.int32),
        missing,
    )
