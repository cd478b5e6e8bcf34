"""Torch gather + decode of paged cache records by slot for the torch paths and the benchmark.

Decoding is `ds41_cache`'s own torch gather (exact for every format: every decoded value is
representable in bf16), so a row decoded here has the same bits as one decoded anywhere else.
"""

from __future__ import annotations

import torch

from ds41_cache import PagedCache
from ds41_cache.insert import gather


def gather_decode(cache: PagedCache, slots: torch.Tensor) -> torch.Tensor:
    """`slots: [...]` int -> bf16 [numel, D] decoded entries; slot -1 gives zeros."""
    out: torch.Tensor = gather(cache, slots.reshape(-1), backend="torch", validate=False)
    return out
