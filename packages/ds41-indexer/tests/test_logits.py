"""Paged indexer logits (SPEC section 6) against a float64 reference on decoded keys."""

from __future__ import annotations

import pytest
import torch
from helpers import make_queries, make_scenario, reference_logits, scale_edge_scenario

from ds41_cache.backend import interpreter_active
from ds41_cache.testing import triton_device
from ds41_indexer import index_logits
from ds41_indexer.ops.logits.naive import BF16_MAX, cast_logits

BACKENDS = ["torch", pytest.param("triton", marks=pytest.mark.interpreter)]
FORMATS = ["mxfp4", "fp8_index"]
DEV = triton_device()  # CUDA where present (the Triton backend needs it or the interpreter)
# the kernel's fp32 arithmetic for the interpreter (its bf16 / fp16 is unreliable); compiled, the
# GPU's path (the upcast variant does not compile)
UPCAST = interpreter_active()


def rows() -> tuple[torch.Tensor, torch.Tensor]:
    # Request 1 at several positions, a padding row, position 0, a row at its last entry.
    req = torch.tensor([0, 1, 1, 2, -1, 1, 0], dtype=torch.int32, device=DEV)
    pos = torch.tensor([36, 79, 40, 4, 3, 0, 10], dtype=torch.int32, device=DEV)
    return req, pos


def check_close(got: torch.Tensor, ref: torch.Tensor, bound: torch.Tensor, rel: float) -> None:
    assert got.dtype == torch.float32
    got = got.cpu()
    assert torch.equal(torch.isinf(got), torch.isinf(ref)), "-inf mask differs"
    assert bool((got[torch.isinf(got)] < 0).all())
    fin = torch.isfinite(ref)
    err = (got.double() - ref).abs()[fin]
    assert bool((err <= rel * bound[fin] + 1e-30).all()), float(err.max())


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("ratio", [1, 2])
def test_matches_float64_reference(backend: str, fmt: str, ratio: int) -> None:
    sc = make_scenario(fmt, [37, 80, 5], di=32, hi=4, page_size=8, seed=ratio, device=DEV)
    q, w = make_queries(7, 4, 32, seed=10 + ratio, device=DEV)
    req, pos = rows()
    pos = pos * ratio + (ratio - 1)  # keep n(p) within each request's entries
    got = index_logits(q, w, sc.cache, sc.block_table, req, pos, ratio, backend=backend)
    n_cols = sc.block_table.shape[1] * sc.cache.page_size
    assert got.shape == (7, n_cols)
    ref, bound = reference_logits(sc, q, w, req, pos, ratio, n_cols)
    check_close(got, ref, bound, 1e-6)


