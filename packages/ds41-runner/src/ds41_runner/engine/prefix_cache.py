"""Prefix cache: full prompt pages keyed by a chain hash, shared through `KVState` handles.

The key of page k is `H(key of page k-1 || token ids of page k)`, so one key names a whole
prefix. Each entry holds a `PrefixPages` handle from `kv.export_prefixes` (page references and
compressor-ring snapshots); a later request whose prompt starts with the same pages imports the
longest cached prefix and starts computing after it. Entries are evicted least recently used
first when the cache runs out of pages.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

_ROOT = b"ds41-prefix-v1"


class PrefixKV(Protocol):
    def export_prefixes(self, req: int, counts: Sequence[int]) -> list[Any]: ...
    def import_prefix(self, handle: Any, dst_req: int) -> None: ...
    def release_prefix(self, handle: Any) -> None: ...


def chain_hashes(tokens: Sequence[int], page_size: int, num_pages: int) -> list[bytes]:
    """Keys of the first `num_pages` full pages of `tokens` (page k's key covers pages 0..k)."""
    return _extend_chain(tokens, page_size, [], num_pages)


def _extend_chain(
    tokens: Sequence[int], page_size: int, known: list[bytes], num_pages: int
) -> list[bytes]:
    """The keys of pages `len(known) .. num_pages - 1`, continuing the chain of `known`."""
    if num_pages * page_size > len(tokens):
        raise ValueError(
            f"num_pages * page_size = {num_pages * page_size} exceeds len(tokens) = {len(tokens)}"
        )
    keys: list[bytes] = []
    prev = known[-1] if known else _ROOT
    for k in range(len(known), num_pages):
        page = tokens[k * page_size : (k + 1) * page_size]
        h = hashlib.blake2b(prev, digest_size=16)
        # 8 little-endian signed bytes per token id (numpy packs them in one C pass)
        h.update(np.asarray(page, dtype="<i8").tobytes())
        prev = h.digest()
        keys.append(prev)
    return keys


@dataclass
class PrefixEntry:
    handle: Any
    tokens: tuple[int, ...]
    """The exact prefix (guards against hash collisions)."""

    @property
    def num_tokens(self) -> int:
        return len(self.tokens)


class PrefixCache:
    """LRU map chain-hash -> exported prefix handle."""

    def __init__(self, kv: PrefixKV, page_size: int, max_entries: int = 4096) -> None:
        if page_size <= 0:
            raise ValueError(f"page_size must be positive, got {page_size}")
        self.kv = kv
        self.page_size = page_size
        self.max_entries = max_entries
        self._entries: OrderedDict[bytes, PrefixEntry] = OrderedDict()
        self.hits = 0
        self.hit_tokens = 0
        self.lookups = 0

    def __len__(self) -> int:
        return len(self._entries)

    def lookup(self, tokens: Sequence[int], max_tokens: int) -> PrefixEntry | None:
        """Longest cached prefix of `tokens` of at most `max_tokens` tokens (marks it used)."""
        self.lookups += 1
        max_pages = min(max_tokens, len(tokens)) // self.page_size
        if max_pages <= 0 or not self._entries:
            return None
        keys = chain_hashes(tokens, self.page_size, max_pages)
        for k in range(max_pages - 1, -1, -1):
            entry = self._entries.get(keys[k])
            if entry is not None and entry.tokens == tuple(tokens[: (k + 1) * self.page_size]):
                self._entries.move_to_end(keys[k])
                self.hits += 1
                self.hit_tokens += entry.num_tokens
                return entry
        return None

    def offer(
        self,
        req: int,
        tokens: Sequence[int],
        first_page: int,
        last_page: int,
        *,
        keys: list[bytes] | None = None,
    ) -> None:
        """Export the prefixes ending at pages `first_page .. last_page - 1` (0-based) of the
        request in slot `req`, whose cache holds them; known prefixes are only marked used.

        `keys`, when given, holds the chain hashes of the first pages already computed; it is
        extended in place to `last_page` entries (so a request hashes each page once).
        """
        if last_page <= first_page:
            return
        if keys is None:
            keys = []
        if len(keys) < last_page:
            keys.extend(_extend_chain(tokens, self.page_size, keys, last_page))
        new = []
        for k in range(first_page, last_page):
            if keys[k] in self._entries:
                self._entries.move_to_end(keys[k])
            else:
                new.append(k)
        # One export call for the step's pages: the handles share their ring snapshots.
        handles = self.kv.export_prefixes(req, [(k + 1) * self.page_size for k in new])
        for k, handle in zip(new, handles, strict=True):
            self._entries[keys[k]] = PrefixEntry(handle, tuple(tokens[: (k + 1) * self.page_size]))
            while len(self._entries) > self.max_entries:
                self.evict_one()

    def import_into(self, entry: PrefixEntry, dst_req: int) -> int:
        """Start request slot `dst_req` with the entry's prefix; returns its token count."""
        self.kv.import_prefix(entry.handle, dst_req)
        return entry.num_tokens

    def evict_one(self) -> bool:
        """Release the least recently used entry; False when empty."""
        if not self._entries:
            return False
        _, entry = self._entries.popitem(last=False)
        self.kv.release_prefix(entry.handle)
        return True

    def clear(self) -> None:
        while self.evict_one():
            pass
