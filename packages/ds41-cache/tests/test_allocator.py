"""PageAllocator: free list, refcounts, block table, errors."""

from __future__ import annotations

import pytest
import torch

from ds41_cache.allocator import CacheFullError, PageAllocator


def _alloc(
    num_pages: int = 10, page_size: int = 4, max_requests: int = 3, max_pages: int = 6
) -> PageAllocator:
    return PageAllocator(num_pages, page_size, max_requests, max_pages)


def _consistent(a: PageAllocator) -> None:
    """Refcounts equal the number of holders seen in the block table (no outside handles)."""
    counts = [0] * a.num_pages
    for req in range(a.max_requests):
        for page in a.pages_of(req):
            if page >= 0:
                counts[page] += 1
    assert counts == [a.refcount(p) for p in range(a.num_pages)]
    assert a.num_free == sum(c == 0 for c in counts)
    assert a.block_table.dtype == torch.int32
    assert tuple(a.block_table.shape) == (a.max_requests, a.max_pages_per_request)
    for req in range(a.max_requests):
        row = a.pages_of(req)
        assert a.block_table[req].tolist() == row + [-1] * (a.max_pages_per_request - len(row))


def test_ensure_allocates_distinct_pages_and_slots_follow_the_table() -> None:
    a = _alloc()
    assert a.num_free == 10
    a.ensure(0, 9)  # 3 pages
    a.ensure(1, 4)  # 1 page
    a.ensure(0, 12)  # still 3 pages
    assert len(a.pages_of(0)) == 3 and len(a.pages_of(1)) == 1
    assert len(set(a.pages_of(0) + a.pages_of(1))) == 4
    assert a.num_free == 6
    _consistent(a)
    positions = torch.tensor([0, 3, 4, 11, 7])
    table = a.pages_of(0)
    expected = [table[p // 4] * 4 + p % 4 for p in positions.tolist()]
    slots = a.slots(0, positions)
    assert slots.dtype == torch.int64 and slots.tolist() == expected
    with pytest.raises(IndexError, match="no page for position 12"):
        a.slots(0, [12])
    with pytest.raises(IndexError, match=r"positions must lie in \[0, 24\)"):
        a.slots(0, [24])
    with pytest.raises(IndexError, match="positions must lie"):
        a.slots(0, [-1])


def test_cache_full_is_all_or_nothing() -> None:
    a = _alloc(num_pages=5)
    a.ensure(0, 12)  # 3 pages
    table_before = a.block_table.clone()
    with pytest.raises(CacheFullError) as info:
        a.ensure(1, 13)  # needs 4, 2 free
    err = info.value
    assert isinstance(err, RuntimeError)
    assert err.request == 1 and err.needed == 4 and err.free == 2
    assert "request 1" in str(err) and "4 more page" in str(err) and "only 2" in str(err)
    assert a.num_free == 2 and torch.equal(a.block_table, table_before)
    assert not a.is_active(1)
    a.ensure(1, 8)
    assert a.num_free == 0
    _consistent(a)


def test_release_before_keeps_a_window_at_constant_pages() -> None:
    a = _alloc(num_pages=4, page_size=4, max_requests=1, max_pages=64)
    window = 8
    address = a.block_table.data_ptr()
    for p in range(200):  # decode one token at a time with a window of 8
        a.release_before(0, max(0, p - window + 1))
        a.ensure(0, p + 1)
        lo = max(0, p - window + 1)
        assert a.slots(0, list(range(lo, p + 1))).numel() == p + 1 - lo
        assert 4 - a.num_free == p // 4 - lo // 4 + 1  # only the window's pages are alive
        _consistent(a)
    assert a.block_table.data_ptr() == address  # CUDA graphs keep reading the same tensor
    row = a.pages_of(0)
    assert row[: (200 - window) // 4] == [-1] * ((200 - window) // 4)
    with pytest.raises(IndexError, match="no page for position 0"):
        a.slots(0, [0])
    assert a.release_before(0, 0) == 0


def test_share_refcounts_and_free() -> None:
    a = _alloc()
    a.ensure(0, 10)  # 3 pages
    a.share(0, 1, 2)
    assert a.pages_of(1) == a.pages_of(0)[:2]
    shared = a.pages_of(0)[:2]
    assert [a.refcount(p) for p in shared] == [2, 2]
    a.ensure(1, 16)  # extends past the shared prefix with fresh pages
    assert a.pages_of(1)[:2] == shared and len(set(a.pages_of(1))) == 4
    _consistent(a)
    a.free(0)
    assert [a.refcount(p) for p in shared] == [1, 1]
    assert all(p not in a._free for p in shared)
    _consistent(a)
    a.free(1)
    assert a.num_free == 10
    assert bool((a.block_table == -1).all())
    with pytest.raises(ValueError, match="double free"):
        a.free(1)


def test_release_before_does_not_free_shared_pages() -> None:
    a = _alloc()
    a.ensure(0, 8)
    a.share(0, 1, 2)
    assert a.release_before(1, 8) == 2
    assert a.pages_of(1) == [-1, -1]
    assert a.num_free == 8
    assert a.slots(0, [0, 7]).numel() == 2
    _consistent(a)


def test_handles_keep_pages_alive_after_the_request() -> None:
    a = _alloc()
    a.ensure(0, 8)
    held = a.pages_of(0)
    for page in held:
        a.incref(page)
    a.free(0)
    assert a.num_free == 8
    a.attach(2, held)  # a prefix-cache hit gives a new request the held pages
    assert a.pages_of(2) == held and [a.refcount(p) for p in held] == [2, 2]
    for page in held:
        a.decref(page)
    a.free(2)
    assert a.num_free == 10
    with pytest.raises(ValueError, match="double free"):
        a.decref(held[0])
    with pytest.raises(ValueError, match="incref needs a held page"):
        a.incref(held[0])


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="num_pages must be a positive int"):
        PageAllocator(0, 4, 1, 1)
    with pytest.raises(ValueError, match="page_size"):
        PageAllocator(4, 0, 1, 1)
    a = _alloc()
    with pytest.raises(IndexError, match=r"req must be an int in \[0, 3\)"):
        a.ensure(3, 1)
    with pytest.raises(IndexError, match="req must be"):
        a.ensure(-1, 1)
    with pytest.raises(ValueError, match=r"num_tokens must lie in \[0, 24\]"):
        a.ensure(0, 25)
    with pytest.raises(ValueError, match="pos must lie"):
        a.release_before(0, 25)
    with pytest.raises(ValueError, match="not active"):
        a.free(0)
    with pytest.raises(IndexError, match=r"page must be an int in \[0, 10\)"):
        a.incref(10)
    a.ensure(0, 4)
    with pytest.raises(ValueError, match="num_pages must lie"):
        a.share(0, 1, 2)
    with pytest.raises(ValueError, match="must differ"):
        a.share(0, 0, 1)
    a.ensure(1, 1)
    with pytest.raises(ValueError, match="must be empty"):
        a.share(0, 1, 1)
    with pytest.raises(IndexError, match="dst_req must be"):
        a.share(0, 7, 1)
    free_page = a._free[0]
    with pytest.raises(ValueError, match="is free"):
        a.attach(2, [free_page])
    with pytest.raises(ValueError, match="distinct"):
        a.attach(2, a.pages_of(0) * 2)
    _consistent(a)


def test_attach_with_holes_and_pages_needed() -> None:
    a = _alloc()
    a.ensure(0, 16)  # 4 pages
    assert a.pages_needed(0, 16) == 0 and a.pages_needed(0, 17) == 1 and a.pages_needed(1, 9) == 3
    tail = a.pages_of(0)[2:]
    a.attach(1, [-1, -1, *tail])  # a prefix hit that needs only the last window's pages
    assert a.pages_of(1) == [-1, -1, *tail]
    assert [a.refcount(p) for p in tail] == [2, 2]
    assert a.slots(1, [8, 15]).tolist() == a.slots(0, [8, 15]).tolist()
    with pytest.raises(IndexError, match="no page for position 0"):
        a.slots(1, [0])
    a.ensure(1, 20)  # extends after the attached pages only
    assert a.pages_of(1)[:4] == [-1, -1, *tail] and a.pages_of(1)[4] >= 0
    _consistent(a)
    a.free(0)
    a.free(1)
    assert a.num_free == 10
