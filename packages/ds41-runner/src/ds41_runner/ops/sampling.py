"""Sampling keyed by (seed, position) only: Gumbel-max with a counter-based hash.

The noise for vocabulary entry `v` of a row is a pure function of `(seed, position, v)`, so a
request draws the same token whatever batch it is in. The hash is a 32-bit integer mixer
evaluated with int64 tensor ops whose intermediate products stay below 2**63 (no reliance on
signed overflow).
"""

from __future__ import annotations

import torch

_MASK32 = 0xFFFFFFFF
_GOLDEN = 0x9E3779B9
_M1 = 0x85EBCA6B
_M2 = 0xC2B2AE35
_U24 = 1.0 / (1 << 24)


def _mul32(a: torch.Tensor, c: int) -> torch.Tensor:
    """(a * c) mod 2**32 for int64 tensors `a` in [0, 2**32) and a 32-bit constant `c`."""
    lo = (a & 0xFFFF) * c
    hi = (((a >> 16) * c) & 0xFFFF) << 16
    return (lo + hi) & _MASK32


def _fmix32(h: torch.Tensor) -> torch.Tensor:
    h = h ^ (h >> 16)
    h = _mul32(h, _M1)
    h = h ^ (h >> 13)
    h = _mul32(h, _M2)
    return h ^ (h >> 16)


def uniform_noise(
    seeds: torch.Tensor, positions: torch.Tensor, vocab: int, v0: int = 0
) -> torch.Tensor:
    """`seeds: int64 [T]`, `positions: int [T]` -> fp32 `[T, vocab]` uniforms in (0, 1) of the
    vocabulary ids `[v0, v0 + vocab)` (a tensor-parallel rank's shard: the same bits as those
    columns of the full row)."""
    s = seeds.to(torch.int64)
    s_lo = (s & _MASK32)[:, None]
    s_hi = ((s >> 32) & _MASK32)[:, None]
    p = (positions.to(torch.int64) & _MASK32)[:, None]
    v = torch.arange(v0, v0 + vocab, dtype=torch.int64, device=seeds.device)[None, :]
    h = _fmix32((v + _GOLDEN) & _MASK32)
    h = _fmix32(h ^ p)
    h = _fmix32(h ^ s_hi)
    h = _fmix32(h ^ s_lo)
    return ((h >> 8).to(torch.float32) + 0.5) * _U24


def gumbel_noise(
    seeds: torch.Tensor, positions: torch.Tensor, vocab: int, v0: int = 0
) -> torch.Tensor:
    """fp32 `[T, vocab]` standard Gumbel noise keyed by (seed, position, token id) for the ids
    `[v0, v0 + vocab)`."""
    # float64 then fp32: the same bits whether an element hits torch's vectorized body or its
    # scalar tail (which depends on the tensor size, i.e. on the batch).
    u = uniform_noise(seeds, positions, vocab, v0).to(torch.float64)
    return (-torch.log(-torch.log(u))).to(torch.float32)


_TOP_P_BITS = 24
"""Fixed-point resolution of the top-p mass: probabilities relative to the row's largest, in
units of 2**-24. Integer sums are exact, so the kept set cannot depend on a reduction order
(which would change with the batch); 24 bits leave 28 bits of float64 margin against a
last-bit difference of `exp` between torch's vectorized body and scalar tail on the CPU."""


def _filter_top_k_top_p(
    scaled: torch.Tensor, top_k: torch.Tensor | None, top_p: torch.Tensor | None
) -> torch.Tensor:
    """bool [T, V]: the entries that survive top-k (rank < k; k <= 0 keeps all) and then
    top-p (the smallest prefix of the descending order, ties to the lower id, whose mass
    reaches p of the top-k mass; p >= 1 keeps all). Row-wise and exact (see `_TOP_P_BITS`)."""
    t, v = scaled.shape
    order = torch.sort(scaled, dim=-1, descending=True, stable=True).indices
    ranks = torch.arange(v, device=scaled.device)[None, :]
    keep = torch.ones((t, v), dtype=torch.bool, device=scaled.device)
    if top_k is not None:
        k = top_k.to(torch.int64)[:, None]
        keep &= (k <= 0) | (ranks < k)
    if top_p is not None:
        vals = scaled.gather(1, order)
        w = torch.exp((vals - vals[:, :1]).to(torch.float64))
        q = torch.floor(w * float(1 << _TOP_P_BITS)).to(torch.int64) * keep
        before = torch.cumsum(q, dim=-1) - q
        total = q.sum(dim=-1, keepdim=True)
        p = top_p.to(torch.float64)[:, None]
        keep &= (p >= 1.0) | (before.to(torch.float64) < p * total.to(torch.float64))
    return torch.empty_like(keep).scatter_(1, order, keep)


def sample(
    logprobs: torch.Tensor,
    seeds: torch.Tensor,
    positions: torch.Tensor,
    temperature: torch.Tensor,
    top_k: torch.Tensor | None = None,
    top_p: torch.Tensor | None = None,
) -> torch.Tensor:
    """`logprobs: f32 [T, V]`, `seeds: int64 [T]`, `positions: int32 [T]`, `temperature: f32
    [T]`, optional `top_k: int32 [T]` (<= 0: off) and `top_p: f32 [T]` (>= 1: off) -> int64
    `[T]` token ids.

    Temperature 0 is greedy (ties to the lowest token id; top-k/top-p do not change it);
    otherwise `argmax(logprobs / temperature + gumbel(seed, position))` over the entries that
    survive top-k then top-p, also ties to the lowest id. Every step is row-wise with exact
    integer reductions, so a row's token depends on that row alone.
    """
    if logprobs.dim() != 2 or logprobs.dtype != torch.float32:
        raise TypeError(f"logprobs must be f32 [T, V], got {logprobs.dtype} {list(logprobs.shape)}")
    t = logprobs.shape[0]
    checks: list[tuple[str, torch.Tensor, tuple[torch.dtype, ...]]] = [
        ("seeds", seeds, (torch.int64,)),
        ("positions", positions, (torch.int32, torch.int64)),
        ("temperature", temperature, (torch.float32,)),
    ]
    if top_k is not None:
        checks.append(("top_k", top_k, (torch.int32, torch.int64)))
    if top_p is not None:
        checks.append(("top_p", top_p, (torch.float32,)))
    for name, ten, dtypes in checks:
        if ten.shape != (t,):
            raise ValueError(f"{name} must be [{t}], got {list(ten.shape)}")
        if ten.dtype not in dtypes:
            raise TypeError(f"{name} must be {dtypes[0]}, got {ten.dtype}")
        if ten.device != logprobs.device:
            raise ValueError(f"{name} is on {ten.device}, logprobs on {logprobs.device}")
    greedy = temperature <= 0
    safe_t = torch.where(greedy, torch.ones_like(temperature), temperature)
    scaled = logprobs / safe_t[:, None]
    noisy = scaled + gumbel_noise(seeds, positions, logprobs.shape[1])
    if top_k is not None or top_p is not None:
        keep = _filter_top_k_top_p(scaled, top_k, top_p)
        noisy = torch.where(keep, noisy, torch.full_like(noisy, float("-inf")))
    scores = torch.where(greedy[:, None], logprobs, noisy)
    # torch.argmax returns the first maximal index: ties go to the lowest token id.
    return torch.argmax(scores, dim=-1)
