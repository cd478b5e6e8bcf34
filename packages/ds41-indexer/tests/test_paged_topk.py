"""The fused paged top-k: equal to the unfused path bitwise, per-row, prefill == decode."""

from __future__ import annotations

import pytest
import torch
from helpers import brute_topk_rows, make_queries, make_scenario

from ds41_cache.testing import triton_device
from ds41_indexer import candidate_blocks, index_logits, index_topk, paged_index_topk
from ds41_indexer.ops.logits.naive import visible_entries

BACKENDS = ["torch", pytest.param("triton", marks=pytest.mark.interpreter)]
DEV = triton_device()  # CUDA where present (the Triton backend needs it or the interpreter)


def setup(fmt: str = "mxfp4", seed: int = 0, hi: int = 4, di: int = 32):
    sc = make_scenario(fmt, [37, 150, 5], di=di, hi=hi, page_size=8, seed=seed, device=DEV)
    # A prefill chunk of request 1 (positions 100..103), decode rows of others, a padding row.
    req = torch.tensor([1] * 4 + [0, 2, -1, 0], dtype=torch.int32, device=DEV)
    pos = torch.tensor(list(range(100, 104)) + [36, 4, 7, 0], dtype=torch.int32, device=DEV)
    q, w = make_queries(len(req), hi, di, seed=seed + 1, device=DEV)
    return sc, q, w, req, pos


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fmt", ["mxfp4", "fp8_index"])
def test_fused_equals_unfused_and_python_sort(backend: str, fmt: str) -> None:
    sc, q, w, req, pos = setup(fmt, seed=1)
    args = (q, w, sc.cache, sc.block_table, req, pos, 1)
    logits = index_logits(*args, backend=backend)
    nv = visible_entries(req, pos, 1)
    for k in (8, 64):
        # Small segments/chunks: several segments and merge levels on the Triton path.
        kw = {"segment": 128, "chunk": 128} if backend == "triton" else {"segment": 64}
        fused = paged_index_topk(*args, k, backend=backend, **kw)
        assert fused.dtype == torch.int32 and fused.shape == (len(req), k)
        unfused = index_topk(logits, nv, k, backend=backend)
        assert torch.equal(fused, unfused)
        assert torch.equal(fused, brute_topk_rows(logits, nv, k))


@pytest.mark.parametrize("backend", BACKENDS)
def test_decode_rows_equal_prefill_rows(backend: str) -> None:
    sc, q, w, req, pos = setup(seed=2)
    args = (sc.cache, sc.block_table)
    prefill = paged_index_topk(q, w, *args, req, pos, 1, 16, backend=backend)
    for i in (0, 3, 4, 6):  # one at a time, as decode steps
        s = slice(i, i + 1)
        assert torch.equal(
            paged_index_topk(q[s], w[s], *args, req[s], pos[s], 1, 16, backend=backend), prefill[s]
        )
    perm = torch.randperm(len(req), generator=torch.Generator().manual_seed(3))
    assert torch.equal(
        paged_index_topk(q[perm], w[perm], *args, req[perm], pos[perm], 1, 16, backend=backend),
        prefill[perm],
    )
    # Row counts across any threshold: the batch repeated (and with CUDA-graph style padding rows).
    rep = 2
    big_req = torch.cat([req.repeat(rep), torch.full((5,), -1, dtype=torch.int32, device=DEV)])
    big_pos = torch.cat([pos.repeat(rep), torch.zeros(5, dtype=torch.int32, device=DEV)])
    big_q = torch.cat([q.repeat(rep, 1, 1), q[:5]])
    big_w = torch.cat([w.repeat(rep, 1), w[:5]])
    big = paged_index_topk(big_q, big_w, *args, big_req, big_pos, 1, 16, backend=backend)
    assert torch.equal(big[: rep * len(req)], prefill.repeat(rep, 1))
    assert (big[rep * len(req) :] == -1).all()


@pytest.mark.interpreter
def test_triton_agrees_with_torch_selection() -> None:
    """Cross-backend: logits within tolerance; the selector on Triton logits is bitwise torch's."""
    sc, q, w, req, pos = setup(seed=4)
    args = (q, w, sc.cache, sc.block_table, req, pos, 1)
    lt = index_logits(*args, backend="triton")
    lc = index_logits(*args, backend="torch")
    fin = torch.isfinite(lc)
    assert torch.equal(fin, torch.isfinite(lt))
    assert torch.allclose(lt[fin], lc[fin], rtol=1e-4, atol=1e-4)
    nv = visible_entries(req, pos, 1)
    fused = paged_index_topk(*args, 16, backend="triton")
    assert torch.equal(fused, index_topk(lt, nv, 16, backend="torch"))


