# mypy: allow-untyped-defs, allow-incomplete-defs
"""`paged.lookup_slots` for one slot per row ([T] positions) in one launch (the torch
reference takes about fifteen small kernels). Integer work only: the same slots and `missing`
flags as the reference, on the GPU and under the interpreter. Total: a request outside
[0, R), a negative position, a column past the table or a -1 entry yields slot -1 and never a
load outside the table."""

import torch
import triton
import triton.language as tl

from ...outputs import empty
from ..launch import dependent_launch, enter_dependent

BLOCK = 128


@triton.jit
def slot_of_rows(bt_ptr, bt_stride0, bt_stride1, num_req, num_cols, req_ptr, pos_ptr,
                 needed_ptr, rows, ok, PAGE: tl.constexpr):  # fmt: skip
    """(slot int64, needed, found, position int64) of `rows`: the block table's page of
    (request, position) times PAGE plus the position's offset in it; -1 where the row is not
    needed or the request, position, column or table entry is out of range (no load outside
    the table)."""
    req = tl.load(req_ptr + rows, mask=ok, other=-1).to(tl.int64)
    pos = tl.load(pos_ptr + rows, mask=ok, other=-1).to(tl.int64)
    need = tl.load(needed_ptr + rows, mask=ok, other=0) != 0
    col = tl.maximum(pos, 0) // PAGE
    in_table = (req >= 0) & (req < num_req) & (pos >= 0) & (col < num_cols)
    page = tl.load(
        bt_ptr + tl.maximum(req, 0) * bt_stride0 + col * bt_stride1,
        mask=ok & need & in_table,
        other=-1,
    ).to(tl.int64)
    have = need & in_table & (page >= 0)
    return tl.where(have, page * PAGE + pos % PAGE, -1), need, have, pos


@triton.jit
def lookup_slots_kernel(
    bt_ptr, bt_stride0, bt_stride1, num_req, num_cols, req_ptr, pos_ptr, needed_ptr,
    slots_ptr, missing_ptr, T, PAGE: tl.constexpr, BLOCK: tl.constexpr,
    GDC: tl.constexpr = False,
):  # fmt: skip
    enter_dependent(GDC)
    rows = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    ok = rows < T
    slot, need, have, _pos = slot_of_rows(bt_ptr, bt_stride0, bt_stride1, num_req, num_cols,
                                          req_ptr, pos_ptr, needed_ptr, rows, ok, PAGE)  # fmt: skip
    tl.store(slots_ptr + rows, slot, mask=ok)
    tl.store(missing_ptr + rows, (need & ~have).to(tl.uint8), mask=ok)


def lookup_slots(
    block_table: torch.Tensor,
    req_idx: torch.Tensor,
    positions: torch.Tensor,
    page_size: int,
    needed: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """1-D `positions` / `needed` / `req_idx` ([T]) -> (slots int64 [T], missing bool [T])."""
    t = positions.shape[0]
    slots = empty((t,), torch.int64, positions.device)
    missing = empty((t,), torch.bool, positions.device)
    if t == 0:
        return slots, missing
    lookup_slots_kernel[(triton.cdiv(t, BLOCK),)](
        block_table, block_table.stride(0), block_table.stride(1), block_table.shape[0],
        block_table.shape[1], req_idx.contiguous(), positions.contiguous(),
        needed.contiguous().view(torch.uint8), slots, missing.view(torch.uint8), t,
        PAGE=page_size, BLOCK=BLOCK, num_warps=4,
        **dependent_launch(positions.device),
    )  # fmt: skip
    return slots, missing
