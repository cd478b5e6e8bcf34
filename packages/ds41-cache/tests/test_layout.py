"""Format geometry (formats.py) and the paged byte layout (paged.py), SPEC section 4."""

from __future__ import annotations

import pytest
import torch

from ds41_cache.formats import FORMATS, PAGE_ALIGN, row_layout
from ds41_cache.paged import PagedCache, default_page_stride


@pytest.mark.parametrize(
    "fmt,dim,data,scale",
    [
        ("mxfp8", 512, 512, 16),  # fp8_ds_mla record: 528 bytes/token
        ("nvfp4", 512, 256, 32),  # nvfp4_ds_mla record: 288
        ("mxfp4", 128, 64, 4),  # index key mxfp4: 68
        ("fp8_index", 128, 128, 4),  # index key fp8: 132
        ("bf16", 512, 1024, 0),
        ("mxfp8", 64, 64, 2),  # tiny preset
        ("nvfp4", 64, 32, 4),
        ("mxfp4", 32, 16, 1),
        ("fp8_index", 32, 32, 4),
        ("bf16", 64, 128, 0),
    ],
)
def test_row_layout_bytes(fmt: str, dim: int, data: int, scale: int) -> None:
    layout = row_layout(fmt, dim)
    assert (layout.data_bytes, layout.scale_bytes) == (data, scale)
    assert layout.bytes_per_token == data + scale


def test_spec_record_sizes() -> None:
    assert row_layout("mxfp8", 512).bytes_per_token == 528
    assert row_layout("nvfp4", 512).bytes_per_token == 288
    assert row_layout("mxfp4", 128).bytes_per_token == 68
    assert row_layout("fp8_index", 128).bytes_per_token == 132
    assert set(FORMATS) == {"mxfp8", "nvfp4", "mxfp4", "fp8_index", "bf16"}


