"""Format names, block sizes and row geometry of every cache format (SPEC section 4)."""

from __future__ import annotations

from dataclasses import dataclass

MXFP8_BLOCK = 32
"""Channels per ue8m0 scale byte in the `fp8_ds_mla` (MXFP8) record."""
NVFP4_BLOCK = 16
"""Channels per e4m3 scale byte in the `nvfp4_ds_mla` record."""
MXFP4_BLOCK = 32
"""Channels per ue8m0 scale byte in the MXFP4 index-key format."""
E4M3_MAX = 448.0
E2M1_MAX = 6.0
PAGE_ALIGN = 512
"""A page (data rows, then scale rows) is zero-padded to a multiple of this many bytes."""

FORMATS: tuple[str, ...] = ("mxfp8", "nvfp4", "mxfp4", "fp8_index", "bf16")


@dataclass(frozen=True)
class RowLayout:
    """Bytes of one token's data row and scale row in a format at latent width `dim`."""

    fmt: str
    dim: int
    data_bytes: int
    scale_bytes: int

    @property
    def bytes_per_token(self) -> int:
        return self.data_bytes + self.scale_bytes


def check_format(fmt: str) -> str:
    if fmt not in FORMATS:
        raise ValueError(f"fmt must be one of {FORMATS}, got {fmt!r}")
    return fmt


def row_layout(fmt: str, dim: int) -> RowLayout:
    """Row geometry of `fmt` at width `dim` (a positive multiple of 32)."""
    check_format(fmt)
    if dim <= 0 or dim % 32:
        raise ValueError(f"dim must be a positive multiple of 32, got {dim}")
    if fmt == "mxfp8":
        return RowLayout(fmt, dim, dim, dim // MXFP8_BLOCK)
    if fmt == "nvfp4":
        return RowLayout(fmt, dim, dim // 2, dim // NVFP4_BLOCK)
    if fmt == "mxfp4":
        return RowLayout(fmt, dim, dim // 2, dim // MXFP4_BLOCK)
    if fmt == "fp8_index":
        return RowLayout(fmt, dim, dim, 4)
    return RowLayout(fmt, dim, 2 * dim, 0)
