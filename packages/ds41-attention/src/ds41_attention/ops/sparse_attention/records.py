"""Torch decode of paged cache records by slot (SPEC section 4), exact for every format.

Used by the torch path and the benchmark's gather baseline. Decoding goes through lookup
tables built from integer bit patterns, so it is exact on every device (every decoded value
is representable in bf16).
"""

from __future__ import annotations

import functools

import torch

from ds41_cache import MXFP8_BLOCK, NVFP4_BLOCK, PagedCache

_E2M1_MAGNITUDES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


@functools.lru_cache(maxsize=8)
def e4m3_table(device: torch.device) -> torch.Tensor:
    """f32 [256]: value of every e4m3fn byte (the NaN codes 0x7F/0xFF decode as +-480)."""
    b = torch.arange(256, dtype=torch.int32, device=device)
    e = (b >> 3) & 15
    m = (b & 7).to(torch.float32)
    normal = (1.0 + m / 8.0) * torch.pow(2.0, (e - 7).to(torch.float32))
    mag = torch.where(e == 0, m * 2.0**-9, normal)
    return torch.where((b & 0x80) != 0, -mag, mag)


@functools.lru_cache(maxsize=8)
def e2m1_table(device: torch.device) -> torch.Tensor:
    """f32 [16]: value of every e2m1 nibble (bit 3 is the sign)."""
    mag = torch.tensor(_E2M1_MAGNITUDES, dtype=torch.float32, device=device)
    return torch.cat([mag, -mag])


def ue8m0_to_f32(b: torch.Tensor) -> torch.Tensor:
    """uint8 scale bytes -> 2**(b - 127) as f32."""
    return torch.pow(2.0, b.to(torch.float32) - 127.0)


def _rows(cache: PagedCache, slots: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """uint8 data [N, data_bytes] and scales [N, scale_bytes] of `slots` (all >= 0)."""
    page = slots // cache.page_size
    off = slots % cache.page_size
    flat = cache.storage.view(-1)
    data_start = page * cache.page_stride + off * cache.data_bytes
    cols = torch.arange(cache.data_bytes, device=slots.device)
    data = flat[data_start[:, None] + cols[None, :]]
    scale_start = (
        page * cache.page_stride + cache.page_size * cache.data_bytes + off * cache.scale_bytes
    )
    scols = torch.arange(cache.scale_bytes, device=slots.device)
    scales = flat[scale_start[:, None] + scols[None, :]]
    return data, scales


def decode_records(fmt: str, dim: int, data: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """Decode uint8 records `data: [N, data_bytes]`, `scales: [N, scale_bytes]` -> bf16 [N, dim]."""
    n = data.shape[0]
    if fmt == "bf16":
        return data.contiguous().view(torch.bfloat16).reshape(n, dim)
    if fmt == "mxfp8":
        codes = e4m3_table(data.device)[data.long()]
        scale = ue8m0_to_f32(scales).repeat_interleave(MXFP8_BLOCK, dim=1)
        return (codes * scale).to(torch.bfloat16)
    if fmt == "nvfp4":
        nib = torch.stack([data & 15, data >> 4], dim=-1).reshape(n, dim)
        vals = e2m1_table(data.device)[nib.long()]
        scale = e4m3_table(data.device)[scales.long()].repeat_interleave(NVFP4_BLOCK, dim=1)
        return (vals * scale).to(torch.bfloat16)
    raise ValueError(f"fmt must be one of ('mxfp8', 'nvfp4', 'bf16') for attention, got {fmt!r}")


def gather_decode(cache: PagedCache, slots: torch.Tensor) -> torch.Tensor:
    """`slots: [N]` int -> bf16 [N, D] decoded entries; slot -1 gives zeros."""
    flat_slots = slots.reshape(-1).long()
    valid = flat_slots >= 0
    data, scales = _rows(cache, flat_slots.clamp(min=0))
    out = decode_records(cache.fmt, cache.dim, data, scales)
    return torch.where(valid[:, None], out, torch.zeros((), dtype=out.dtype, device=out.device))
