"""The selector (SPEC section 6) against an independent Python-sort reference."""

from __future__ import annotations

import pytest
import torch
from helpers import brute_topk_rows

from ds41_cache.outputs import empty
from ds41_indexer import index_topk
from ds41_indexer.ops.topk.triton_kernels import index_topk_triton, k_pad_of

BACKENDS = ["torch", pytest.param("triton", marks=pytest.mark.interpreter)]


def run(
    backend: str,
    logits: torch.Tensor,
    nv: torch.Tensor,
    k: int,
    chunk: int | None = None,
    split: bool | None = None,
) -> torch.Tensor:
    if backend == "torch":
        return index_topk(logits, nv, k, backend="torch")
    # Small chunks force several merge levels at test sizes (the interpreter pays per program).
    if chunk is not None:
        chunk = max(chunk, 2 * k_pad_of(k), 64)
    # CUDA tensors where a GPU is present (the kernels' real target), else the interpreter's
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    out = index_topk_triton(
        logits.contiguous().to(dev), nv.to(dev), k, empty, chunk=chunk, split=split
    )
    return out.cpu()


def tie_rows(n: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    rows = [
        torch.randn(n, generator=g),  # distinct
        torch.full((n,), 0.75),  # all equal
        torch.where(torch.rand(n, generator=g) < 0.5, 0.0, -0.0),  # all zero after ReLU, both signs
        torch.randn(n, generator=g).mul(2).round().div(2).to(torch.bfloat16).float(),  # few levels
        (1 + torch.randn(n, generator=g) * 1e-4).to(torch.bfloat16).float(),  # bf16-collapsed
        torch.where(torch.rand(n, generator=g) < 0.9, float("-inf"), torch.randn(n, generator=g)),
        torch.full((n,), float("-inf")),
    ]
    return torch.stack(rows)


@pytest.mark.parametrize("backend", BACKENDS)
def test_random_rows_match_python_sort(backend: str) -> None:
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(6, 300, generator=g)
    nv = torch.tensor([300, 299, 1, 64, 150, 0], dtype=torch.int32)
    for k, chunk in ((1, None), (7, 64), (16, None), (40, 128)):
        got = run(backend, logits, nv, k, chunk)
        assert got.dtype == torch.int32 and got.shape == (6, k)
        assert torch.equal(got, brute_topk_rows(logits, nv, k)), k


@pytest.mark.parametrize("backend", BACKENDS)
def test_ties_zeros_and_neg_inf(backend: str) -> None:
    logits = tie_rows(200, 2)
    for nv_val, k, chunk in ((200, 9, 64), (130, 33, None), (5, 9, None), (0, 4, None)):
        nv = torch.full((logits.shape[0],), nv_val, dtype=torch.int32)
        got = run(backend, logits, nv, k, chunk)
        assert torch.equal(got, brute_topk_rows(logits, nv, k)), (nv_val, k)


@pytest.mark.parametrize("backend", BACKENDS)
def test_k_larger_than_visible(backend: str) -> None:
    logits = torch.randn(3, 10, generator=torch.Generator().manual_seed(3))
    nv = torch.tensor([10, 3, 0], dtype=torch.int32)
    got = run(backend, logits, nv, 16)
    assert torch.equal(got[0, :10], torch.arange(10, dtype=torch.int32))
    assert torch.equal(got[1, :3], torch.arange(3, dtype=torch.int32))
    assert (got[0, 10:] == -1).all() and (got[1, 3:] == -1).all() and (got[2] == -1).all()


@pytest.mark.parametrize("backend", BACKENDS)
def test_masked_rows_select_neg_inf_by_index(backend: str) -> None:
    """Fewer than k finite scores: validity is e < n(p), so -inf entries fill up by index."""
    logits = torch.full((2, 50), float("-inf"))
    logits[0, [3, 17, 40]] = torch.tensor([1.0, 3.0, 2.0])
    logits[1, 45] = 5.0
    nv = torch.tensor([50, 30], dtype=torch.int32)
    got = run(backend, logits, nv, 6)
    assert got[0].tolist() == [0, 1, 2, 3, 17, 40]
    assert got[1].tolist() == [0, 1, 2, 3, 4, 5]  # 45 is beyond n(p)
    assert torch.equal(got, brute_topk_rows(logits, nv, 6))


@pytest.mark.interpreter
def test_triton_default_chunk_and_bf16_input() -> None:
    g = torch.Generator().manual_seed(4)
    logits = torch.randn(2, 5000, generator=g).to(torch.bfloat16)
    nv = torch.tensor([5000, 4097], dtype=torch.int32)
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    got = index_topk(logits.to(dev), nv.to(dev), 20, backend="triton").cpu()
    assert torch.equal(got, brute_topk_rows(logits.float(), nv, 20))
    assert torch.equal(got, index_topk(logits, nv, 20, backend="torch"))


@pytest.mark.interpreter
@pytest.mark.parametrize("split", [False, True])
def test_group_selector_buckets_and_reductions(split: bool) -> None:
    """Long rows with a small chunk: more groups than the bucket registers (buckets of several
    groups), tie-heavy rows whose candidates overflow the region (several reductions), a row
    whose finite scores sit in fewer than k groups, and mostly -inf rows; one program per row
    and the split selector (slices that reduce their own candidates, then the merge)."""
    n = 4500  # 71 groups of 64: still more than the bucket registers
    logits = tie_rows(n, 7)
    spread = torch.full((n,), float("-inf"))
    spread[torch.arange(0, n, 97)] = torch.randn(
        -(-n // 97), generator=torch.Generator().manual_seed(8)
    )
    logits = torch.cat(
        [logits, spread[None], torch.randn(1, n, generator=torch.Generator().manual_seed(9))]
    )
    g = torch.Generator().manual_seed(10)
    nv = torch.randint(n // 2, n + 1, (logits.shape[0],), generator=g, dtype=torch.int32)
    nv[0] = n
    for k in (5, 40):
        got = run("triton", logits, nv, k, chunk=64, split=split)
        assert torch.equal(got, index_topk(logits, nv, k, backend="torch")), k
        assert torch.equal(got, brute_topk_rows(logits, nv, k)), k


@pytest.mark.parametrize("backend", BACKENDS)
def test_rows_are_independent(backend: str) -> None:
    g = torch.Generator().manual_seed(5)
    logits = tie_rows(160, 6)
    logits = torch.cat([logits, torch.randn(5, 160, generator=g)])
    nv = torch.randint(0, 161, (logits.shape[0],), generator=g, dtype=torch.int32)
    full = run(backend, logits, nv, 12)
    perm = torch.randperm(logits.shape[0], generator=g)
    assert torch.equal(run(backend, logits[perm], nv[perm], 12), full[perm])
    for i in (0, 3, logits.shape[0] - 1):
        assert torch.equal(run(backend, logits[i : i + 1], nv[i : i + 1], 12), full[i : i + 1])
    big = logits.repeat(2, 1)
    assert torch.equal(run(backend, big, nv.repeat(2), 12), full.repeat(2, 1))
    # The row count never picks another code path: a merge-level run agrees too.
    assert torch.equal(run(backend, logits[:3], nv[:3], 12, chunk=32), full[:3])


def test_bad_input() -> None:
    logits = torch.randn(2, 8)
    nv = torch.tensor([8, 3], dtype=torch.int32)
    with pytest.raises(ValueError, match="k must be a positive int"):
        index_topk(logits, nv, 0)
    with pytest.raises(TypeError, match="logits must be float32 or bfloat16"):
        index_topk(logits.double(), nv, 2)
    with pytest.raises(TypeError, match="n_visible must be int32"):
        index_topk(logits, nv.long(), 2)
    with pytest.raises(ValueError, match="n_visible must have shape"):
        index_topk(logits, nv[:1], 2)
    with pytest.raises(ValueError, match=r"n_visible must lie in \[0, 8\]"):
        index_topk(logits, torch.tensor([9, 3], dtype=torch.int32), 2)
    with pytest.raises(ValueError, match="NaN"):
        index_topk(torch.full((2, 8), float("nan")), nv, 2)
    with pytest.raises(ValueError, match="backend must be one of"):
        index_topk(logits, nv, 2, backend="cuda")


def test_million_entry_row_torch() -> None:
    """A row past 2**20 entries (bf16-rounded, so with many ties) against the Python sort."""
    g = torch.Generator().manual_seed(8)
    n = (1 << 20) + 77
    logits = torch.randn(1, n, generator=g).to(torch.bfloat16).float()
    nv = torch.tensor([n - 5], dtype=torch.int32)
    got = index_topk(logits, nv, 512)
    assert torch.equal(got, brute_topk_rows(logits, nv, 512))