@pytest.mark.parametrize("backend", BACKENDS)
def test_candidates_fewer_than_k_finite(backend: str) -> None:
    sc, q, w, req, pos = setup(seed=5)
    args = (q, w, sc.cache, sc.block_table, req, pos, 1)
    nv = visible_entries(req, pos, 1)
    logits = index_logits(*args, backend=backend)
    cand = candidate_blocks(logits, nv, 2, 4, backend=backend)  # <= 8 entries per row
    got = paged_index_topk(*args, 16, candidates=cand, backend=backend)
    masked = torch.where(cand, logits, float("-inf"))
    assert torch.equal(got, brute_topk_rows(masked, nv, 16))
    assert torch.equal(
        got,
        index_topk(index_logits(*args, candidates=cand, backend=backend), nv, 16, backend=backend),
    )
    # -inf entries inside n(p) fill up the row by index (validity is e < n(p)).
    row = got[0].tolist()
    assert len([e for e in row if e >= 0]) == 16


def visible_cases() -> list[tuple[torch.Tensor, torch.Tensor, int]]:
    """(req_idx, pos, ratio): padding rows, pos -1 and below, pos at the int32 edge, several
    ratios, and row counts across the kernel's block sizes (one and several programs)."""
    g = torch.Generator().manual_seed(11)
    cases = []
    edge = [0, -1, -2, -7, 1, 2, 3, 126, 127, 128, 2**31 - 1, 2**31 - 2, -(2**31)]
    for t, ratio in ((len(edge), 1), (len(edge), 4), (1, 128), (33, 3), (1500, 4), (2049, 1)):
        pos = torch.randint(-300, 1 << 21, (t,), generator=g, dtype=torch.int32)
        if t == len(edge):
            pos = torch.tensor(edge, dtype=torch.int32)
        req = torch.randint(-2, 5, (t,), generator=g, dtype=torch.int32)
        cases.append((req, pos, ratio))
    return cases


@pytest.mark.interpreter
def test_visible_counts_kernel_equals_torch() -> None:
    """The fused call's n(p) kernel == `visible_entries` (the torch expression) exactly."""
    from ds41_cache.outputs import empty
    from ds41_cache.testing import triton_device
    from ds41_indexer.ops.topk.triton_kernels import visible_counts

    dev = triton_device()
    for req, pos, ratio in visible_cases():
        got = visible_counts(req.to(dev), pos.to(dev), ratio, empty)
        assert got.dtype == torch.int32
        assert torch.equal(got.cpu(), visible_entries(req, pos, ratio))


@pytest.mark.interpreter
def test_long_row_segments() -> None:
    """A row longer than a segment: selection over segments equals the unfused selection."""
    sc = make_scenario("mxfp4", [3000], di=32, hi=2, page_size=64, seed=6, device=DEV)
    q, w = make_queries(2, 2, 32, seed=7, device=DEV)
    req = torch.tensor([0, 0], dtype=torch.int32, device=DEV)
    pos = torch.tensor([2999, 2047], dtype=torch.int32, device=DEV)
    args = (q, w, sc.cache, sc.block_table, req, pos, 1)
    nv = visible_entries(req, pos, 1)
    got = paged_index_topk(*args, 32, backend="triton", segment=1024, chunk=1024)
    logits = index_logits(*args, backend="triton")
    assert torch.equal(got, index_topk(logits, nv, 32, backend="torch"))
    assert torch.equal(
        paged_index_topk(*args, 32, backend="torch", segment=1024),
        index_topk(index_logits(*args, backend="torch"), nv, 32),
    )


def test_bad_input() -> None:
    sc, q, w, req, pos = setup(seed=8)
    bt = sc.block_table
    with pytest.raises(ValueError, match="k must be a positive int"):
        paged_index_topk(q, w, sc.cache, bt, req, pos, 1, 0)
    with pytest.raises(IndexError, match="pos beyond the block table"):
        paged_index_topk(q, w, sc.cache, bt, req, pos + 200, 1, 4)
    with pytest.raises(TypeError, match="weights must be float32"):
        paged_index_topk(q, w.double(), sc.cache, bt, req, pos, 1, 4)
    with pytest.raises(TypeError, match="candidates must be bool"):
        paged_index_topk(q, w, sc.cache, bt, req, pos, 1, 4, candidates=torch.zeros(len(req), 8))
    with pytest.raises(TypeError, match="pos must be int32"):
        paged_index_topk(q, w, sc.cache, bt, req, pos.long(), 1, 4)


