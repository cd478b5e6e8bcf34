"""Random paged caches and slot tables for the attention tests (no all-zero inputs)."""

from __future__ import annotations

import torch

from ds41_cache import PagedCache


def _e4m3_codes(n: int, gen: torch.Generator) -> torch.Tensor:
    """Random e4m3fn bytes of both signs, never the NaN codes 0x7F / 0xFF."""
    b = torch.randint(0, 256, (n,), generator=gen, dtype=torch.int32)
    b = torch.where((b & 0x7F) == 0x7F, b - 1, b)
    return b.to(torch.uint8)


def random_cache(
    fmt: str,
    dim: int,
    page_size: int,
    num_pages: int,
    gen: torch.Generator,
    *,
    pad: int = 512,
    scale_lo: int = 118,
    scale_hi: int = 122,
    positive: bool = False,
    device: torch.device | str = "cpu",
) -> PagedCache:
    """A cache whose every slot holds a random record; padding bytes are random garbage too.

    `pad` extra bytes per page beyond the default stride check that kernels honour the stride.
    mxfp8 scale bytes are drawn from [scale_lo, scale_hi]; `positive` clears sign bits.
    """
    base = PagedCache.allocate(fmt, dim, page_size, num_pages)
    stride = base.page_stride + pad
    storage = torch.randint(0, 256, (num_pages, stride), generator=gen, dtype=torch.int32)
    cache = PagedCache(fmt, dim, page_size, num_pages, stride, storage.to(torch.uint8))
    n = num_pages * page_size
    data = cache.data_view()
    scales = cache.scale_view()
    if fmt == "mxfp8":
        codes = _e4m3_codes(n * dim, gen)
        if positive:
            codes = codes & 0x7F
        data.copy_(codes.view(num_pages, page_size, dim))
        sb = torch.randint(scale_lo, scale_hi + 1, (n * dim // 32,), generator=gen)
        scales.copy_(sb.to(torch.uint8).view(num_pages, page_size, dim // 32))
    elif fmt == "nvfp4":
        raw = torch.randint(0, 256, (n * dim // 2,), generator=gen, dtype=torch.int32)
        if positive:
            raw = raw & 0x77
        data.copy_(raw.to(torch.uint8).view(num_pages, page_size, dim // 2))
        # positive e4m3 block scales between 2^-5 and 2^2
        sb = torch.randint(0x10, 0x48, (n * dim // 16,), generator=gen)
        scales.copy_(sb.to(torch.uint8).view(num_pages, page_size, dim // 16))
    elif fmt == "bf16":
        x = torch.randn(n, dim, generator=gen).to(torch.bfloat16)
        if positive:
            x = x.abs()
        data.copy_(x.view(torch.uint8).view(num_pages, page_size, 2 * dim))
    else:
        raise ValueError(fmt)
    return cache.__class__(fmt, dim, page_size, num_pages, stride, cache.storage.to(device))


def random_slots(
    rows: int,
    width: int,
    num_slots: int,
    gen: torch.Generator,
    *,
    lens: torch.Tensor | None = None,
    neg_frac: float = 0.1,
    duplicates: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """int32 slots [rows, width] (some -1 inside each row's length) and lens int32 [rows].

    Slots past a row's length are random valid slots, so reading them shows up as an error.
    """
    if lens is None:
        lens = torch.randint(0, width + 1, (rows,), generator=gen)
    if duplicates:
        slots = torch.randint(0, num_slots, (rows, width), generator=gen)
    else:
        slots = torch.stack(
            [torch.randperm(num_slots, generator=gen)[:width].sort().values for _ in range(rows)]
        )
    neg = torch.rand(rows, width, generator=gen) < neg_frac
    slots = torch.where(neg, torch.full_like(slots, -1), slots)
    return slots.to(torch.int32), lens.to(torch.int32)


def random_q(
    rows: int, heads: int, dim: int, gen: torch.Generator, mult: float = 1.0
) -> torch.Tensor:
    return (torch.randn(rows, heads, dim, generator=gen) * mult).to(torch.bfloat16)


def random_sink(heads: int, gen: torch.Generator) -> torch.Tensor:
    return torch.randn(heads, generator=gen, dtype=torch.float32)


def max_abs_entry(cache: PagedCache) -> float:
    """Largest |decoded value| stored in the cache (bounds the output's scale)."""
    from ds41_attention.ops.sparse_attention.records import gather_decode

    slots = torch.arange(cache.num_slots, device=cache.device)
    return float(gather_decode(cache, slots).float().abs().max())
