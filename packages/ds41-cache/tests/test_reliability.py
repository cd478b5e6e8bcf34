"""Bad inputs (issue 13): one decided behaviour per input, the same on every backend.

Each test names the input and the behaviour: a named error with nothing changed when
validating, and, for the checks that need tensor values (host syncs, skipped by
`validate=False` / `check_finite=False`), kernels that stay inside their buffers.
"""

from __future__ import annotations

import pytest
import torch

import ds41_cache
from ds41_cache.allocator import PageAllocator
from ds41_cache.codec import decode, encode, quantize_dequantize
from ds41_cache.compressor import Compressor
from ds41_cache.formats import row_layout
from ds41_cache.indices import sparse_paged_indices
from ds41_cache.insert import gather, insert
from ds41_cache.paged import PagedCache, default_page_stride
from ds41_cache.rope import RopeConfig, rope_freqs
from ds41_cache.testing import triton_device

BACKENDS = [
    "torch",
    pytest.param("triton", marks=pytest.mark.interpreter),  # on CUDA when present
    pytest.param("cuda", marks=pytest.mark.gpu),
]
BF16_MAX = torch.finfo(torch.bfloat16).max  # (2 - 2^-7) * 2^127
POISON = 0xA5
PAGE, PAGES, GUARD = 4, 3, 2


def where(backend: str) -> tuple[torch.device, str]:
    """(device, backend argument) of a BACKENDS entry: Triton runs on CUDA when present (else
    under the interpreter), "cuda" is the Triton path on the GPU."""
    if backend == "torch":
        return torch.device("cpu"), "torch"
    return triton_device() if backend == "triton" else torch.device("cuda"), "triton"


def guarded_cache(
    fmt: str, dim: int, dev: torch.device | str = "cpu"
) -> tuple[PagedCache, torch.Tensor]:
    """A poisoned cache whose storage is the first PAGES rows of a larger buffer: bytes a kernel
    writes or reads past the cache land in the GUARD pages after it, where a test sees them."""
    stride = default_page_stride(row_layout(fmt, dim), PAGE)
    buf = torch.full((PAGES + GUARD, stride), POISON, dtype=torch.uint8, device=dev)
    return PagedCache(fmt, dim, PAGE, PAGES, stride, buf[:PAGES]), buf


def rows(n: int, dim: int, seed: int, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(n, dim, generator=g) + 0.5).to(dtype)


# ------------------------------------------------------------------ 1. insert: RoPE finiteness


FREQS = rope_freqs(RopeConfig(16, 160000.0))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_insert_rejects_nonfinite_freqs(backend: str, bad: float) -> None:
    dev, be = where(backend)
    cache, buf = guarded_cache("mxfp8", 64, dev)
    x, slots, pos = rows(3, 64, 0), torch.tensor([0, 5, 7]), torch.tensor([1, 2, 3])
    freqs = FREQS.clone()
    freqs[2] = bad
    with pytest.raises(ValueError, match="freqs must be finite"):
        insert(
            cache, x.to(dev), slots.to(dev), positions=pos.to(dev), freqs=freqs.to(dev), backend=be
        )
    assert bool((buf == POISON).all())


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_insert_checks_the_rotated_values(backend: str, dtype: torch.dtype) -> None:
    """Finite rows near the bf16 maximum overflow in the fp32 rotation (|x0*s + x1*c| can
    reach sqrt(2) |x|): the check applies to what would be quantized, after RoPE."""
    dev, be = where(backend)
    cache, buf = guarded_cache("mxfp8", 64, dev)
    x = rows(3, 64, 1, dtype)
    x[1, -16:] = 3.3e38  # every rope pair (x0, x1) = (3.3e38, 3.3e38)
    x, pos, slots = x.to(dev), torch.tensor([0, 7, 3], device=dev), torch.tensor([0, 5, 7]).to(dev)
    with pytest.raises(ValueError, match="after RoPE"):
        insert(cache, x, slots, positions=pos, freqs=FREQS.to(dev), backend=be)
    assert bool((buf == POISON).all())
    # Without RoPE the same finite row is range-checked as it is (it would decode to inf)
    with pytest.raises(ValueError, match="decode to inf"):
        insert(cache, x, slots, backend=be)
    assert bool((buf == POISON).all())


# ------------------------------------------------------------------ 2. compressor finiteness