@pytest.mark.interpreter
def test_row_count_thresholds(monkeypatch: pytest.MonkeyPatch) -> None:
    """The segment size shrinks as rows grow (scratch budget); the answer never changes."""
    from ds41_indexer import paged as paged_mod

    monkeypatch.setattr(paged_mod, "SCRATCH_BYTES", 4 * 4 * 128)  # T=1: one segment; T=4+: several
    assert paged_mod.segment_for(1, 152, 128) == 256 and paged_mod.segment_for(8, 152, 128) == 128
    sc, q, w, req, pos = setup(seed=9)
    args = (sc.cache, sc.block_table)
    full = paged_index_topk(q, w, *args, req, pos, 1, 8, backend="triton", chunk=128)
    for i in (0, 4):
        s = slice(i, i + 1)
        one = paged_index_topk(q[s], w[s], *args, req[s], pos[s], 1, 8, backend="triton", chunk=128)
        assert torch.equal(one, full[s])
    nv = visible_entries(req, pos, 1)
    assert torch.equal(
        full, index_topk(index_logits(q, w, *args, req, pos, 1, backend="triton"), nv, 8)
    )


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("where", ["q", "weights"])
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_validate_rejects_non_finite_inputs(backend: str, where: str, bad: float) -> None:
    """validate=True rejects a NaN/inf query or head weight on every backend (a NaN score would
    otherwise change the selection silently); the error names the argument."""
    sc, q, w, req, pos = setup(seed=10)
    if where == "q":
        q = q.clone()
        q[3, 1, 5] = bad
    else:
        w = w.clone()
        w[3, 2] = bad
    args = (q, w, sc.cache, sc.block_table, req, pos, 1)
    with pytest.raises(ValueError, match=f"{where} must be finite"):
        paged_index_topk(*args, 8, backend=backend)
    with pytest.raises(ValueError, match=f"{where} must be finite"):
        index_logits(*args, backend=backend)


@pytest.mark.interpreter
def test_kernel_reads_stay_in_bounds_without_validation() -> None:
    """validate=False with a request id past the table, a position past its width and pages
    outside the cache: the kernel reads nothing out of bounds; such keys score as zero keys and
    a request id outside the table is a padding row."""
    sc, q, w, req, pos = setup(seed=11)
    table = sc.block_table.clone()
    table[1, 2] = sc.cache.num_pages + 7  # entries 16..23 of request 1
    table[1, 3] = -5  # entries 24..31
    req = torch.tensor([1, 1, 9, 0], dtype=torch.int32, device=DEV)
    pos = torch.tensor([40, 10_000, 3, 20], dtype=torch.int32, device=DEV)
    q, w = q[:4], w[:4]
    args = (q, w, sc.cache, table, req, pos, 1)
    logits = index_logits(*args, backend="triton", validate=False)
    good = index_logits(q[:1], w[:1], sc.cache, sc.block_table, req[:1], pos[:1], 1)
    assert bool((logits[0, 16:32] == 0).all())
    assert torch.allclose(logits[0, :16], good[0, :16], rtol=1e-5)
    assert torch.allclose(logits[0, 32:41], good[0, 32:41], rtol=1e-5)
    assert bool(torch.isinf(logits[2]).all())
    n_cols = table.shape[1] * sc.cache.page_size
    assert bool(torch.isfinite(logits[1, :n_cols]).all())
    got = paged_index_topk(*args, 8, backend="triton", validate=False)
    assert bool((got >= -1).all()) and bool((got < n_cols).all()) and bool((got[0] >= 0).all())


@pytest.mark.interpreter
@pytest.mark.parametrize("masked", [False, True])
def test_fused_split_selector_equals_group_selector(
    monkeypatch: pytest.MonkeyPatch, masked: bool
) -> None:
    """Rows longer than a chunk in one segment take the split selector (chunk 64: runs of groups
    pruned by tau; chunk 256: a chunk per slice); forcing one program per row (no split) and
    the Python sort of the unfused logits agree, with candidate-block masking too."""
    from ds41_indexer.ops.topk import triton_kernels as tk

    sc = make_scenario("mxfp4", [700, 90], di=32, hi=2, page_size=64, seed=12, device=DEV)
    q, w = make_queries(3, 2, 32, seed=13, device=DEV)
    req = torch.tensor([0, 0, 1], dtype=torch.int32, device=DEV)
    pos = torch.tensor([699, 400, 89], dtype=torch.int32, device=DEV)
    args = (q, w, sc.cache, sc.block_table, req, pos, 1)
    nv = visible_entries(req, pos, 1)
    logits = index_logits(*args, backend="triton")
    cand = candidate_blocks(logits, nv, 3, 64, backend="triton") if masked else None
    ref = brute_topk_rows(logits if cand is None else torch.where(cand, logits, -torch.inf), nv, 8)
    for chunk in (64, 256):
        assert tk.use_split(3, logits.shape[1], chunk)
        got = paged_index_topk(*args, 8, candidates=cand, backend="triton", chunk=chunk)
        assert torch.equal(got, ref), chunk
    monkeypatch.setattr(tk, "SPLIT_MAX_ROWS", 0)
    got = paged_index_topk(*args, 8, candidates=cand, backend="triton", chunk=64)
    assert torch.equal(got, ref)