@pytest.mark.parametrize(
    "fmt,dim,match",
    [
        ("mxfp9", 64, "fmt must be one of"),
        ("mxfp8", 48, "dim must be a positive multiple of 32, got 48"),
        ("nvfp4", 0, "dim must be a positive multiple of 32"),
        ("bf16", -32, "dim must be a positive multiple of 32"),
    ],
)
def test_row_layout_rejects_bad_geometry(fmt: str, dim: int, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        row_layout(fmt, dim)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("page_size", [1, 3, 16, 64])
def test_default_page_stride_is_the_smallest_aligned_stride(fmt: str, page_size: int) -> None:
    layout = row_layout(fmt, 64)
    stride = default_page_stride(layout, page_size)
    raw = page_size * layout.bytes_per_token
    assert stride % PAGE_ALIGN == 0 and raw <= stride < raw + PAGE_ALIGN


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("page_stride", [None, 2048 + 48])  # default and a padded stride
def test_views_address_the_documented_bytes(fmt: str, page_stride: int | None) -> None:
    page_size, num_pages, dim = 3, 4, 64
    cache = PagedCache.allocate(fmt, dim, page_size, num_pages, page_stride=page_stride)
    assert cache.storage.dtype == torch.uint8 and not bool(cache.storage.any())
    stride = cache.page_stride
    assert stride == (page_stride or default_page_stride(cache.layout, page_size))
    assert cache.num_slots == 12
    # a byte pattern that differs at every offset that matters
    flat = torch.arange(num_pages * stride, dtype=torch.int64)
    cache.storage.copy_(((flat * 7 + flat // 251) % 256).to(torch.uint8).view(num_pages, stride))
    raw = cache.storage.reshape(-1)
    data, scale = cache.data_view(), cache.scale_view()
    db, sb = cache.data_bytes, cache.scale_bytes
    assert tuple(data.shape) == (num_pages, page_size, db)
    assert tuple(scale.shape) == (num_pages, page_size, sb)
    for slot in range(cache.num_slots):
        page, o = divmod(slot, page_size)
        d0 = page * stride + o * db
        s0 = page * stride + page_size * db + o * sb
        assert torch.equal(data[page, o], raw[d0 : d0 + db])
        assert torch.equal(scale[page, o], raw[s0 : s0 + sb])
    # the views alias the storage: a write lands in it
    data[1, 2, 0] = 0x5C
    assert int(raw[stride + 2 * db]) == 0x5C


def test_paged_cache_validation() -> None:
    layout = row_layout("mxfp8", 64)
    ok = torch.zeros(2, 512, dtype=torch.uint8)
    with pytest.raises(ValueError, match="page_size must be a positive int"):
        PagedCache("mxfp8", 64, 0, 2, 512, ok)
    with pytest.raises(
        ValueError, match=f"page_stride must be an int >= .* = {8 * layout.bytes_per_token}"
    ):
        PagedCache("mxfp8", 64, 8, 2, 512, ok)
    with pytest.raises(ValueError, match="multiple of 16"):
        PagedCache("mxfp8", 64, 4, 2, 520, torch.zeros(2, 520, dtype=torch.uint8))
    with pytest.raises(ValueError, match=r"storage must be uint8 \[2, 512\]"):
        PagedCache("mxfp8", 64, 4, 2, 512, torch.zeros(2, 512, dtype=torch.int8))
    with pytest.raises(ValueError, match=r"storage must be uint8 \[3, 512\]"):
        PagedCache("mxfp8", 64, 4, 3, 512, ok)
    with pytest.raises(ValueError, match="contiguous"):
        PagedCache("mxfp8", 64, 4, 2, 512, torch.zeros(512, 2, dtype=torch.uint8).t())
    PagedCache("mxfp8", 64, 4, 2, 512, ok)


def test_check_slots() -> None:
    cache = PagedCache.allocate("nvfp4", 64, 4, 3)
    cache.check_slots(torch.tensor([-1, 0, 11], dtype=torch.int32))
    cache.check_slots(torch.empty(0, dtype=torch.int64))
    with pytest.raises(IndexError, match=r"slots must lie in \[-1, 12\)"):
        cache.check_slots(torch.tensor([0, 12]))
    with pytest.raises(IndexError, match=r"got values in \[-2, 3\]"):
        cache.check_slots(torch.tensor([-2, 3]), name="slots")
    with pytest.raises(TypeError, match="my_slots must be int32 or int64"):
        cache.check_slots(torch.tensor([0.0]), name="my_slots")


def test_readme_example_runs() -> None:
    import pathlib
    import re

    readme = (pathlib.Path(__file__).parents[1] / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", readme, flags=re.DOTALL)
    assert blocks, "README.md lost its usage example"
    for block in blocks:
        exec(compile(block, "README.md", "exec"), {})


def test_lookup_slots_matches_a_host_loop():
    from ds41_cache import lookup_slots

    g = torch.Generator().manual_seed(3)
    ps = 4
    table = torch.randint(0, 50, (3, 5), generator=g, dtype=torch.int32)
    table[1, 2] = -1  # a released page
    req = torch.tensor([0, 1, -1, 2], dtype=torch.int32)
    pos = torch.randint(0, 24, (4, 6), generator=g)  # columns up to 5: some past the table
    needed = torch.rand(4, 6, generator=g) < 0.8
    slots, missing = lookup_slots(table, req, pos, ps, needed)
    for t in range(4):
        for j in range(6):
            r, p = int(req[t]), int(pos[t, j])
            col = p // ps
            page = int(table[r, col]) if col < table.shape[1] and r >= 0 else -1  # -1: padding
            ok = bool(needed[t, j]) and page >= 0
            assert int(slots[t, j]) == (page * ps + p % ps if ok else -1)
            assert bool(missing[t, j]) == (bool(needed[t, j]) and page < 0)
    assert slots.dtype == torch.int64 and bool(missing.any()) and bool((slots >= 0).any())