def _compressor_step(ratio: int, dev: str = "cpu") -> tuple[Compressor, dict]:
    comp = Compressor(ratio, 32, max_requests=2, device=dev)
    g = torch.Generator().manual_seed(3)
    t = 4
    i32 = {"dtype": torch.int32, "device": dev}
    args = {
        "kv": torch.randn(t, 32, generator=g).to(dev),
        "score": torch.randn(t, 32, generator=g).to(dev) if ratio == 2 else None,
        "req_idx": torch.tensor([0, 0, 1, -1], **i32),
        "pos": torch.tensor([0, 1, 0, 0], **i32),
        "norm_weight": torch.ones(32, device=dev),
        "eps": 1e-6,
    }
    # one earlier step so the ring holds data that an error must leave alone
    comp(**{**args, "pos": torch.tensor([8, 9, 8, 0], **i32)})
    return comp, args


@pytest.mark.parametrize(
    "ratio,name,row,value",
    [
        (1, "kv", 0, float("nan")),
        (2, "kv", 1, float("nan")),
        (2, "score", 2, float("inf")),
        (2, "score", 0, float("-inf")),
        (2, "norm_weight", None, float("nan")),
    ],
)
def test_compressor_rejects_nonfinite_inputs(
    ratio: int, name: str, row: int | None, value: float
) -> None:
    comp, args = _compressor_step(ratio)
    before = comp.state.clone()
    bad = args[name].clone()
    if row is None:
        bad[5] = value
    else:
        bad[row, 5] = value
    with pytest.raises(ValueError, match=f"{name} .*must be finite"):
        comp(**{**args, name: bad})
    assert torch.equal(comp.state, before)
    # padding rows are never read, so their values are not checked
    if row is not None:
        pad = args[name].clone()
        pad[3] = value
        latent, _, _ = comp(**{**args, name: pad})
        assert bool(torch.isfinite(latent.float()).all())


def test_compressor_rejects_a_latent_that_overflows() -> None:
    """Finite fp32 kv beyond the bf16 range pools to inf in bf16: the latent check catches it
    before the ring is written."""
    comp, args = _compressor_step(2)
    before = comp.state.clone()
    kv = args["kv"].clone()
    kv[0:2, 4] = 3.399e38  # rounds to inf in bf16
    with pytest.raises(ValueError, match="latent"):
        comp(**{**args, "kv": kv})
    assert torch.equal(comp.state, before)
    with pytest.raises(ValueError, match="eps must be a finite"):
        comp(**{**args, "eps": float("nan")})


def test_load_state_rejects_nonfinite_snapshot() -> None:
    comp, _ = _compressor_step(2)
    before = comp.state.clone()
    snap = comp.state_snapshot(0)
    snap[3, 7] = float("nan")
    with pytest.raises(ValueError, match="snapshot must be finite"):
        comp.load_state(1, snap)
    assert torch.equal(comp.state, before)


@pytest.mark.parametrize("dev", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_compressor_without_validation_ignores_out_of_range_requests(dev: str) -> None:
    """validate=False: a req_idx outside [-1, max_requests) is treated as padding (no write,
    no emit) instead of indexing past the ring (a device-side assert on CUDA)."""
    comp, args = _compressor_step(2, dev)
    before = comp.state.clone()
    req = torch.tensor([5, 5, 2, -9], dtype=torch.int32, device=dev)
    latent, emit, entry = comp(**{**args, "req_idx": req}, validate=False)
    assert torch.equal(comp.state, before)
    assert not bool(emit.any()) and bool((entry == -1).all())
    assert bool((latent.float() == 0).all())


# ------------------------------------------------------------------ 3. near-max codecs


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "fmt,value,saturated",
    [
        # MXFP8 / fp8 index: e = 120 for amax > 1.75 * 2^127, where codes >= 256 decode to 2^128
        ("mxfp8", BF16_MAX, 240 * 2.0**120),
        ("fp8_index", BF16_MAX, 240 * 2.0**120),
        ("mxfp8", 1.9375 * 2.0**127, 240 * 2.0**120),  # 248 * 2^120: the first value that overflows
        # MXFP4: e = 126 for amax > 1.5 * 2^127, where code 4 decodes to 2^128
        ("mxfp4", BF16_MAX, 3 * 2.0**126),
        ("mxfp4", 1.75 * 2.0**127, 3 * 2.0**126),
    ],
)
def test_near_max_values_are_rejected_or_saturated(
    backend: str, fmt: str, value: float, saturated: float
) -> None:
    dev, be = where(backend)
    x = rows(2, 64, 4)
    x[1, 3] = value
    x[1, 40] = -value
    with pytest.raises(ValueError, match="decode to inf"):
        encode(fmt, x.to(dev), backend=be)
    with pytest.raises(ValueError, match="decode to inf"):
        quantize_dequantize(fmt, x.to(dev), backend=be)
    data, scales = encode(fmt, x.to(dev), backend=be, check_finite=False)
    ref = encode(fmt, x, backend="torch", check_finite=False)
    assert torch.equal(data.cpu(), ref[0]) and torch.equal(scales.cpu(), ref[1])
    y = decode(fmt, data, scales, backend=be).float().cpu()
    assert bool(torch.isfinite(y).all())
    assert float(y[1, 3]) == saturated and float(y[1, 40]) == -saturated


