"""Page allocation for paged caches: free list, per-page refcounts and one block table.

Several layers' caches of one kind share one allocator (one block table); each layer owns its
own `PagedCache` with `num_pages` pages of `page_size` tokens. The allocator only hands out page
ids; it never touches cache bytes.

Bookkeeping lives on the host; `block_table` is a device tensor whose identity never changes
(CUDA graphs capture its address) and whose rows are refreshed from the host copy after every
change, or, with `deferred_sync=True`, by `flush()`: the changed rows go up in one asynchronous
copy from a pinned snapshot, so a serving step that changes many rows costs no host sync.
A request's *extent* is the number of logical pages it has covered so far; entries below the
extent may be -1 after `release_before` (a sliding window keeps O(W) pages, not O(context)).

Pages are shared by reference counting (prefix cache): `share` and `attach` give a request
pages another holder already owns. Shared pages are read-only by convention: a holder that
writes into a page someone else references corrupts it, so prefix caches share whole pages.
"""

from __future__ import annotations

import heapq
import operator
from collections.abc import Sequence

import numpy as np
import torch

NO_PAGE = -1
"""Block-table value of a logical page that has no physical page."""

FLUSH_RING = 3
"""Pinned snapshot buffers per allocator for `flush` (reused round robin, each after its
copy has run)."""


class CacheFullError(RuntimeError):
    """Not enough free pages for a request; nothing was allocated."""

    def __init__(self, request: int, needed: int, free: int, page_size: int) -> None:
        self.request = request
        self.needed = needed
        self.free = free
        super().__init__(
            f"request {request} needs {needed} more page(s) of {page_size} tokens, "
            f"but only {free} page(s) are free"
        )


