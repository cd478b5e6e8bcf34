"""Paged storage of one layer's cache in one format (SPEC section 4).

A page of `page_size` tokens holds all `page_size` data rows first, then all scale rows, then
zero padding up to `page_stride` bytes (a multiple of `PAGE_ALIGN` by default; callers may pass
any larger stride and every kernel must honour it). The slot of position `p` of request `r` is
`block_table[r][p // page_size] * page_size + p % page_size`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .formats import PAGE_ALIGN, RowLayout, row_layout


def default_page_stride(layout: RowLayout, page_size: int) -> int:
    raw = page_size * layout.bytes_per_token
    return -(-raw // PAGE_ALIGN) * PAGE_ALIGN


@dataclass
class PagedCache:
    """`storage: uint8 [num_pages, page_stride]` holding `num_pages * page_size` token slots."""

    fmt: str
    dim: int
    page_size: int
    num_pages: int
    page_stride: int
    storage: torch.Tensor
    layout: RowLayout = field(init=False)

    def __post_init__(self) -> None:
        self.layout = row_layout(self.fmt, self.dim)
        if self.page_size <= 0:
            raise ValueError(f"page_size must be positive, got {self.page_size}")
        if self.page_stride < self.page_size * self.layout.bytes_per_token:
            raise ValueError(
                f"page_stride must be >= page_size * bytes_per_token = "
                f"{self.page_size * self.layout.bytes_per_token}, got {self.page_stride}"
            )
        if self.page_stride % 16:
            raise ValueError(f"page_stride must be a multiple of 16 bytes, got {self.page_stride}")
        expected = (self.num_pages, self.page_stride)
        if self.storage.dtype != torch.uint8 or tuple(self.storage.shape) != expected:
            raise ValueError(
                f"storage must be uint8 {list(expected)}, got {self.storage.dtype} "
                f"{list(self.storage.shape)}"
            )
        if not self.storage.is_contiguous():
            raise ValueError("storage must be contiguous")

    @classmethod
    def allocate(
        cls,
        fmt: str,
        dim: int,
        page_size: int,
        num_pages: int,
        *,
        page_stride: int | None = None,
        device: torch.device | str = "cpu",
    ) -> PagedCache:
        """Zero-filled storage for `num_pages` pages (padding bytes stay zero)."""
        layout = row_layout(fmt, dim)
        stride = default_page_stride(layout, page_size) if page_stride is None else page_stride
        storage = torch.zeros((num_pages, stride), dtype=torch.uint8, device=device)
        return cls(fmt, dim, page_size, num_pages, stride, storage)

    @property
    def data_bytes(self) -> int:
        return self.layout.data_bytes

    @property
    def scale_bytes(self) -> int:
        return self.layout.scale_bytes

    @property
    def num_slots(self) -> int:
        return self.num_pages * self.page_size

    @property
    def device(self) -> torch.device:
        return self.storage.device

    def data_view(self) -> torch.Tensor:
        """uint8 `[num_pages, page_size, data_bytes]` view of the data rows (no copy)."""
        flat = self.storage[:, : self.page_size * self.data_bytes]
        return flat.view(self.num_pages, self.page_size, self.data_bytes)

    def scale_view(self) -> torch.Tensor:
        """uint8 `[num_pages, page_size, scale_bytes]` view of the scale rows (no copy)."""
        start = self.page_size * self.data_bytes
        flat = self.storage[:, start : start + self.page_size * self.scale_bytes]
        return flat.view(self.num_pages, self.page_size, self.scale_bytes)

    def check_slots(self, slots: torch.Tensor, name: str = "slots") -> None:
        """Raise unless every entry of `slots` is -1 or in `[0, num_slots)` (host sync)."""
        if slots.dtype not in (torch.int32, torch.int64):
            raise TypeError(f"{name} must be int32 or int64, got {slots.dtype}")
        if slots.device != self.device:
            raise ValueError(f"{name} is on {slots.device}, the cache on {self.device}")
        if slots.numel() == 0:
            return
        lo, hi = int(slots.min()), int(slots.max())
        if lo < -1 or hi >= self.num_slots:
            raise IndexError(
                f"{name} must lie in [-1, {self.num_slots}) for a cache of {self.num_pages} pages "
                f"x {self.page_size} tokens, got values in [{lo}, {hi}]"
            )


def lookup_slots(
    block_table: torch.Tensor,
    req_idx: torch.Tensor,
    positions: torch.Tensor,
    page_size: int,
    needed: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Slots of `positions` on the device, without host syncs (CUDA-graph safe).

    block_table: int32 [R, P]; req_idx: [T] (negative = padding, read as row 0);
    positions: int [T] or [T, N]; needed: bool, same shape as positions.
    Returns (slots int64 = `block_table[r][p // page_size] * page_size + p % page_size`
    where needed and the page exists, else -1; missing bool = needed but no page, or a column
    past the table).
    """
    pos = positions.to(torch.int64).clamp(min=0)
    rows = req_idx.to(torch.int64).clamp(min=0)
    rows = rows.reshape(rows.shape + (1,) * (pos.dim() - rows.dim()))
    cols = pos // page_size
    in_table = cols < block_table.shape[1]
    page = block_table[rows, cols.clamp(max=block_table.shape[1] - 1)].to(torch.int64)
    have = needed & in_table & (page >= 0)
    slots = torch.where(have, page * page_size + pos % page_size, torch.full_like(pos, -1))
    return slots, needed & ~have