@pytest.mark.parametrize("backend", BACKENDS)
def test_bf16_format_rejects_fp32_beyond_the_bf16_range(backend: str) -> None:
    dev, be = where(backend)
    x = rows(1, 32, 5, torch.float32)
    x[0, 0] = 3.399e38  # rounds to inf in bf16
    x = x.to(dev)
    with pytest.raises(ValueError, match="decode to inf"):
        encode("bf16", x, backend=be)
    data, scales = encode("bf16", x, backend=be, check_finite=False)
    y = decode("bf16", data, scales, backend=be).cpu()
    assert float(y[0, 0]) == BF16_MAX


@pytest.mark.parametrize("backend", BACKENDS)
def test_values_just_below_the_limits_are_exact_to_the_spec_rule(backend: str) -> None:
    """The largest finite inputs that do not overflow encode by SPEC section 4 unchanged."""
    for fmt, value, want in (
        ("mxfp8", 1.9296875 * 2.0**127, 240 * 2.0**120),  # 247 * 2^120: e = 120, code 240
        ("fp8_index", 1.9296875 * 2.0**127, 240 * 2.0**120),
        ("mxfp4", 1.7421875 * 2.0**127, 3 * 2.0**126),  # e = 126, x * 2^-126 = 3.48: code 3
        ("mxfp4", 1.5 * 2.0**127, 1.5 * 2.0**127),  # amax / 6 = 2^125: e = 125, code 6
    ):
        dev, be = where(backend)
        x = rows(1, 64, 6)
        x[0, 0] = value
        y = quantize_dequantize(fmt, x.to(dev), backend=be).float().cpu()
        assert bool(torch.isfinite(y).all())
        assert float(y[0, 0]) == want, fmt


# ------------------------------------------------------------------ 4. allocator


@pytest.mark.parametrize("num_tokens", [2.5, "8", None, True, torch.tensor(3.0)])
def test_ensure_rejects_non_int_token_counts_and_changes_nothing(num_tokens: object) -> None:
    a = PageAllocator(num_pages=4, page_size=4, max_requests=2, max_pages_per_request=4)
    with pytest.raises(TypeError, match="num_tokens must be an int"):
        a.ensure(0, num_tokens)  # type: ignore[arg-type]
    assert not a.is_active(0) and a.num_free == 4 and a.extent(0) == 0
    assert bool((a.block_table == -1).all())


def test_ensure_accepts_int_like_token_counts() -> None:
    a = PageAllocator(num_pages=4, page_size=4, max_requests=2, max_pages_per_request=4)
    a.ensure(0, torch.tensor(5))  # type: ignore[arg-type]
    assert a.pages_of(0) == [0, 1]


def test_decref_refuses_request_mappings() -> None:
    a = PageAllocator(num_pages=4, page_size=4, max_requests=2, max_pages_per_request=4)
    a.ensure(0, 8)
    with pytest.raises(ValueError, match=r"page 1 .*no handle hold"):
        a.decref(1)
    assert a.refcount(1) == 1 and a.num_free == 2
    a.ensure(1, 8)
    assert set(a.pages_of(1)).isdisjoint(a.pages_of(0))
    # a handle hold can be dropped, once; the request's own hold stays
    a.incref(0)
    a.decref(0)
    with pytest.raises(ValueError, match=r"page 0 .*no handle hold"):
        a.decref(0)
    assert a.refcount(0) == 1
    # after the request lets go, the handle is the last holder and decref frees the page
    a.incref(0)
    a.free(0)
    assert a.refcount(0) == 1 and 0 not in a._free
    a.decref(0)
    assert a.refcount(0) == 0 and a.num_free == 2
    with pytest.raises(ValueError, match="already free"):
        a.decref(0)


def test_handle_holds_survive_sharing() -> None:
    a = PageAllocator(num_pages=4, page_size=4, max_requests=3, max_pages_per_request=4)
    a.ensure(0, 8)
    for p in a.pages_of(0):
        a.incref(p)
    a.free(0)
    a.attach(1, [0, 1])
    a.share(1, 2, 2)
    assert a.refcount(0) == 3
    a.decref(0)
    with pytest.raises(ValueError, match="no handle hold"):
        a.decref(0)
    a.free(1)
    a.free(2)
    assert a.refcount(0) == 0 and a.refcount(1) == 1
    a.decref(1)
    assert a.num_free == 4


