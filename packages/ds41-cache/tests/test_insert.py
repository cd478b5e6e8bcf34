"""Fused RoPE + quantize + paged insert, and gather + decode (torch reference and Triton)."""

from __future__ import annotations

import pytest
import torch

from ds41_cache.codec import decode, encode
from ds41_cache.formats import FORMATS, row_layout
from ds41_cache.insert import gather, insert
from ds41_cache.paged import PagedCache, default_page_stride
from ds41_cache.rope import RopeConfig, apply_rope, rope_cos_sin, rope_freqs

POISON = 0xA5
PAGE = 4
PAGES = 6


def poisoned_cache(fmt: str, dim: int, device: torch.device | str = "cpu") -> PagedCache:
    """A cache with a padded page stride (+48 bytes) whose every byte starts as 0xA5."""
    stride = default_page_stride(row_layout(fmt, dim), PAGE) + 48
    cache = PagedCache.allocate(fmt, dim, PAGE, PAGES, page_stride=stride, device=device)
    cache.storage.fill_(POISON)
    return cache


def record_bytes(cache: PagedCache, slot: int) -> tuple[slice, slice]:
    """Byte ranges of a slot's data and scale rows in the flat storage (DESIGN.md formula)."""
    page, off = divmod(slot, cache.page_size)
    db, sb = cache.data_bytes, cache.scale_bytes
    d0 = page * cache.page_stride + off * db
    s0 = page * cache.page_stride + cache.page_size * db + off * sb
    return slice(d0, d0 + db), slice(s0, s0 + sb)


def inputs(
    dim: int, dtype: torch.dtype, seed: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(7, dim, generator=g) * torch.logspace(-2, 2, 7)[:, None]).to(dtype)
    slots = torch.tensor([5, -1, 0, 17, 9, -1, 23])  # across pages, last slot of the cache
    x[1] = float("nan")  # skipped rows are never read (nor checked)
    positions = torch.tensor([5, 0, 0, 4097, 9, 3, 65530])
    freqs = rope_freqs(RopeConfig(16, 160000.0, yarn_factor=4.0, yarn_orig=16))
    return x, slots, positions, freqs


