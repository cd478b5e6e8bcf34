"""The split selector (slices of a row on several programs, then one merge per row) against the
Python sort and against one program per row. Tiny chunks force both slice kinds (a chunk per
slice; runs of groups pruned by tau) on sizes the interpreter runs in seconds."""

from __future__ import annotations

import pytest
import torch
from helpers import brute_topk_rows
from hypothesis import given
from hypothesis import strategies as st

from ds41_cache.outputs import empty
from ds41_cache.testing import triton_device
from ds41_indexer.ops.topk.triton_kernels import (
    done_counters,
    index_topk_triton,
    k_pad_of,
    split_plan,
    use_split,
)

pytestmark = pytest.mark.interpreter
DEV = triton_device()  # CUDA where present (the Triton kernels need it or the interpreter)


def split_topk(logits: torch.Tensor, nv: torch.Tensor, k: int, chunk: int, split: bool):
    """The selector on DEV; the answer back on the CPU, where the references are."""
    got = index_topk_triton(
        logits.contiguous().to(DEV), nv.to(DEV), k, empty, chunk=chunk, split=split
    )
    return got.cpu()


def make_row(kind: str, n: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, generator=g)
    if kind == "levels":  # few distinct values: ties at the threshold
        return x.mul(2).round().div(2)
    if kind == "zeros":  # +0.0 and -0.0 tie
        return torch.where(x < 0, -0.0, 0.0)
    if kind == "ninf":  # mostly -inf: fewer than k finite scores
        return torch.where(torch.rand(n, generator=g) < 0.95, float("-inf"), x)
    if kind == "equal":  # every entry a candidate: slices overflow and reduce
        return torch.full((n,), 0.5)
    if kind == "staged":  # chunk 64, k <= 3: a slice reduces, then gets only a few more
        row = torch.full((n,), -1.0)
        for group, count in ((0, 64), (1, 40), (2, 10)):
            row[group * 64 : group * 64 + count] = 1.0
        return row
    if kind == "clustered":  # the winners in one run of entries: one slice holds them all
        start = int(torch.randint(0, n, (1,), generator=g))
        return torch.where((torch.arange(n) - start).abs() < 40, x + 8, x)
    return x


def test_plan_and_dispatch() -> None:
    """Rows of at most `slices` chunks: one chunk per slice; longer rows: runs of groups, with at
    most chunk // k_pad slices so the merge holds one chunk."""
    assert split_plan(4096 * 8, 512, 4096) == (False, 8)
    assert split_plan(4096 * 3, 512, 4096) == (False, 4)
    assert split_plan(4096 * 8 + 1, 512, 4096) == (True, 8)
    assert split_plan(1 << 20, 1024, 4096) == (True, 4)
    assert split_plan(300, 16, 64) == (True, 4)
    assert not use_split(1, 4096, 4096) and use_split(1, 4097, 4096)
    # few rows of long rows split; past SPLIT_MAX_ENTRIES the group selector fills the SMs
    assert use_split(1, 1 << 20, 4096) and use_split(64, 1 << 15, 4096)
    assert not use_split(64, 1 << 17, 4096) and not use_split(65, 8192, 4096)


@pytest.mark.parametrize("k", [3, 8])
def test_slice_kinds_and_edges(k: int) -> None:
    """Both slice kinds, a slice whose candidates overflow its region (several reductions), slices
    without groups (few visible entries), a slice whose last candidates fit after a reduction
    (its list is the reduced one plus those), rows with fewer than k visible or finite entries, an
    empty row: split == one program per row == the Python sort."""
    kinds = ["randn", "levels", "zeros", "ninf", "equal", "clustered", "staged"]
    n = 1500
    logits = torch.stack([make_row(kind, n, 10 + i) for i, kind in enumerate(kinds)])
    logits = torch.cat([logits, logits[:2]])
    nv = torch.tensor([n, n - 7, n, n, n, 1200, n, 70, 0], dtype=torch.int32)
    ref = brute_topk_rows(logits, nv, k)
    for chunk in (64, 512):  # (prune, 4 slices) and (one chunk per slice, 4 slices)
        assert split_plan(n, k_pad_of(k), chunk)[0] == (chunk == 64)
        got = split_topk(logits, nv, k, chunk, split=True)
        assert torch.equal(got, ref), chunk
    assert torch.equal(split_topk(logits, nv, k, 64, split=False), ref)


@given(
    n=st.integers(65, 900),
    k=st.sampled_from([1, 5, 16, 20]),
    kinds=st.lists(
        st.sampled_from(["randn", "levels", "zeros", "ninf", "equal", "clustered"]),
        min_size=1,
        max_size=3,
    ),
    seed=st.integers(0, 2**16),
    data=st.data(),
)
def test_split_matches_python_sort(
    n: int, k: int, kinds: list[str], seed: int, data: st.DataObject
) -> None:
    rows = torch.stack([make_row(kind, n, seed + i) for i, kind in enumerate(kinds)])
    nv = torch.tensor(
        data.draw(st.lists(st.integers(0, n), min_size=len(kinds), max_size=len(kinds))),
        dtype=torch.int32,
    )
    got = split_topk(rows, nv, k, 64, split=True)
    assert torch.equal(got, brute_topk_rows(rows, nv, k))


def test_counters_left_zero_for_the_next_launch() -> None:
    """The last slice of each row merges and sets the row's counter back to 0: back-to-back
    launches of both slice kinds, with other rows and data, each give the Python sort's answer."""
    for chunk, n, t in ((64, 1500, 3), (512, 1500, 2), (64, 700, 5)):
        rows = torch.stack([make_row("levels" if i % 2 else "randn", n, 40 + i) for i in range(t)])
        nv = torch.full((t,), n - 3, dtype=torch.int32)
        got = split_topk(rows, nv, 5, chunk, split=True)
        assert torch.equal(got, brute_topk_rows(rows, nv, 5)), (chunk, n, t)
        assert not bool(done_counters(t, DEV).any())


def test_wide_counts_one_program() -> None:
    """Sets of more than 2^15 keys count two cut points in one int64 (32-bit fields): distinct
    rows (the search stops at an exact cut) and tie-heavy rows (it runs to the k-th key), with
    a row of fewer than k visible entries."""
    n = 40000
    kinds = ["randn", "levels", "equal", "zeros", "ninf"]
    rows = torch.stack([make_row(kind, n, 60 + i) for i, kind in enumerate(kinds)])
    nv = torch.tensor([n, n - 1, n, 35000, 200], dtype=torch.int32)
    for k in (3, 300):
        got = index_topk_triton(rows.to(DEV), nv.to(DEV), k, empty, chunk=65536).cpu()
        assert torch.equal(got, brute_topk_rows(rows, nv, k)), k