# ------------------------------------------------------------------ 5. errors and bounds


@pytest.mark.parametrize(
    "change,match",
    [
        ({"num_pages": -1}, "num_pages must be an int >= 0"),
        ({"num_pages": 2.0}, "num_pages must be an int >= 0"),
        ({"page_size": 0}, "page_size must be a positive int"),
        ({"page_size": 1.5}, "page_size must be a positive int"),
        ({"dim": 48}, "dim must be a positive multiple of 32"),
        ({"dim": 64.0}, "dim must be a positive multiple of 32"),
        ({"page_stride": 100}, "page_stride must be"),
        ({"page_stride": 1024.0}, "page_stride must be"),
    ],
)
def test_paged_cache_allocate_names_bad_arguments(change: dict, match: str) -> None:
    args = {"fmt": "mxfp8", "dim": 64, "page_size": 4, "num_pages": 2} | change
    with pytest.raises(ValueError, match=match):
        PagedCache.allocate(**args)


@pytest.mark.parametrize(
    "args,match",
    [
        ((2, 64, 1.5), "max_requests must be a positive int"),
        ((2, 64, 0), "max_requests must be a positive int"),
        ((2, 64.0, 2), "dim must be a positive int"),
        ((2.0, 64, 2), "ratio must be one of"),
        ((True, 64, 2), "ratio must be one of"),
        ((2, 64, 2, 8.0), "capacity must be a power of two"),
    ],
)
def test_compressor_constructor_names_bad_arguments(args: tuple, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        Compressor(*args)


def _indices(
    backend: str, table: torch.Tensor, comp_table: torch.Tensor, validate: bool
) -> list[list[int]]:
    dev, be = where(backend)
    i32 = {"dtype": torch.int32, "device": dev}
    out = sparse_paged_indices(
        torch.tensor([0, 1], **i32),
        torch.tensor([6, 3], **i32),
        table.to(dev),
        4,
        torch.zeros(2, **i32),
        torch.tensor([[0, 1], [1, 0]], **i32),
        comp_table.to(dev),
        2,
        swa_page_size=4,
        comp_page_size=1,
        backend=be,  # type: ignore[arg-type]
        validate=validate,
    )
    return [t.tolist() for t in out if t is not None]


@pytest.mark.parametrize("backend", BACKENDS)
def test_indices_missing_page_one_behaviour(backend: str) -> None:
    """A needed block-table entry of -1: IndexError on every backend when validating; with
    validate=False every backend returns slot -1 there and the lengths still count it."""
    i32 = torch.int32
    table = torch.tensor([[2, -1], [0, 1]], dtype=i32)  # row 0 needs positions 3..6
    comp_table = torch.tensor([[0, -1], [-1, 3]], dtype=i32)
    ok_table = torch.tensor([[2, 3], [0, 1]], dtype=i32)
    ok_comp = torch.tensor([[0, 1], [2, 3]], dtype=i32)
    for bad in ((table, ok_comp), (ok_table, comp_table)):
        with pytest.raises(IndexError, match="needs a page"):
            _indices(backend, *bad, True)
    swa, swa_len, comp, comp_len = _indices(backend, table, comp_table, False)
    assert swa == [[11, -1, -1, -1], [0, 1, 2, 3]] and swa_len == [4, 4]
    assert comp == [[0, -1], [3, -1]] and comp_len == [2, 2]
    swa, _, comp, _ = _indices(backend, ok_table, ok_comp, True)
    assert swa == [[11, 12, 13, 14], [0, 1, 2, 3]] and comp == [[0, 1], [3, 2]]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fmt", ["mxfp8", "nvfp4", "bf16"])
def test_unvalidated_out_of_range_slots_stay_inside_the_cache(backend: str, fmt: str) -> None:
    """validate=False: slots outside [-1, num_slots) are skipped by insert and read as zeros by
    gather, like -1; nothing outside the cache's storage is read or written."""
    dev, be = where(backend)
    cache, buf = guarded_cache(fmt, 64, dev)
    x = rows(4, 64, 7)
    n = cache.num_slots
    slots = torch.tensor([n, 3, n + PAGE + 1, -5])
    insert(cache, x.to(dev), slots.to(dev), backend=be, validate=False)
    assert bool((buf[PAGES:] == POISON).all())  # guard pages untouched
    ref, _ = guarded_cache(fmt, 64)
    insert(ref, x[1:2], torch.tensor([3]), backend="torch")
    assert torch.equal(cache.storage.cpu(), ref.storage)
    # data in the guard that a stray read would decode
    d, _ = encode(fmt, x[:1], backend="torch")
    buf[PAGES, : d.shape[1]] = d[0].to(dev)
    read = torch.tensor([n, 3, -4, n + 2 * PAGE - 1], device=dev)
    out = gather(cache, read, backend=be, validate=False).cpu()
    assert bool((out[[0, 2, 3]].float() == 0).all())
    assert torch.equal(out[1], gather(ref, torch.tensor([3]), backend="torch")[0])


# ------------------------------------------------------------------ 7. module names


def test_output_allocations_live_in_outputs() -> None:
    """`ds41_cache.outputs` (poisoned output allocations) is not confusable with
    `ds41_cache.allocator` (the page allocator)."""
    import importlib

    outputs = importlib.import_module("ds41_cache.outputs")
    assert ds41_cache.empty is outputs.empty
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("ds41_cache.alloc")


# ------------------------------------------------------------------ unchecked non-finite input

F32_MAX = torch.finfo(torch.float32).max


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_unchecked_nonfinite_values_encode_as_zero_or_saturated(
    backend: str, dtype: torch.dtype
) -> None:
    """check_finite=False: NaN encodes as +0 and +-inf as +-fp32 max (then saturated like any
    near-max value), identically on every backend: no record decodes to NaN or inf."""
    dev, be = where(backend)
    x = rows(3, 64, 8, dtype)
    x[0, 1], x[0, 40], x[1, 7], x[2, 0:3] = float("nan"), float("inf"), -float("inf"), float("nan")
    clean = torch.nan_to_num(x.float(), nan=0.0, posinf=F32_MAX, neginf=-F32_MAX)
    for fmt in ("mxfp8", "nvfp4", "mxfp4", "fp8_index", "bf16"):
        data, scales = encode(fmt, x.to(dev), backend=be, check_finite=False)
        want = encode(fmt, clean, backend="torch", check_finite=False)
        assert torch.equal(data.cpu(), want[0]) and torch.equal(scales.cpu(), want[1]), fmt
        y = decode(fmt, data, scales, backend=be).float().cpu()
        assert bool(torch.isfinite(y).all()), fmt


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_unvalidated_insert_of_nonfinite_rows_agrees_across_backends(
    backend: str, dtype: torch.dtype
) -> None:
    """validate=False with NaN freqs or rows that overflow in the rotation: every backend
    writes the bytes of the torch reference, and they decode to finite values."""
    dev, be = where(backend)
    x = rows(4, 64, 9, dtype)
    x[1, -16:] = 3.3e38  # overflows to inf in the rotation
    x[2, 5] = float("nan")
    freqs = FREQS.clone()
    freqs[3] = float("nan")
    slots, pos = torch.tensor([0, 5, 7, 9]), torch.tensor([3, 7, 1, 2])
    cache, _ = guarded_cache("mxfp8", 64, dev)
    insert(
        cache,
        x.to(dev),
        slots.to(dev),
        positions=pos.to(dev),
        freqs=freqs.to(dev),
        backend=be,
        validate=False,
    )
    # the torch path on the same device (cos/sin tables are per device)
    ref, _ = guarded_cache("mxfp8", 64, dev)
    args = (x.to(dev), slots.to(dev))
    insert(ref, *args, positions=pos.to(dev), freqs=freqs.to(dev), backend="torch", validate=False)
    assert torch.equal(cache.storage, ref.storage)
    y = gather(cache, slots.to(dev), backend=be).float()
    assert bool(torch.isfinite(y).all())


def test_lookup_slots_treats_out_of_range_requests_as_missing() -> None:
    """`lookup_slots` (graph path, no host syncs) never indexes past the block table: a
    request id outside [0, R) has no pages (slot -1; `missing` where the slot is needed)."""
    from ds41_cache.paged import lookup_slots

    table = torch.tensor([[3, 1], [0, 2]], dtype=torch.int32)
    req = torch.tensor([1, 2, -1, 7, -1, 0])
    pos = torch.tensor([5, 0, 1, 2, 1, -3])
    needed = torch.tensor([True, True, False, True, True, True])
    slots, missing = lookup_slots(table, req, pos, 4, needed)
    assert slots.tolist() == [9, -1, -1, -1, -1, -1]
    assert missing.tolist() == [False, True, False, True, True, True]
