"""PageAllocator's deferred block-table upload (`deferred_sync=True` + `flush`) and its O(1)
window release: the device table equals the immediate-sync allocator's after every flush, and
`release_before` gives the same pages back whether called once or step by step."""

from __future__ import annotations

import random

import pytest
import torch

from ds41_cache.allocator import NO_PAGE, PageAllocator


def _random_ops(seed: int, alloc: PageAllocator, ref: PageAllocator) -> None:
    rng = random.Random(seed)
    pos = [0] * alloc.max_requests
    for _ in range(60):
        req = rng.randrange(alloc.max_requests)
        op = rng.random()
        if op < 0.5:
            n = min(alloc.max_tokens, pos[req] + rng.randint(1, 9))
            if alloc.pages_needed(req, n) <= alloc.num_free:
                alloc.ensure(req, n)
                ref.ensure(req, n)
                pos[req] = n
        elif op < 0.8:
            cut = rng.randint(0, pos[req])
            assert alloc.release_before(req, cut) == ref.release_before(req, cut)
        elif alloc.is_active(req):
            alloc.free(req)
            ref.free(req)
            pos[req] = 0
        if rng.random() < 0.3:
            alloc.flush()
            assert torch.equal(alloc.block_table.cpu(), ref.block_table.cpu())
    alloc.flush()
    assert not alloc.pending_sync
    assert torch.equal(alloc.block_table.cpu(), ref.block_table.cpu())
    assert alloc.num_free == ref.num_free


def test_deferred_sync_matches_immediate(device: torch.device) -> None:
    for seed in range(5):
        deferred = PageAllocator(12, 4, 3, 6, device, deferred_sync=True)
        immediate = PageAllocator(12, 4, 3, 6, device)
        _random_ops(seed, deferred, immediate)


def test_deferred_rows_wait_for_flush(device: torch.device) -> None:
    a = PageAllocator(8, 4, 2, 4, device, deferred_sync=True)
    a.ensure(1, 9)
    assert a.pending_sync
    assert (a.block_table.cpu() == NO_PAGE).all(), "a deferred change reached the device early"
    a.flush()
    assert a.block_table.cpu()[1].tolist() == [0, 1, 2, NO_PAGE]


def test_release_before_resumes_where_it_stopped() -> None:
    a = PageAllocator(16, 2, 1, 8)
    a.ensure(0, 16)
    got = [a.release_before(0, p) for p in range(0, 17)]
    assert sum(got) == 8 and a.num_free == 16
    assert a.pages_of(0) == [NO_PAGE] * 8
    a.free(0)
    a.ensure(0, 6)  # a fresh request in the slot starts its scan at page 0 again
    assert a.release_before(0, 4) == 2 and a.pages_of(0)[:2] == [NO_PAGE, NO_PAGE]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_flush_uploads_the_table_as_it_was_at_flush_time() -> None:
    """The device may run a flush's copy after the host changed the table again (the engine
    plans step n + 1 while step n runs): the copy must carry the rows as they were at the
    flush, from every buffer of the pinned ring in turn."""
    a = PageAllocator(64, 4, 4, 16, "cuda", deferred_sync=True)
    expected = []
    for i in range(7):  # more flushes than the ring has buffers
        torch.cuda._sleep(20_000_000)  # keep the stream busy so the copy runs late
        a.ensure(i % 4, 4 * (i // 4 + 1) + 4)
        a.flush()
        expected.append(a._host.clone())
        a.release_before(i % 4, 4)  # a host change right after the flush
        snap = torch.empty_like(a.block_table)
        snap.copy_(a.block_table)  # ordered after the flush's copy on the stream
        expected[-1] = (expected[-1], snap)
    torch.cuda.synchronize()
    for host_at_flush, dev_after_flush in expected:
        assert torch.equal(dev_after_flush.cpu(), host_at_flush)
