"""A compressed entry's cache slot, RoPE position and RoPE tables, in one launch.

A kv-source layer's compressor emits entry `e` of a row (`entry`, -1 where nothing is
emitted); the layer then needs its slot in the ratio's cache
(`ds41_cache.paged.lookup_slots`), its position `e * ratio` (int32: `max(e, 0) * ratio`,
three torch ops) and, once per step and ratio, the RoPE tables at that position
(`ds41_cache.rope.rope_cos_sin`). On the Triton backend `entry_slots_positions` computes all of
them in one launch (`rowwise/triton_kernels.entry_slots_kernel`): the slot by
`lookup_slots_kernel`'s integer steps, the position as the torch ops compute it, the tables by
`rope_tables_kernel`'s operations (float32 position, one fp32 product, libdevice cos/sin): the
same values and bits as the separate calls (tested on the interpreter and on CUDA).
"""

from __future__ import annotations

import torch

from ds41_cache.backend import resolve_backend
from ds41_cache.paged import lookup_slots
from ds41_cache.rope import rope_cos_sin


def entry_slots_positions(
    block_table: torch.Tensor,
    req_idx: torch.Tensor,
    entry: torch.Tensor,
    emit: torch.Tensor,
    page_size: int,
    ratio: int,
    *,
    freqs: torch.Tensor | None = None,
    backend: str = "auto",
) -> tuple[torch.Tensor, torch.Tensor, tuple[torch.Tensor, torch.Tensor] | None]:
    """`block_table: int32 [R, P]`, `req_idx: int32 [T]`, `entry: int64 [T]`, `emit: bool
    [T]` -> (slots int64 [T]: `lookup_slots(block_table, req_idx, entry, page_size, emit)`'s,
    entry_pos int32 [T]: `max(entry, 0) * ratio`, with `freqs: f32 [R/2]` the tables
    `rope_cos_sin(entry_pos, freqs)` else None).

    The tables follow `rope_cos_sin`'s default dispatch (its Triton kernel on CUDA tensors,
    torch on CPU ones), so they are the bits that call gives."""
    if entry.dim() != 1 or emit.shape != entry.shape or req_idx.shape != entry.shape:
        raise ValueError(
            f"entry, emit and req_idx must be [T], got {list(entry.shape)}, "
            f"{list(emit.shape)}, {list(req_idx.shape)}"
        )
    on_triton = resolve_backend(backend, entry.device) == "triton" and entry.numel() > 0
    if not on_triton:
        slots = lookup_slots(block_table, req_idx, entry, page_size, emit, backend=backend)[0]
        entry_pos = (entry.clamp(min=0) * ratio).to(torch.int32)
        tables = None if freqs is None else rope_cos_sin(entry_pos, freqs)
        return slots, entry_pos, tables
    from .rowwise.triton_kernels import launch_entry_slots

    # The tables in the kernel where rope_cos_sin (backend "auto") would launch its kernel:
    # CUDA tensors; on CPU tensors torch's tables, as that call gives them.
    in_kernel = freqs is not None and resolve_backend("auto", entry.device) == "triton"
    slots, entry_pos, tables = launch_entry_slots(
        block_table, req_idx, entry, emit, page_size, ratio,
        freqs.contiguous() if in_kernel and freqs is not None else None,
    )  # fmt: skip
    if freqs is not None and not in_kernel:
        tables = rope_cos_sin(entry_pos, freqs)
    return slots, entry_pos, tables
