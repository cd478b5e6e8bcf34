"""Paged storage of one layer's cache in one format (SPEC section 4).

A page of `page_size` tokens holds all `page_size` data rows first, then all scale rows, then
zero padding up to `page_stride` bytes (a multiple of `PAGE_ALIGN` by default; callers may pass
any larger stride and every kernel must honour it). The slot of position `p` of request `r` is
`block_table[r][p // page_size] * page_size + p % page_size`.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field

import torch

from .backend import resolve_backend
from .formats import PAGE_ALIGN, RowLayout, row_layout


def default_page_stride(layout: RowLayout, page_size: int) -> int:
    raw = page_size * layout.bytes_per_token
    return -(-raw // PAGE_ALIGN) * PAGE_ALIGN


def _is_int(value: object) -> bool:
    """An int (or an integer type with `__index__`, e.g. numpy's), not a bool or a float."""
    if isinstance(value, bool):
        return False
    try:
        operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        return False
    return True


def _check_geometry(
    fmt: str, dim: object, page_size: object, num_pages: object, page_stride: object
) -> RowLayout:
    """Named errors for the arguments that shape a cache, before anything is allocated."""
    if not _is_int(dim):
        raise ValueError(f"dim must be a positive multiple of 32 (an int), got {dim!r}")
    layout = row_layout(fmt, dim)  # type: ignore[arg-type]
    if not _is_int(page_size) or page_size <= 0:  # type: ignore[operator]
        raise ValueError(f"page_size must be a positive int, got {page_size!r}")
    if not _is_int(num_pages) or num_pages < 0:  # type: ignore[operator]
        raise ValueError(f"num_pages must be an int >= 0, got {num_pages!r}")
    need = page_size * layout.bytes_per_token  # type: ignore[operator]
    if not _is_int(page_stride) or page_stride < need or page_stride % 16:  # type: ignore[operator]
        raise ValueError(
            f"page_stride must be an int >= page_size * bytes_per_token = {need} and a "
            f"multiple of 16 bytes, got {page_stride!r}"
        )
    return layout


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
        self.layout = _check_geometry(
            self.fmt, self.dim, self.page_size, self.num_pages, self.page_stride
        )
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
        """Zero-filled storage for `num_pages` pages (padding bytes stay zero).

        `dim`: a positive multiple of 32; `page_size`: a positive int; `num_pages`: an int >= 0;
        `page_stride`: an int >= page_size * bytes_per_token, a multiple of 16 (default: the
        smallest multiple of 512 that holds the page). Bad values raise ValueError naming them.
        """
        if not _is_int(page_size) or page_size <= 0:
            raise ValueError(f"page_size must be a positive int, got {page_size!r}")
        if not _is_int(dim):
            raise ValueError(f"dim must be a positive multiple of 32 (an int), got {dim!r}")
        layout = row_layout(fmt, dim)
        stride = default_page_stride(layout, page_size) if page_stride is None else page_stride
        _check_geometry(fmt, dim, page_size, num_pages, stride)
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
    *,
    backend: str = "auto",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Slots of `positions` on the device, without host syncs (CUDA-graph safe).

    block_table: int32 [R, P]; req_idx: [T] (a request outside [0, R), e.g. -1 for padding,
    has no pages); positions: int [T] or [T, N]; needed: bool, same shape as positions.
    Returns (slots int64 = `block_table[r][p // page_size] * page_size + p % page_size`
    where needed and the page exists, else -1; missing bool = needed but no page: a -1 entry,
    a column past the table, a negative position or a request outside [0, R)). Total: no
    input makes it index outside the table.

    `backend`: "auto" (Triton on CUDA tensors), "triton" or "torch". The Triton kernel
    (`ops/slots/`, one launch) serves 1-D positions (one slot per row); [T, N] positions take
    the torch reference (`ops/slots/naive.py`). Both give the same values.
    """
    if positions.shape != needed.shape or positions.dim() not in (1, 2):
        raise ValueError(
            f"positions and needed must share a [T] or [T, N] shape, got {list(positions.shape)} "
            f"and {list(needed.shape)}"
        )
    if req_idx.dim() != 1 or req_idx.shape[0] != positions.shape[0]:
        raise ValueError(f"req_idx must be [{positions.shape[0]}], got {list(req_idx.shape)}")
    if needed.dtype != torch.bool:
        raise TypeError(f"needed must be bool, got {needed.dtype}")
    if positions.dim() == 1 and resolve_backend(backend, positions.device) == "triton":
        from .ops.slots import triton_kernels

        return triton_kernels.lookup_slots(block_table, req_idx, positions, page_size, needed)
    from .ops.slots import naive

    return naive.lookup_slots(block_table, req_idx, positions, page_size, needed)