@pytest.mark.parametrize("rope", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("fmt", FORMATS)
def test_torch_insert_writes_exactly_the_encoded_records(
    fmt: str, dtype: torch.dtype, rope: bool
) -> None:
    x, slots, pos, freqs = inputs(64, dtype, seed=1)
    cache = poisoned_cache(fmt, 64)
    kw = {"positions": pos, "freqs": freqs} if rope else {}
    insert(cache, x, slots, backend="torch", **kw)
    keep = slots >= 0
    y = apply_rope(x[keep], pos[keep], freqs) if rope else x[keep]
    data, scales = encode(fmt, y, backend="torch")
    flat = cache.storage.flatten()
    written = torch.zeros_like(flat, dtype=torch.bool)
    for i, slot in enumerate(slots[keep].tolist()):
        ds, ss = record_bytes(cache, slot)
        assert torch.equal(flat[ds], data[i]) and torch.equal(flat[ss], scales[i])
        written[ds] = True
        written[ss] = True
    assert (flat[~written] == POISON).all()  # nothing else touched, padding included


@pytest.mark.interpreter
@pytest.mark.parametrize("dim", [64, 512])
@pytest.mark.parametrize("fmt", FORMATS)
def test_triton_insert_and_gather_match_torch(fmt: str, dim: int, device: torch.device) -> None:
    for dtype, rope in ((torch.float32, True), (torch.bfloat16, True), (torch.bfloat16, False)):
        x, slots, pos, freqs = inputs(dim, dtype, seed=dim)
        ref = poisoned_cache(fmt, dim)
        kw = {"positions": pos, "freqs": freqs} if rope else {}
        insert(ref, x, slots, backend="torch", **kw)
        tri = poisoned_cache(fmt, dim, device)
        kw = {"positions": pos.to(device), "freqs": freqs.to(device)} if rope else {}
        insert(tri, x.to(device), slots.to(device), backend="triton", **kw)
        assert torch.equal(tri.storage.cpu(), ref.storage), (fmt, dtype, rope)
        read = torch.tensor([23, -1, 0, 5, 17, 9], dtype=torch.int32)
        g_ref = gather(ref, read, backend="torch")
        g_tri = gather(tri, read.to(device), backend="triton").cpu()
        assert torch.equal(g_tri.view(torch.int16), g_ref.view(torch.int16)), (fmt, dtype, rope)


@pytest.mark.interpreter
@pytest.mark.parametrize("fmt", ["mxfp8", "nvfp4", "mxfp4", "fp8_index"])
def test_triton_rope_rounds_to_bf16_before_quantizing(fmt: str, device: torch.device) -> None:
    # bf16 rows: the reference rounds the rotated row to bf16, then quantizes. Skipping that
    # rounding changes a few codes per thousand (double rounding), so use enough rows to see it.
    g = torch.Generator().manual_seed(8)
    x = (torch.randn(96, 64, generator=g) * 3).to(torch.bfloat16)
    pos = torch.randint(0, 100_000, (96,), generator=g)
    slots = torch.randperm(PAGES * PAGE * 4, generator=g)[:96]
    freqs = rope_freqs(RopeConfig(16, 160000.0, yarn_factor=4.0, yarn_orig=16))
    big = PAGES * 4
    ref = PagedCache.allocate(fmt, 64, PAGE, big)
    tri = PagedCache.allocate(fmt, 64, PAGE, big, device=device)
    insert(ref, x, slots, positions=pos, freqs=freqs, backend="torch")
    dev = {"positions": pos.to(device), "freqs": freqs.to(device)}
    insert(tri, x.to(device), slots.to(device), backend="triton", **dev)
    assert torch.equal(tri.storage.cpu(), ref.storage)
    # The caller's own tables (a model step computes them once): the same bytes.
    held = PagedCache.allocate(fmt, 64, PAGE, big, device=device)
    tables = rope_cos_sin(dev["positions"], dev["freqs"])
    insert(held, x.to(device), slots.to(device), backend="triton", rope_tables=tables, **dev)
    assert torch.equal(held.storage, tri.storage)


@pytest.mark.parametrize("fmt", FORMATS)
def test_gather_decodes_by_slot(fmt: str) -> None:
    x, slots, pos, freqs = inputs(64, torch.float32, seed=2)
    cache = poisoned_cache(fmt, 64)
    insert(cache, x, slots, positions=pos, freqs=freqs, backend="torch")
    read = torch.tensor([-1, 23, 9, 0, 5, 17, -1])
    out = gather(cache, read, backend="torch")
    assert out.dtype == torch.bfloat16 and out.shape == (7, 64)
    assert (out[0] == 0).all() and (out[-1] == 0).all()
    row_of = {s: i for i, s in enumerate(slots.tolist())}
    src = torch.stack([x[row_of[s]] for s in read[1:-1].tolist()])
    src_pos = torch.stack([pos[row_of[s]] for s in read[1:-1].tolist()])
    d, s = encode(fmt, apply_rope(src, src_pos, freqs), backend="torch")
    assert torch.equal(
        out[1:-1].view(torch.int16), decode(fmt, d, s, backend="torch").view(torch.int16)
    )


def test_insert_errors_write_nothing() -> None:
    x, slots, pos, freqs = inputs(64, torch.float32, seed=3)
    cache = poisoned_cache("mxfp8", 64)

    def untouched() -> bool:
        return bool((cache.storage == POISON).all())

    bad_calls = [
        (IndexError, "slots must lie in", dict(slots=torch.tensor([0, 1, 2, 3, 4, 5, 24]))),
        (IndexError, "slots must lie in", dict(slots=torch.tensor([0, 1, 2, 3, 4, 5, -2]))),
        (ValueError, "must not repeat", dict(slots=torch.tensor([0, 1, 2, 3, 4, 5, 0]))),
        (TypeError, "slots must be int32 or int64", dict(slots=slots.float())),
        (ValueError, r"slots must be 1-D \[7\]", dict(slots=slots[:5])),
        (ValueError, r"x must be \[N, 64\]", dict(x=x[:, :32])),
        (TypeError, "x must be float32 or bfloat16", dict(x=x.half())),
        (ValueError, "without positions", dict(positions=None)),
        (ValueError, r"positions must be \[7\]", dict(positions=pos[:3])),
        (TypeError, "freqs must be 1-D float32", dict(freqs=freqs.double())),
    ]
    for exc, msg, change in bad_calls:
        args = {"x": x, "slots": slots, "positions": pos, "freqs": freqs} | change
        with pytest.raises(exc, match=msg):
            insert(
                cache, args["x"], args["slots"], positions=args["positions"], freqs=args["freqs"]
            )
        assert untouched(), msg
    x_nan = x.clone()
    x_nan[4, 3] = float("inf")
    with pytest.raises(ValueError, match="finite"):
        insert(cache, x_nan, slots)
    with pytest.raises(ValueError, match="without freqs"):
        insert(cache, x, slots, positions=pos)
    cos, sin = rope_cos_sin(pos, freqs)
    with pytest.raises(ValueError, match=r"rope_tables sin must be float32 \[7, 8\]"):
        insert(cache, x, slots, positions=pos, freqs=freqs, rope_tables=(cos, sin[:, :4]))
    with pytest.raises(ValueError, match="rope_tables were given without"):
        insert(cache, x, slots, rope_tables=(cos, sin))
    with pytest.raises(TypeError, match="PagedCache"):
        insert(cache.storage, x, slots)  # type: ignore[arg-type]
    assert untouched()
    with pytest.raises(IndexError, match="slots must lie in"):
        gather(cache, torch.tensor([24]))


def test_insert_without_validation_and_empty_batches() -> None:
    x, slots, pos, freqs = inputs(64, torch.bfloat16, seed=4)
    a, b = poisoned_cache("nvfp4", 64), poisoned_cache("nvfp4", 64)
    insert(a, x, slots, positions=pos, freqs=freqs, backend="torch")
    insert(b, x, slots, positions=pos, freqs=freqs, backend="torch", validate=False)
    assert torch.equal(a.storage, b.storage)
    insert(a, x[:0], slots[:0], backend="torch")
    assert torch.equal(a.storage, b.storage)
    assert gather(a, slots[:0]).shape == (0, 64)


@pytest.mark.gpu
@pytest.mark.parametrize("fmt", FORMATS)
def test_cuda_insert_matches_cuda_torch_path(fmt: str) -> None:
    # Same device for both paths: the cos/sin table (torch.cos on CUDA) is shared, so the fused
    # kernel must reproduce the torch reference byte for byte.
    dev = torch.device("cuda")
    for dtype in (torch.float32, torch.bfloat16):
        x, slots, pos, freqs = inputs(512, dtype, seed=6)
        caches = []
        for backend in ("torch", "triton"):
            cache = poisoned_cache(fmt, 512, dev)
            insert(
                cache,
                x.to(dev),
                slots.to(dev),
                positions=pos.to(dev),
                freqs=freqs.to(dev),
                backend=backend,
            )
            caches.append(cache)
        assert torch.equal(caches[0].storage, caches[1].storage), (fmt, dtype)
        read = slots.to(dev)
        a = gather(caches[0], read, backend="torch")
        b = gather(caches[1], read, backend="triton")
        assert torch.equal(a.view(torch.int16), b.view(torch.int16)), (fmt, dtype)
