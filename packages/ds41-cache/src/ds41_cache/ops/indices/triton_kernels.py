# mypy: disable-error-code="no-untyped-def"
"""Triton kernel of `sparse_paged_indices` (SPEC section 7): one program per token row.

Graph safe and total: a padding row (request id outside `[0, R)`) gets lengths 0 and -1
everywhere, and a block-table entry that is -1 (or a column past the table) where a slot is
needed yields slot -1 instead of a fault (the lengths still count it, as on the torch path);
the public wrapper turns those into IndexError when validating, on every backend.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ...outputs import empty
from ..launch import dependent_launch, enter_dependent


@triton.jit
def _sparse_paged_indices_kernel(
    req_ptr,
    pos_ptr,
    replay_ptr,
    swa_bt_ptr,
    swa_bt_stride0,
    swa_bt_stride1,
    swa_bt_cols,
    num_req,
    swa_out_ptr,
    swa_len_ptr,
    topk_ptr,
    topk_stride0,
    topk_stride1,
    comp_bt_ptr,
    comp_bt_stride0,
    comp_bt_stride1,
    comp_bt_cols,
    comp_out_ptr,
    comp_len_ptr,
    WINDOW: tl.constexpr,
    SWA_PAGE: tl.constexpr,
    BLOCK_W: tl.constexpr,
    HAS_COMP: tl.constexpr,
    K: tl.constexpr,
    RATIO: tl.constexpr,
    COMP_PAGE: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GDC: tl.constexpr = False,
):
    enter_dependent(GDC)
    t = tl.program_id(0).to(tl.int64)
    req = tl.load(req_ptr + t).to(tl.int32)
    p = tl.load(pos_ptr + t).to(tl.int32)
    pad = (req < 0) | (req >= num_req)
    r = tl.where(pad, 0, req).to(tl.int64)

    # window: positions lo .. p, ascending
    rs = tl.load(replay_ptr + r).to(tl.int32)
    lo = tl.maximum(tl.maximum(p - WINDOW + 1, 0), rs)
    n = tl.where(pad, 0, tl.maximum(p - lo + 1, 0))
    j = tl.arange(0, BLOCK_W)
    q = lo + j
    col = q // SWA_PAGE
    need = (j < n) & (col < swa_bt_cols)
    page = tl.load(
        swa_bt_ptr + r * swa_bt_stride0 + col.to(tl.int64) * swa_bt_stride1, mask=need, other=-1
    )
    slot = tl.where(need & (page >= 0), page * SWA_PAGE + q % SWA_PAGE, -1)
    tl.store(swa_out_ptr + t * WINDOW + j, slot, mask=j < WINDOW)
    tl.store(swa_len_ptr + t, n)

    if HAS_COMP:
        k = tl.arange(0, BLOCK_K)
        e = tl.load(topk_ptr + t * topk_stride0 + k * topk_stride1, mask=k < K, other=-1)
        n_visible = (p + 1) // RATIO
        valid = (k < K) & (e >= 0) & (e < n_visible) & (pad == 0)
        ccol = e // COMP_PAGE
        have = valid & (ccol < comp_bt_cols)
        cpage = tl.load(
            comp_bt_ptr + r * comp_bt_stride0 + ccol.to(tl.int64) * comp_bt_stride1,
            mask=have,
            other=-1,
        )
        cslot = tl.where(have & (cpage >= 0), cpage * COMP_PAGE + e % COMP_PAGE, -1)
        # compact the valid entries to the front, keeping their order
        dest = tl.cumsum(valid.to(tl.int32), 0) - 1
        count = tl.sum(valid.to(tl.int32), 0)
        tl.store(comp_out_ptr + t * K + dest, cslot, mask=valid)
        tl.store(
            comp_out_ptr + t * K + k, tl.full([BLOCK_K], -1, tl.int32), mask=(k >= count) & (k < K)
        )
        tl.store(comp_len_ptr + t, count)


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
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """Same outputs as the torch reference (without the `missing` flags); inputs validated."""
    t = req_idx.shape[0]
    device = req_idx.device
    swa = empty((t, window), torch.int32, device)
    swa_len = empty((t,), torch.int32, device)
    comp: torch.Tensor | None = None
    comp_len: torch.Tensor | None = None
    has_comp = ratio > 0 and topk_entries is not None
    comp_args: tuple[object, ...]
    if topk_entries is not None and comp_block_table is not None and has_comp:
        k = topk_entries.shape[1]
        comp = empty((t, k), torch.int32, device)
        comp_len = empty((t,), torch.int32, device)
        comp_args = (
            topk_entries,
            topk_entries.stride(0),
            topk_entries.stride(1),
            comp_block_table,
            comp_block_table.stride(0),
            comp_block_table.stride(1),
            comp_block_table.shape[1],
            comp,
            comp_len,
        )
    else:
        k = 1
        # never read: HAS_COMP=False prunes every use
        comp_args = (swa, 0, 0, swa, 0, 0, 0, swa, swa_len)
    if t == 0:
        return swa, swa_len, comp, comp_len
    _sparse_paged_indices_kernel[(t,)](
        req_idx.contiguous(),  # 1-D inputs are read at unit stride (no-op when contiguous)
        pos.contiguous(),
        replay_start.contiguous(),
        swa_block_table,
        swa_block_table.stride(0),
        swa_block_table.stride(1),
        swa_block_table.shape[1],
        swa_block_table.shape[0],
        swa,
        swa_len,
        *comp_args,
        WINDOW=window,
        SWA_PAGE=swa_page_size,
        BLOCK_W=triton.next_power_of_2(window),
        HAS_COMP=has_comp,
        K=k,
        RATIO=max(ratio, 1),
        COMP_PAGE=comp_page_size,
        BLOCK_K=triton.next_power_of_2(k),
        **dependent_launch(pos.device),
    )
    return swa, swa_len, comp, comp_len
