"""Torch reference of the indexer top-k (SPEC section 6).

Scores are mapped to order-preserving integer keys that also carry the entry index, so every
key of a row is distinct and "descending score, ties to the lower entry index" becomes a plain
ascending sort of unique integers: any correct sort returns the same set.
"""

from __future__ import annotations

import torch

from ds41_cache.outputs import empty

INDEX_BITS = 31
"""Entry indices live in the low 31 bits of a composite key."""
_INVALID_KEY = torch.iinfo(torch.int64).max


def ordered_desc_u32(scores: torch.Tensor) -> torch.Tensor:
    """fp32 scores -> int64 in [0, 2**32): smaller value = higher score; -0.0 counts as +0.0."""
    s = torch.where(scores == 0, torch.zeros_like(scores), scores.float())
    bits = s.view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    # Ascending map: negative floats invert every bit, positives set the sign bit.
    asc = torch.where(bits >= 0x80000000, bits ^ 0xFFFFFFFF, bits | 0x80000000)
    return 0xFFFFFFFF - asc


def composite_keys(scores: torch.Tensor, valid: torch.Tensor, entry_base: int = 0) -> torch.Tensor:
    """int64 [T, N]: (descending score, ascending entry) as one unique ascending key.

    Column j is entry `entry_base + j`; invalid columns get the largest int64.
    """
    n = scores.shape[-1]
    idx = entry_base + torch.arange(n, dtype=torch.int64, device=scores.device)
    keys = (ordered_desc_u32(scores) << INDEX_BITS) | idx
    return torch.where(valid, keys, torch.full_like(keys, _INVALID_KEY))


def select_from_keys(keys: torch.Tensor, k: int) -> torch.Tensor:
    """Rows of composite keys -> int32 [T, k]: chosen entry indices ascending, then -1."""
    t, n = keys.shape
    width = min(k, n)
    out = empty((t, k), torch.int32, keys.device)
    out.fill_(-1)
    if width == 0 or t == 0:
        return out
    best = torch.topk(keys, width, dim=1, largest=False, sorted=True).values
    chosen = best != _INVALID_KEY
    idx = torch.where(chosen, best & ((1 << INDEX_BITS) - 1), torch.full_like(best, 1 << 40))
    idx = torch.sort(idx, dim=1).values
    out[:, :width] = torch.where(idx < (1 << 40), idx, torch.full_like(idx, -1)).to(torch.int32)
    return out


def index_topk_torch(logits: torch.Tensor, n_visible: torch.Tensor, k: int) -> torch.Tensor:
    """logits: f32|bf16 [T, N]; n_visible: int [T] -> int32 [T, k] (SPEC section 6)."""
    n = logits.shape[1]
    cols = torch.arange(n, device=logits.device)
    valid = cols[None, :] < n_visible.to(torch.int64)[:, None]
    return select_from_keys(composite_keys(logits.float(), valid), k)