class PageAllocator:
    """Free list + refcounts + `block_table: int32 [max_requests, max_pages_per_request]`."""

    def __init__(
        self,
        num_pages: int,
        page_size: int,
        max_requests: int,
        max_pages_per_request: int,
        device: torch.device | str = "cpu",
        *,
        deferred_sync: bool = False,
    ) -> None:
        for name, value in (
            ("num_pages", num_pages),
            ("page_size", page_size),
            ("max_requests", max_requests),
            ("max_pages_per_request", max_pages_per_request),
        ):
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        self.num_pages = num_pages
        self.page_size = page_size
        self.max_requests = max_requests
        self.max_pages_per_request = max_pages_per_request
        self._host = torch.full((max_requests, max_pages_per_request), NO_PAGE, dtype=torch.int32)
        # A numpy view of the same memory: scalar reads and writes at ~0.1 us instead of ~3 us.
        self._rows = self._host.numpy()
        self.block_table = self._host.to(device, copy=True)
        self.device = self.block_table.device  # "cuda" resolved to its index
        self.deferred_sync = deferred_sync
        self._dirty: set[int] = set()
        self._ring: list[torch.Tensor] = []  # pinned snapshots for flush (CUDA)
        self._ring_events: list[torch.cuda.Event] = []
        self._ring_np: list[np.ndarray] = []  # numpy views of the ring (fast row writes)
        self._ring_next = 0
        # Per request: logical pages below this index were all released (window trimming
        # resumes there instead of rescanning the row: O(1) per step).
        self._released_upto = [0] * max_requests
        self._refcount = [0] * num_pages
        # Holds taken by `incref` (prefix-cache handles), a subset of `_refcount`: `decref`
        # may only drop these, never a request's mapping.
        self._handles = [0] * num_pages
        # Min-heap: allocation order is deterministic (lowest free page first).
        self._free: list[int] = list(range(num_pages))
        self._extent = [0] * max_requests
        self._active = [False] * max_requests

    # ----------------------------------------------------------------- queries
    @property
    def num_free(self) -> int:
        """Pages on the free list."""
        return len(self._free)

    @property
    def max_tokens(self) -> int:
        """Positions a request can address: `max_pages_per_request * page_size`."""
        return self.max_pages_per_request * self.page_size

    def refcount(self, page: int) -> int:
        page = self._check_page(page)
        return self._refcount[page]

    def is_active(self, req: int) -> bool:
        """True between a request's first `ensure`/`share`/`attach` and its `free`."""
        req = self._check_req(req)
        return self._active[req]

    def extent(self, req: int) -> int:
        """Logical pages the request has covered (including released ones)."""
        req = self._check_req(req)
        return self._extent[req]

    def pages_needed(self, req: int, num_tokens: int) -> int:
        """Free pages `ensure(req, num_tokens)` would take (0 when already covered)."""
        req = self._check_req(req)
        return max(0, -(-num_tokens // self.page_size) - self._extent[req])

    def pages_of(self, req: int) -> list[int]:
        """The request's block-table row up to its extent (-1 where released)."""
        req = self._check_req(req)
        return self._rows[req, : self._extent[req]].tolist()  # type: ignore[no-any-return]

    def slots(self, req: int, positions: torch.Tensor | Sequence[int]) -> torch.Tensor:
        """int64 slots (`page * page_size + p % page_size`) of `positions` on `device`.

        Raises IndexError when a position is negative, beyond `max_tokens`, or has no page.
        """
        req = self._check_req(req)
        pos = torch.as_tensor(positions).detach().to("cpu", torch.int64).reshape(-1)
        if pos.numel() == 0:
            return torch.empty(0, dtype=torch.int64, device=self.device)
        lo, hi = int(pos.min()), int(pos.max())
        if lo < 0 or hi >= self.max_tokens:
            raise IndexError(
                f"positions must lie in [0, {self.max_tokens}) (max_pages_per_request * "
                f"page_size), got values in [{lo}, {hi}]"
            )
        logical = pos // self.page_size
        pages = self._host[req].to(torch.int64)[logical]
        missing = pages < 0
        if bool(missing.any()):
            bad = int(pos[missing][0])
            raise IndexError(
                f"request {req} has no page for position {bad} (logical page "
                f"{bad // self.page_size}; extent {self._extent[req]} pages): call ensure() "
                f"first, or the page was released"
            )
        return (pages * self.page_size + pos % self.page_size).to(self.device)

    # ----------------------------------------------------------------- requests
    def ensure(self, req: int, num_tokens: int) -> None:
        """Pages for every position `< num_tokens` past the extent; all or nothing.

        Raises CacheFullError (nothing changes) when the free list is too short, TypeError
        when `num_tokens` is not an int (nothing changes either).
        """
        req = self._check_req(req)
        if isinstance(num_tokens, bool):
            raise TypeError(f"num_tokens must be an int, got {num_tokens!r}")
        try:
            num_tokens = operator.index(num_tokens)
        except TypeError:
            raise TypeError(f"num_tokens must be an int, got {num_tokens!r}") from None
        if num_tokens < 0 or num_tokens > self.max_tokens:
            raise ValueError(
                f"num_tokens must lie in [0, {self.max_tokens}] (max_pages_per_request * "
                f"page_size), got {num_tokens}"
            )
        need_pages = -(-num_tokens // self.page_size)
        start = self._extent[req]
        missing = max(0, need_pages - start)
        if missing > len(self._free):
            raise CacheFullError(req, missing, len(self._free), self.page_size)
        self._active[req] = True
        if missing == 0:
            return
        for i in range(start, need_pages):
            page = heapq.heappop(self._free)
            self._refcount[page] = 1
            self._rows[req, i] = page
        self._extent[req] = need_pages
        self._sync_row(req)

    def release_before(self, req: int, pos: int) -> int:
        """Drop the request's pages that lie wholly before position `pos`; returns how many.

        Their block-table entries become -1; a page returns to the free list once no other
        holder references it. Amortized O(1) per call: the scan resumes where the last one
        stopped.
        """
        req = self._check_req(req)
        if pos < 0 or pos > self.max_tokens:
            raise ValueError(f"pos must lie in [0, {self.max_tokens}], got {pos}")
        upto = min(pos // self.page_size, self._extent[req])
        start = self._released_upto[req]
        if upto <= start:
            return 0
        row = self._rows[req]
        released = 0
        for i in range(start, upto):
            page = int(row[i])
            if page >= 0:
                row[i] = NO_PAGE
                self._drop(page)
                released += 1
        self._released_upto[req] = upto
        if released:
            self._sync_row(req)
        return released

    def free(self, req: int) -> None:
        """Release every page of the request and clear its row; freeing twice raises."""
        req = self._check_req(req)
        if not self._active[req]:
            raise ValueError(f"request {req} is not active (double free, or never allocated)")
        row = self._rows[req]
        for i in range(self._released_upto[req], self._extent[req]):
            page = int(row[i])
            if page >= 0:
                self._drop(page)
        row[:] = NO_PAGE
        self._extent[req] = 0
        self._released_upto[req] = 0
        self._active[req] = False
        self._sync_row(req)

    def share(self, src_req: int, dst_req: int, num_pages: int) -> None:
        """Give `dst_req` (empty) the first `num_pages` pages of `src_req` (refcount + 1)."""
        src_req = self._check_req(src_req, "src_req")
        dst_req = self._check_req(dst_req, "dst_req")
        if src_req == dst_req:
            raise ValueError(f"src_req and dst_req must differ, got {src_req} for both")
        if num_pages < 0 or num_pages > self._extent[src_req]:
            raise ValueError(
                f"num_pages must lie in [0, {self._extent[src_req]}] (extent of src_req "
                f"{src_req}), got {num_pages}"
            )
        pages = [int(v) for v in self._host[src_req, :num_pages].tolist()]
        if any(p < 0 for p in pages):
            raise ValueError(
                f"src_req {src_req} released some of its first {num_pages} pages; cannot share"
            )
        self.attach(dst_req, pages)

    def attach(self, req: int, pages: Sequence[int]) -> None:
        """Make `pages` (held by someone) the first logical pages of empty request `req`.

        Entries may be -1 (holes: e.g. a prefix hit needs only the last window's pages). Each
        held page's refcount goes up by one; the request's extent becomes `len(pages)`.
        """
        req = self._check_req(req, "req")
        if self._extent[req]:
            raise ValueError(
                f"request {req} must be empty (extent 0) to receive shared pages, has extent "
                f"{self._extent[req]}"
            )
        if len(pages) > self.max_pages_per_request:
            raise ValueError(
                f"pages must hold at most {self.max_pages_per_request} entries, got {len(pages)}"
            )
        pages = [NO_PAGE if page == NO_PAGE else self._check_page(page) for page in pages]
        held = [page for page in pages if page != NO_PAGE]
        if len(set(held)) != len(held):
            raise ValueError(f"pages must be distinct (apart from -1 holes), got {pages}")
        for page in held:
            if self._refcount[page] == 0:
                raise ValueError(f"page {page} is free; only held pages can be shared")
        for i, page in enumerate(pages):
            if page != NO_PAGE:
                self._refcount[page] += 1
                self._rows[req, i] = page
        self._extent[req] = len(pages)
        self._active[req] = True
        self._sync_row(req)

    # ----------------------------------------------------------------- handles
    def incref(self, page: int) -> None:
        """One more holder (not a request, e.g. a prefix-cache entry) of a held page."""
        page = self._check_page(page)
        if self._refcount[page] == 0:
            raise ValueError(f"page {page} is free; incref needs a held page")
        self._refcount[page] += 1
        self._handles[page] += 1

    def decref(self, page: int) -> None:
        """Drop one `incref` hold; the page returns to the free list when no holder remains.

        Only holds taken by `incref` can be dropped here: a request's mapping is dropped by
        `free` / `release_before`. Dropping it here would free a page the request still maps,
        and the next `ensure` would hand it to another request, so that raises ValueError.
        """
        page = self._check_page(page)
        if self._refcount[page] == 0:
            raise ValueError(f"page {page} is already free (double free)")
        if self._handles[page] == 0:
            raise ValueError(
                f"page {page} has no handle hold to drop (no incref outstanding; its "
                f"{self._refcount[page]} holder(s) are request mappings, released by free() "
                f"or release_before())"
            )
        self._handles[page] -= 1
        self._drop(page)

    # ----------------------------------------------------------------- internals
    def _drop(self, page: int) -> None:
        self._refcount[page] -= 1
        if self._refcount[page] == 0:
            heapq.heappush(self._free, page)

    def flush(self) -> None:
        """Upload the block-table rows changed since the last flush (`deferred_sync=True`).

        On CUDA: the rows from the first to the last changed one are copied into a pinned
        snapshot buffer and go up in ONE asynchronous copy on the current stream. The
        snapshot keeps the copy independent of later host changes (the device may run this
        flush's step after the host planned the next one); each of the `FLUSH_RING` buffers
        is reused only after its copy has run (its event). Must not be called while a CUDA
        graph is being captured.
        """
        if not self._dirty:
            return
        lo, hi = min(self._dirty), max(self._dirty) + 1
        self._dirty.clear()
        if self.block_table.device.type != "cuda":
            self.block_table[lo:hi].copy_(self._host[lo:hi])
            return
        k = self._ring_next
        self._ring_next = (k + 1) % FLUSH_RING
        if len(self._ring) <= k:
            self._ring.append(torch.empty_like(self._host, pin_memory=True))
            self._ring_events.append(torch.cuda.Event())  # type: ignore[no-untyped-call]
            self._ring_np.append(self._ring[k].numpy())
        ev = self._ring_events[k]
        ev.synchronize()  # the copy that last read this buffer has run (no-op before a record)
        self._ring_np[k][lo:hi] = self._rows[lo:hi]
        self.block_table[lo:hi].copy_(self._ring[k][lo:hi], non_blocking=True)
        ev.record()

    @property
    def pending_sync(self) -> bool:
        """True when block-table rows changed since the last `flush()`."""
        return bool(self._dirty)

    def _sync_row(self, req: int) -> None:
        if self.deferred_sync:
            self._dirty.add(req)
        else:
            self.block_table[req].copy_(self._host[req])

    def _check_req(self, req: int, name: str = "req") -> int:
        return _index(req, name, self.max_requests)

    def _check_page(self, page: int) -> int:
        return _index(page, "page", self.num_pages)


def _index(value: object, name: str, bound: int) -> int:
    if isinstance(value, bool):
        raise IndexError(f"{name} must be an int in [0, {bound}), got {value!r}")
    try:
        i = operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise IndexError(f"{name} must be an int in [0, {bound}), got {value!r}") from None
    if not 0 <= i < bound:
        raise IndexError(f"{name} must be an int in [0, {bound}), got {i}")
    return i