@pytest.mark.interpreter
@pytest.mark.parametrize("fmt", FORMATS)
def test_triton_matches_torch_v41_geometry(fmt: str) -> None:
    """Hi=32, Di=128 (V4.1-Flash index heads), one row per request."""
    sc = make_scenario(fmt, [70, 129], di=128, hi=32, page_size=64, seed=3, device=DEV)
    q, w = make_queries(2, 32, 128, seed=4, device=DEV)
    req = torch.tensor([1, 0], dtype=torch.int32, device=DEV)
    pos = torch.tensor([128, 69], dtype=torch.int32, device=DEV)
    a = index_logits(q, w, sc.cache, sc.block_table, req, pos, 1, backend="torch")
    b = index_logits(q, w, sc.cache, sc.block_table, req, pos, 1, backend="triton")
    ref, bound = reference_logits(sc, q, w, req, pos, 1, a.shape[1])
    check_close(a, ref, bound, 1e-6)
    check_close(b, ref, bound, 1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_candidates_mask_and_num_entries(backend: str) -> None:
    sc = make_scenario("mxfp4", [37, 80, 5], seed=5, device=DEV)
    q, w = make_queries(7, 4, 32, seed=6, device=DEV)
    req, pos = rows()
    g = torch.Generator().manual_seed(7)
    cand = torch.rand(7, 50, generator=g) < 0.5  # narrower than the row: entries >= 50 masked
    got = index_logits(
        q,
        w,
        sc.cache,
        sc.block_table,
        req,
        pos,
        1,
        candidates=cand.to(DEV),
        num_entries=60,
        backend=backend,
    )
    ref, bound = reference_logits(sc, q, w, req, pos, 1, 60)
    keep = torch.nn.functional.pad(cand, (0, 10))
    ref = torch.where(keep, ref, float("-inf"))
    check_close(got, ref, bound, 1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_rows_independent_and_decode_equals_prefill(backend: str) -> None:
    sc = make_scenario("mxfp4", [37, 80, 5], seed=8, device=DEV)
    q, w = make_queries(7, 4, 32, seed=9, device=DEV)
    req, pos = rows()
    args = (sc.cache, sc.block_table)
    full = index_logits(q, w, *args, req, pos, 1, backend=backend)
    perm = torch.tensor([6, 2, 0, 5, 1, 4, 3])
    assert torch.equal(
        index_logits(q[perm], w[perm], *args, req[perm], pos[perm], 1, backend=backend), full[perm]
    )
    for i in (1, 2):  # decode rows, alone
        one = index_logits(
            q[i : i + 1], w[i : i + 1], *args, req[i : i + 1], pos[i : i + 1], 1, backend=backend
        )
        assert torch.equal(one, full[i : i + 1])


@pytest.mark.parametrize("backend", BACKENDS)
def test_bf16_option(backend: str) -> None:
    sc = make_scenario("fp8_index", [37, 80, 5], seed=11, device=DEV)
    q, w = make_queries(7, 4, 32, seed=12, device=DEV)
    req, pos = rows()
    args = (q, w, sc.cache, sc.block_table, req, pos, 1)
    f32 = index_logits(*args, backend=backend)
    b16 = index_logits(*args, out_dtype=torch.bfloat16, backend=backend)
    assert b16.dtype == torch.bfloat16
    assert torch.equal(b16, f32.to(torch.bfloat16))  # in range: a plain round to nearest


def test_cast_keeps_finite_and_masks() -> None:
    x = torch.tensor([[3.4e38, -3.4e38, BF16_MAX, float("-inf"), 1.0, -2.5]])
    y = cast_logits(x, torch.bfloat16)
    assert y.dtype == torch.bfloat16
    assert torch.isfinite(y[0, [0, 1, 2, 4, 5]]).all()
    assert y[0, 3].item() == float("-inf")
    assert y[0, 0] == y[0, 2] and y[0, 1] == -y[0, 2]
    # Distinct after the cast -> same order (round to nearest is monotone).
    assert y[0, 4] > y[0, 5]


def test_bad_input() -> None:
    sc = make_scenario("mxfp4", [37, 80, 5], seed=13, device=DEV)
    q, w = make_queries(7, 4, 32, seed=14, device=DEV)
    req, pos = rows()
    bt = sc.block_table
    with pytest.raises(TypeError, match="q must be bfloat16"):
        index_logits(q.float(), w, sc.cache, bt, req, pos, 1)
    with pytest.raises(ValueError, match=r"weights must have shape \[7, 4\]"):
        index_logits(q, w[:, :3], sc.cache, bt, req, pos, 1)
    with pytest.raises(TypeError, match="block_table must be int32"):
        index_logits(q, w, sc.cache, bt.long(), req, pos, 1)
    with pytest.raises(IndexError, match="pos beyond the block table"):
        index_logits(q, w, sc.cache, bt, req, pos + 100, 1)
    with pytest.raises(IndexError, match="block_table entries used by live rows"):
        index_logits(q, w, sc.cache, bt, req, torch.full_like(pos, 60), 1)  # request 0 has 5 pages
    with pytest.raises(IndexError, match="req_idx must lie in"):
        index_logits(q, w, sc.cache, bt, torch.full_like(req, 3), pos, 1)
    with pytest.raises(ValueError, match="ratio must be a positive int"):
        index_logits(q, w, sc.cache, bt, req, pos, 0)
    wrong = make_scenario("mxfp4", [8], di=64, seed=0, device=DEV)
    with pytest.raises(ValueError, match=r"key_cache\.dim must equal the index head dim 32"):
        index_logits(q, w, wrong.cache, bt, req, pos, 1)


@pytest.mark.interpreter
@pytest.mark.skipif(
    not interpreter_active(),
    reason="compiled, the Triton logits kernel refuses tiles of fewer than 64 keys",
)
@pytest.mark.parametrize("config", [(32, 3, 4, 1), (16, 1, 4, 2)])
def test_triton_other_tiles(
    monkeypatch: pytest.MonkeyPatch, config: tuple[int, int, int, int]
) -> None:
    """Other tile shapes (rows ending mid-program, one tile per program) score the same entries
    under the interpreter; the default tile (the GPU's) runs in every other interpreter test.
    Compiled, tiles of fewer than 64 keys are refused (`COMPILED_BLOCK_N`). The Triton kernel is
    called directly: on a GPU `index_logits` dispatches to the Gluon kernel, whose spans are
    the default tile's."""
    from ds41_indexer.ops.logits import triton_kernels

    monkeypatch.setattr(triton_kernels, "TILE", config)
    sc = make_scenario("mxfp4", [37, 150, 5], seed=15, device=DEV)
    q, w = make_queries(7, 4, 32, seed=16, device=DEV)
    req, pos = rows()
    pos = torch.where(req == 1, pos + 70, pos)
    n = sc.block_table.shape[1] * sc.cache.page_size
    args = (sc.cache, sc.block_table)
    got = torch.empty(7, n, device=DEV)
    triton_kernels.paged_logits_triton(q, w, *args, req, pos, 1, got, upcast=UPCAST)
    ref, bound = reference_logits(sc, q, w, req, pos, 1, n)
    check_close(got, ref, bound, 1e-5)
    one = torch.empty(1, n, device=DEV)
    s = slice(1, 2)
    triton_kernels.paged_logits_triton(q[s], w[s], *args, req[s], pos[s], 1, one, upcast=UPCAST)
    assert torch.equal(one, got[1:2])


@pytest.mark.parametrize("backend", BACKENDS)
def test_extreme_scale_bytes(backend: str) -> None:
    """Scale bytes 0, 1 and 253 (outside the kernel's bit-construction range) decode exactly."""
    sc = make_scenario("mxfp4", [70], seed=17, page_size=64, device=DEV)
    g = torch.Generator().manual_seed(18)
    cache, table = sc.cache, sc.block_table
    page = int(table[0, 0])
    rows = torch.arange(0, 64, 3)  # entries of the first page
    data = cache.data_view()[page]
    nib_lo, nib_hi = data[rows] & 15, data[rows] >> 4
    # codes <= 5 (value <= 3) keep 3 * 2**126 finite in fp32
    nib_lo = torch.where((nib_lo & 7) > 5, nib_lo - 2, nib_lo)
    nib_hi = torch.where((nib_hi & 7) > 5, nib_hi - 2, nib_hi)
    data[rows] = nib_lo | (nib_hi << 4)
    choice = torch.tensor([0, 1, 253], dtype=torch.uint8, device=DEV)
    cache.scale_view()[page, rows, 0] = choice[torch.randint(0, 3, (len(rows),), generator=g)]
    from ds41_cache.insert import gather

    e = torch.arange(70, device=DEV)
    slots = table[0].long()[e // 64] * 64 + e % 64
    sc.keys[0] = gather(cache, slots, backend="torch").double().cpu()
    q, w = make_queries(2, 4, 32, seed=19, device=DEV)
    q = (q.float() * 2.0**-60).to(torch.bfloat16)  # exact power-of-two rescale
    req = torch.tensor([0, 0], dtype=torch.int32, device=DEV)
    pos = torch.tensor([69, 40], dtype=torch.int32, device=DEV)
    got = index_logits(q, w, cache, table, req, pos, 1, backend=backend)
    ref, bound = reference_logits(sc, q, w, req, pos, 1, got.shape[1])
    assert bool(torch.isfinite(ref[0, :70]).all())
    check_close(got, ref, bound, 1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_scale_range_edges(backend: str) -> None:
    """Scale bytes at the edges of the fp16 path (block spans of 32, bytes 250 and 10) and a
    page 33 apart (the general path) score like the float64 reference."""
    sc, q, w, req, pos = scale_edge_scenario(DEV)
    got = index_logits(q, w, sc.cache, sc.block_table, req, pos, 1, backend=backend)
    ref, bound = reference_logits(sc, q, w, req, pos, 1, got.shape[1])
    assert bool(torch.isfinite(ref[0, :128]).all()) and bool((ref[0, :128] != 0).any())
    check_close(got, ref, bound, 1e-5)


@pytest.mark.interpreter
def test_triton_grid_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows longer than one grid's worth of programs are launched in pieces, same values."""
    from ds41_indexer.ops.logits import triton_kernels

    sc = make_scenario("mxfp4", [300], seed=20, device=DEV)
    q, w = make_queries(2, 4, 32, seed=21, device=DEV)
    req = torch.tensor([0, 0], dtype=torch.int32, device=DEV)
    pos = torch.tensor([299, 100], dtype=torch.int32, device=DEV)
    whole = index_logits(q, w, sc.cache, sc.block_table, req, pos, 1, backend="triton")
    monkeypatch.setattr(triton_kernels, "MAX_GRID_Y", 1)
    pieces = index_logits(q, w, sc.cache, sc.block_table, req, pos, 1, backend="triton")
    assert torch.equal(pieces, whole)


def test_upcast_is_refused_outside_the_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fp32 variant is the interpreter's; a compiled launch asking for it gets an error
    naming the argument before anything runs."""
    from ds41_indexer.ops.logits import triton_kernels

    monkeypatch.setattr(triton_kernels, "interpreter_active", lambda: False)
    sc = make_scenario("mxfp4", [37, 80, 5], seed=24, device=DEV)
    q, w = make_queries(7, 4, 32, seed=25, device=DEV)
    req, pos = rows()
    out = torch.full((7, 40), 7.0, device=DEV)
    with pytest.raises(ValueError, match="upcast=True is the Triton interpreter's fp32 path"):
        triton_kernels.paged_logits_triton(
            q, w, sc.cache, sc.block_table, req, pos, 1, out, upcast=True
        )
    assert bool((out == 7.0).all())


def test_narrow_tile_is_refused_when_compiled(monkeypatch: pytest.MonkeyPatch) -> None:
    """A tile of fewer than COMPILED_BLOCK_N keys (wrong logits on the H200) is refused outside
    the interpreter, naming TILE, before anything runs."""
    from ds41_indexer.ops.logits import triton_kernels

    monkeypatch.setattr(triton_kernels, "interpreter_active", lambda: False)
    monkeypatch.setattr(triton_kernels, "TILE", (32, 3, 4, 1))
    sc = make_scenario("mxfp4", [37, 80, 5], seed=26, device=DEV)
    q, w = make_queries(7, 4, 32, seed=27, device=DEV)
    req, pos = rows()
    out = torch.full((7, 40), 7.0, device=DEV)
    with pytest.raises(ValueError, match=r"TILE\[0\] \(keys per tile\) must be 64"):
        triton_kernels.paged_logits_triton(q, w, sc.cache, sc.block_table, req, pos, 1, out)
    assert bool((out == 7.0).all())
