"""Continuous batching with chunked prefill, paged-cache reservation and preemption.

Each step gets a token budget (`chunk_size`). Running requests are served first: single rows
(decodes) before prefill chunks, oldest admission first; then waiting requests are admitted in
arrival order while the budget, a request slot and cache pages last. Every scheduled row of the
step goes through one `model.forward`. A running request with no row to run (every token it
may produce is sampled, the values not back yet) keeps its slot and pages until the engine
finishes it.

Before a step runs, `kv.reserve` must cover every scheduled row. When pages run out, prefix
cache entries are released first (least recently used), then the chunk is halved (down to one
row), then the newest running request is preempted: its cache is freed and it goes back to
the head of the queue, keeping the tokens it generated; on readmission it recomputes them as
prefill, which by batch invariance reproduces the same cache bytes and log-probs. A request
that cannot fit even alone fails with an error naming it; the others continue.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Protocol

from ds41_cache.allocator import CacheFullError

from .prefix_cache import PrefixCache
from .request import Request, Status


class SchedulerKV(Protocol):
    def reserve(self, req: int, num_tokens: int) -> None: ...
    def trim(self, req: int, next_pos: int) -> None: ...
    def free(self, req: int) -> None: ...


def is_cache_full(exc: BaseException) -> bool:
    # ds41_cache.allocator.CacheFullError; matched by name too so test doubles can raise their own.
    return isinstance(exc, CacheFullError) or type(exc).__name__ == "CacheFullError"


@dataclass
class StepPlan:
    """The rows of one step: request `entries[i][0]` runs `entries[i][1]` consecutive rows."""

    step: int
    entries: list[tuple[Request, int]] = field(default_factory=list)

    @property
    def num_rows(self) -> int:
        return sum(n for _, n in self.entries)

    def __bool__(self) -> bool:
        return bool(self.entries)


class Scheduler:
    """Owns request slots, queues and cache reservations of the engine's requests."""

    def __init__(
        self,
        kv: SchedulerKV,
        *,
        chunk_size: int,
        max_requests: int,
        page_size: int,
        prefix_cache: PrefixCache | None = None,
    ) -> None:
        if chunk_size <= 0:
            raise ValueError(f"chunk_size must be positive, got {chunk_size}")
        self.kv = kv
        self.chunk_size = chunk_size
        self.page_size = page_size
        self.prefix_cache = prefix_cache
        self._free_slots = list(range(max_requests - 1, -1, -1))  # pop() yields slot 0 first
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self._admit_counter = 0
        self.preemptions = 0
        self.failed: list[Request] = []

    # ------------------------------------------------------------------ queue state
    def add(self, requests: list[Request]) -> None:
        """Requests that arrived, in arrival order (they wait for a slot)."""
        self.waiting.extend(requests)

    @property
    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    # ------------------------------------------------------------------ scheduling
    def schedule(self, step: int) -> StepPlan:
        """Pick this step's rows and reserve cache pages for them (may preempt or fail)."""
        preempted_before = self.preemptions
        while True:
            plan = self._plan_running(step)
            blocked = self._reserve_plan(plan)
            if blocked is None:
                break
        if self.preemptions == preempted_before:
            self._admit(plan)
        return plan

    def _plan_running(self, step: int) -> StepPlan:
        plan = StepPlan(step)
        budget = self.chunk_size
        pending = [(r, r.pending) for r in self.running]
        decodes = [r for r, n in pending if n == 1]
        prefills = [r for r, n in pending if n > 1]
        for req in decodes + prefills:
            if budget == 0:
                break
            n = min(req.pending, budget)
            plan.entries.append((req, n))
            budget -= n
        return plan

    def _reserve_plan(self, plan: StepPlan) -> Request | None:
        """Reserve every entry (shrinking a chunk that does not fit); when not even one row
        fits, make room (evict, preempt or fail) and return the blocked request."""
        for k, (req, n) in enumerate(plan.entries):
            got, exc = self._reserve_rows(req, n)
            if exc is not None:
                self._make_room(req, exc)
                return req
            if got < n:
                plan.entries[k] = (req, got)
        return None

    def _reserve_rows(self, req: Request, n: int) -> tuple[int, BaseException | None]:
        """Reserve pages for up to `n` more rows of `req`: releases prefix-cache entries,
        then halves the chunk. Returns (rows reserved, None) or (0, the CacheFullError)."""
        m = n
        while True:
            try:
                self.kv.reserve(self.slot_of(req), req.num_computed + m)
                return m, None
            except Exception as exc:
                if not is_cache_full(exc):
                    raise
                if self.prefix_cache is not None and self.prefix_cache.evict_one():
                    continue
                if m == 1:
                    return 0, exc
                m = max(1, m // 2)

    def _make_room(self, blocked: Request, exc: BaseException) -> None:
        victim = max(self.running, key=lambda r: r.admit_order)
        if victim is blocked and len(self.running) == 1:
            self._fail(blocked, self._too_big_message(blocked, exc))
            return
        self._preempt(victim)

    def _admit(self, plan: StepPlan) -> None:
        budget = self.chunk_size - plan.num_rows
        while budget > 0 and self.waiting and self._free_slots:
            req = self.waiting[0]
            slot = self._free_slots.pop()
            req.slot = slot
            req.num_computed = 0
            self._import_prefix(req)
            n, exc = self._reserve_rows(req, min(req.pending, budget))
            if exc is not None:
                if not plan.entries and not self.running:  # alone, and not even one row fits
                    self.waiting.popleft()
                    self._fail(req, self._too_big_message(req, exc))
                    continue
                # No room now: undo and retry on a later step (running requests free pages).
                self.kv.free(slot)
                req.slot = None
                req.num_computed = 0
                self._free_slots.append(slot)
                break
            self.waiting.popleft()
            req.status = Status.RUNNING
            req.admit_order = self._admit_counter
            self._admit_counter += 1
            self.running.append(req)
            plan.entries.append((req, n))
            budget -= n

    def _import_prefix(self, req: Request) -> None:
        if self.prefix_cache is None:
            return
        # At least the first needed row must run (the last token's, which predicts the next
        # one; for a score request the row before its first target).
        entry = self.prefix_cache.lookup(req.tokens, req.first_needed_row)
        if entry is None:
            return
        try:
            req.num_computed = self.prefix_cache.import_into(entry, self.slot_of(req))
        except Exception as exc:
            if not is_cache_full(exc):
                raise
            return  # no page for the copied tail: run cold
        req.prefix_hit_tokens = max(req.prefix_hit_tokens, req.num_computed)
        # Imported pages are cached already; a request holding an imported prefix may lack
        # the early window pages, so it never re-exports below the hit.
        req.exported_pages = max(req.exported_pages, req.num_computed // self.page_size)

    # ------------------------------------------------------------------ after the forward
    def complete(self, plan: StepPlan) -> None:
        """The plan's rows are in the cache: advance, offer prompt pages, trim windows."""
        for req, n in plan.entries:
            req.num_computed += n
            slot = self.slot_of(req)
            full_prompt_pages = len(req.prompt) // self.page_size
            if self.prefix_cache is not None and req.exported_pages < full_prompt_pages:
                last = min(req.num_computed, len(req.prompt)) // self.page_size
                if last > req.exported_pages:
                    self.prefix_cache.offer(
                        slot, req.prompt, req.exported_pages, last, keys=req.prefix_keys
                    )
                    req.exported_pages = last
            # Exports happen before the trim; a later export ends past `num_computed` and so
            # needs only window pages the trim keeps.
            self.kv.trim(slot, req.num_computed)

    def finish(self, req: Request) -> None:
        """The request is done (its final tokens came back, or it was aborted): free it."""
        self._release(req)
        if req in self.waiting:
            self.waiting.remove(req)
        req.status = Status.FINISHED

    # ------------------------------------------------------------------ helpers
    def slot_of(self, req: Request) -> int:
        if req.slot is None:
            raise RuntimeError(f"request {req.index} has no cache slot")
        return req.slot

    def _release(self, req: Request) -> None:
        if req.slot is not None:
            self.kv.free(req.slot)
            self._free_slots.append(req.slot)
            req.slot = None
        if req in self.running:
            self.running.remove(req)

    def _preempt(self, req: Request) -> None:
        self._release(req)
        req.num_computed = 0
        req.status = Status.WAITING
        req.preemptions += 1
        self.preemptions += 1
        self.waiting.appendleft(req)

    def _fail(self, req: Request, message: str) -> None:
        self._release(req)
        req.status = Status.FAILED
        req.finish_reason = "error"
        req.error = message
        self.failed.append(req)

    def _too_big_message(self, req: Request, exc: BaseException) -> str:
        # CacheFullError's own text names the cache slot ("request <slot>"), not the request.
        short = ""
        if isinstance(exc, CacheFullError):
            short = f": {exc.needed} more page(s) needed, {exc.free} free"
        return (
            f"{req.label}: the cache is too small for this request alone "
            f"(needs room for {req.num_computed + 1}+ of its {req.length} tokens{short})"
        )
