"""All cache state of one model: paged caches, page allocators and compressor rings.

Kinds of pages, each with its own allocator (one block table):
- window: one allocator shared by every layer's window cache (MXFP8, or bf16 under
  `kv_dtype=bf16`); `trim` returns pages older than the window.
- compressed, one allocator per compress ratio `m`: the ratio-`m` kv sources' compressed
  caches (MXFP8 / NVFP4 / bf16 per `kv_dtype`) and index-key caches (MXFP4) share it; a request
  with `n` tokens holds entries `e < n // m`.
Plus one `ds41_cache.Compressor` (per-request fp32 ring) per kv-source layer with `m > 0`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from ds41_cache.allocator import NO_PAGE, CacheFullError, PageAllocator
from ds41_cache.backend import canonical_device
from ds41_cache.compressor import Compressor
from ds41_cache.paged import PagedCache

from .config import ModelConfig

KV_DTYPES: tuple[str, ...] = ("bf16", "fp8_ds_mla", "nvfp4_ds_mla")
WINDOW_FORMAT = {"bf16": "bf16", "fp8_ds_mla": "mxfp8", "nvfp4_ds_mla": "mxfp8"}
COMPRESSED_FORMAT = {"bf16": "bf16", "fp8_ds_mla": "mxfp8", "nvfp4_ds_mla": "nvfp4"}
INDEX_KEY_FORMAT = "mxfp4"


@dataclass
class PrefixPages:
    """Holds references to a request's cache pages for positions `< num_tokens` plus the
    compressor rings at that point (the prefix cache's handle)."""

    num_tokens: int
    window_pages: list[int]
    """Window pages by logical index; -1 before the last window (not needed by a new query)."""
    comp_pages: dict[int, list[int]]
    """Per ratio: the full compressed pages (shared)."""
    comp_tail: dict[int, dict[str, torch.Tensor]]
    """Per ratio: byte copies (per cache name) of a partly filled last compressed page."""
    rings: dict[int, torch.Tensor]
    """Per kv-source layer: the compressor ring snapshot."""
    released: bool = field(default=False)


class KVState:
    """Paged caches of every layer for up to `max_requests` requests (see the module doc)."""

    def __init__(
        self,
        cfg: ModelConfig,
        *,
        kv_dtype: str = "nvfp4_ds_mla",
        max_requests: int = 8,
        max_tokens_per_request: int = 256,
        num_pages: int = 64,
        page_size: int = 16,
        device: torch.device | str = "cpu",
    ) -> None:
        cfg.validate()
        if kv_dtype not in KV_DTYPES:
            raise ValueError(
                f"kv_dtype must be one of {KV_DTYPES} (resolve 'auto' first), got {kv_dtype!r}"
            )
        for name, v in (
            ("max_requests", max_requests),
            ("max_tokens_per_request", max_tokens_per_request),
            ("num_pages", num_pages),
            ("page_size", page_size),
        ):
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise ValueError(f"{name} must be a positive int, got {v!r}")
        if max_tokens_per_request > cfg.max_position:
            raise ValueError(
                f"max_tokens_per_request must be <= max_position ({cfg.max_position}), "
                f"got {max_tokens_per_request}"
            )
        for m in cfg.ratios_in_use:
            if page_size % m:
                raise ValueError(
                    f"page_size must be a multiple of every compress ratio in use "
                    f"{cfg.ratios_in_use} so prefix pages end on whole compressed groups, "
                    f"got {page_size}"
                )
        self.cfg = cfg
        self.kv_dtype = kv_dtype
        self.max_requests = max_requests
        self.max_tokens_per_request = max_tokens_per_request
        self.num_pages = num_pages
        self.page_size = page_size
        self.device = canonical_device(device)
        self.window_fmt = WINDOW_FORMAT[kv_dtype]
        self.comp_fmt = COMPRESSED_FORMAT[kv_dtype]
        self.index_fmt = INDEX_KEY_FORMAT
        plans = cfg.plans
        d = cfg.head_dim

        pages_per_req = -(-max_tokens_per_request // page_size)
        # Block-table rows go up in one asynchronous copy per allocator and step (`flush`).
        self.window_alloc = PageAllocator(
            num_pages, page_size, max_requests, pages_per_req, self.device, deferred_sync=True
        )
        self.window: list[PagedCache] = [
            PagedCache.allocate(self.window_fmt, d, page_size, num_pages, device=self.device)
            for _ in plans
        ]
        self.comp_alloc: dict[int, PageAllocator] = {}
        for m in cfg.ratios_in_use:
            entries = max_tokens_per_request // m
            self.comp_alloc[m] = PageAllocator(
                num_pages,
                page_size,
                max_requests,
                max(1, -(-entries // page_size)),
                self.device,
                deferred_sync=True,
            )
        self.comp: dict[int, PagedCache] = {}
        self.index_keys: dict[int, PagedCache] = {}
        self.compressors: dict[int, Compressor] = {}
        for p in plans:
            if p.is_kv_source:
                self.comp[p.layer] = PagedCache.allocate(
                    self.comp_fmt, d, page_size, num_pages, device=self.device
                )
                self.index_keys[p.layer] = PagedCache.allocate(
                    self.index_fmt, cfg.index_head_dim, page_size, num_pages, device=self.device
                )
                self.compressors[p.layer] = Compressor(
                    p.ratio, d, max_requests, capacity=cfg.compressor_capacity, device=self.device
                )
        # Per request: positions below this are covered by pages of every kind (reserve's fast
        # path; pages are only added by reserve/import and dropped all at once by free).
        self._covered = [0] * max_requests
        # Earliest window position a request may read (SPEC section 7); always 0 here: a prefix
        # hit shares every page of the last window.
        self.replay_start = torch.zeros(max_requests, dtype=torch.int32, device=self.device)

    # ------------------------------------------------------------------ helpers
    def _allocs(self) -> list[tuple[str, int, PageAllocator]]:
        """(name, ratio, allocator); ratio 0 is the window allocator."""
        out = [("window", 0, self.window_alloc)]
        out += [(f"comp{m}", m, a) for m, a in self.comp_alloc.items()]
        return out

    def _caches_of(self, ratio: int) -> dict[str, PagedCache]:
        """Every cache whose pages come from the allocator of `ratio` (0 = window)."""
        if ratio == 0:
            return {f"window{i}": c for i, c in enumerate(self.window)}
        out: dict[str, PagedCache] = {}
        for layer, c in self.comp.items():
            if self.cfg.compress_ratios[layer] == ratio:
                out[f"comp{layer}"] = c
                out[f"index{layer}"] = self.index_keys[layer]
        return out

    def _tokens_for(self, ratio: int, num_tokens: int) -> int:
        """Slots of the ratio's allocator covering positions `< num_tokens`."""
        return num_tokens if ratio == 0 else num_tokens // ratio

    def _check_req(self, req: int) -> int:
        if isinstance(req, bool) or not isinstance(req, int) or not 0 <= req < self.max_requests:
            raise IndexError(f"req must be an int in [0, {self.max_requests}), got {req!r}")
        return req

    # ------------------------------------------------------------------ contract
    def reserve(self, req: int, num_tokens: int) -> None:
        """Pages for positions `< num_tokens` in every cache kind; all or nothing.

        Raises CacheFullError naming `req` (nothing allocated) when any kind runs short.
        """
        req = self._check_req(req)
        if not 0 <= num_tokens <= self.max_tokens_per_request:
            raise ValueError(
                f"num_tokens must lie in [0, {self.max_tokens_per_request}] "
                f"(max_tokens_per_request), got {num_tokens} for request {req}"
            )
        if self._covered[req] >= num_tokens:  # the common serving case: a page already holds it
            return
        for _, m, a in self._allocs():
            need = a.pages_needed(req, self._tokens_for(m, num_tokens))
            if need > a.num_free:
                raise CacheFullError(req, need, a.num_free, a.page_size)
        for _, m, a in self._allocs():
            a.ensure(req, self._tokens_for(m, num_tokens))
        self._covered[req] = self._coverage(req)

    def _coverage(self, req: int) -> int:
        """Positions `< n` for which every allocator holds the request's pages."""
        return min(
            a.extent(req) * self.page_size * max(m, 1) + (max(m, 1) - 1)
            for _, m, a in self._allocs()
        )

    def flush(self) -> None:
        """Upload every allocator's changed block-table rows (asynchronous on CUDA; a no-op
        when nothing changed). `Model.forward` calls it; under CUDA-graph capture the engine
        calls it before the replay."""
        if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
            if any(a.pending_sync for _, _, a in self._allocs()):
                raise RuntimeError("block tables changed during CUDA-graph capture")
            return
        for _, _, a in self._allocs():
            a.flush()

    def trim(self, req: int, next_pos: int) -> None:
        """Return window pages no query at `>= next_pos` can see (wholly before
        `next_pos - window + 1`)."""
        req = self._check_req(req)
        lo = next_pos - self.cfg.window + 1
        if lo > 0:
            self.window_alloc.release_before(req, min(lo, self.window_alloc.max_tokens))

    def free(self, req: int) -> None:
        """Release every page of the request and reset its compressor rings."""
        req = self._check_req(req)
        for _, _, a in self._allocs():
            if a.is_active(req):
                a.free(req)
        self._covered[req] = 0
        for c in self.compressors.values():
            c.reset(req)

    def is_active(self, req: int) -> bool:
        req = self._check_req(req)
        return any(a.is_active(req) for _, _, a in self._allocs())

    def export_prefix(self, req: int, num_tokens: int) -> PrefixPages:
        """Hold the request's pages for positions `< num_tokens` (a multiple of page_size) and
        snapshot its compressor rings."""
        return self.export_prefixes(req, [num_tokens])[0]

    def export_prefixes(self, req: int, counts: Sequence[int]) -> list[PrefixPages]:
        """`export_prefix(req, n)` for every n in `counts`, all checked before any page is
        held (nothing changes on error). The handles share one snapshot of each compressor
        ring and one copy of each partly filled compressed page: taken at the same moment,
        they are equal, and a step that completes many prompt pages makes one device copy
        per layer instead of one per page."""
        req = self._check_req(req)
        ps = self.page_size
        plans: list[tuple[int, list[int], dict[int, list[int]], dict[int, int]]] = []
        row = self.window_alloc.pages_of(req)
        comp_rows = {m: a.pages_of(req) for m, a in self.comp_alloc.items()}
        for num_tokens in counts:
            if num_tokens <= 0 or num_tokens % ps:
                raise ValueError(
                    f"num_tokens must be a positive multiple of page_size {ps}, got {num_tokens}"
                )
            n_pages = num_tokens // ps
            first_needed = max(0, num_tokens - self.cfg.window + 1) // ps
            if len(row) < n_pages or any(p < 0 for p in row[first_needed:n_pages]):
                raise ValueError(
                    f"request {req} does not hold window pages for positions "
                    f"[{first_needed * ps}, {num_tokens}) (released or never reserved)"
                )
            window_pages = [NO_PAGE] * first_needed + row[first_needed:n_pages]
            comp_pages: dict[int, list[int]] = {}
            tails: dict[int, int] = {}
            for m, crow in comp_rows.items():
                full, rest = divmod(num_tokens // m, ps)
                if len(crow) < full + (rest > 0):
                    raise ValueError(
                        f"request {req} holds no compressed pages for {num_tokens // m} "
                        f"ratio-{m} entries"
                    )
                comp_pages[m] = crow[:full]
                if rest:
                    tails[m] = crow[full]
            plans.append((num_tokens, window_pages, comp_pages, tails))
        tail_copies: dict[tuple[int, int], dict[str, torch.Tensor]] = {}
        rings = (
            {layer: c.state_snapshot(req) for layer, c in self.compressors.items()} if plans else {}
        )
        out = []
        for num_tokens, window_pages, comp_pages, tails in plans:
            comp_tail = {}
            for m, tail in tails.items():
                if (m, tail) not in tail_copies:
                    tail_copies[m, tail] = {
                        name: c.storage[tail].clone() for name, c in self._caches_of(m).items()
                    }
                comp_tail[m] = tail_copies[m, tail]
            for p in window_pages:
                if p != NO_PAGE:
                    self.window_alloc.incref(p)
            for m, pages in comp_pages.items():
                for p in pages:
                    self.comp_alloc[m].incref(p)
            out.append(PrefixPages(num_tokens, window_pages, comp_pages, comp_tail, rings))
        return out

    def import_prefix(self, handle: PrefixPages, dst_req: int) -> None:
        """Empty request `dst_req` starts with the handle's prefix cached (pages shared by
        refcount; a partly filled compressed page is copied)."""
        dst_req = self._check_req(dst_req)
        if handle.released:
            raise ValueError("handle was released; export the prefix again")
        if self.is_active(dst_req):
            raise ValueError(f"dst_req {dst_req} must be free (call free() first)")
        for m in handle.comp_tail:
            if self.comp_alloc[m].num_free < 1:
                raise CacheFullError(dst_req, 1, self.comp_alloc[m].num_free, self.page_size)
        self.window_alloc.attach(dst_req, handle.window_pages)
        for m, a in self.comp_alloc.items():
            a.attach(dst_req, handle.comp_pages.get(m, []))
            if m in handle.comp_tail:
                full = len(handle.comp_pages.get(m, []))
                a.ensure(dst_req, (full + 1) * self.page_size)
                page = a.pages_of(dst_req)[full]
                for name, cache in self._caches_of(m).items():
                    cache.storage[page].copy_(handle.comp_tail[m][name])
        for layer, comp in self.compressors.items():
            # The snapshot came from export_prefix: no finiteness check (a host sync per
            # layer, which would stall the engine's overlapped steps at every prefix hit).
            comp.load_state(dst_req, handle.rings[layer], check_finite=False)

    def release_prefix(self, handle: PrefixPages) -> None:
        """Drop the handle's page references."""
        if handle.released:
            raise ValueError("handle was already released")
        for p in handle.window_pages:
            if p != NO_PAGE:
                self.window_alloc.decref(p)
        for m, pages in handle.comp_pages.items():
            for p in pages:
                self.comp_alloc[m].decref(p)
        handle.released = True

    def bytes_per_token(self, context_len: int) -> float:
        """Cache bytes (data + scale rows, all layers) per token of a `context_len` context:
        window rows for the last `min(context, window)` positions, compressed and index-key
        rows for `context // m` entries per kv source."""
        if context_len <= 0:
            raise ValueError(f"context_len must be positive, got {context_len}")
        total = 0
        win = min(context_len, self.cfg.window)
        for c in self.window:
            total += win * c.layout.bytes_per_token
        for layer, c in self.comp.items():
            n = context_len // self.cfg.compress_ratios[layer]
            total += n * (c.layout.bytes_per_token + self.index_keys[layer].layout.bytes_per_token)
        return total / context_len

    def num_free_pages(self) -> int:
        """Free pages of the scarcest allocator (window or any compressed ratio)."""
        return min(a.num_free for _, _, a in self._allocs())

    def free_pages(self) -> dict[str, int]:
        """Free pages per allocator: `window`, `comp1`, `comp2`."""
        return {name: a.num_free for name, _, a in self._allocs()}

    # ------------------------------------------------------------------ inspection (tests)
    def request_bytes(self, req: int, num_tokens: int) -> dict[str, torch.Tensor]:
        """Raw bytes (data row + scale row) of every cache row the request holds for positions
        `< num_tokens`, per cache name, in position / entry order (released window rows are
        skipped). A function of the request's content only, not of which pages it got."""
        req = self._check_req(req)
        out: dict[str, torch.Tensor] = {}
        ps = self.page_size
        for _, m, a in self._allocs():
            n = self._tokens_for(m, num_tokens)
            row = a.pages_of(req)
            idx = [(row[i // ps], i % ps) for i in range(n) if i // ps < len(row)]
            idx = [(p, o) for p, o in idx if p >= 0]
            for name, c in self._caches_of(m).items():
                data, scale = c.data_view(), c.scale_view()
                rows = [torch.cat([data[p, o], scale[p, o]]) for p, o in idx]
                out[name] = (torch.stack(rows) if rows else torch.empty(0, dtype=torch.uint8)).cpu()
        return out
