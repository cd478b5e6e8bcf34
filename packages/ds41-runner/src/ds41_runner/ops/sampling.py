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


def uniform_noise(seeds: torch.Tensor, positions: torch.Tensor, vocab: int) -> torch.Tensor:
    """`seeds: int64 [T]`, `positions: int [T]` -> fp32 `[T, vocab]` uniforms in (0, 1)."""
    s = seeds.to(torch.int64)
    s_lo = (s & _MASK32)[:, None]
    s_hi = ((s >> 32) & _MASK32)[:, None]
    p = (positions.to(torch.int64) & _MASK32)[:, None]
    v = torch.arange(vocab, dtype=torch.int64, device=seeds.device)[None, :]
    h = _fmix32((v + _GOLDEN) & _MASK32)
    h = _fmix32(h ^ p)
    h = _fmix32(h ^ s_hi)
    h = _fmix32(h ^ s_lo)
    return ((h >> 8).to(torch.float32) + 0.5) * _U24


def gumbel_noise(seeds: torch.Tensor, positions: torch.Tensor, vocab: int) -> torch.Tensor:
    """fp32 `[T, vocab]` standard Gumbel noise keyed by (seed, position, token id)."""
    # float64 then fp32: the same bits whether an element hits torch's vectorized body or its
    # scalar tail (which depends on the tensor size, i.e. on the batch).
    u = uniform_noise(seeds, positions, vocab).to(torch.float64)
    return (-torch.log(-torch.log(u))).to(torch.float32)


def sample(
    logprobs: torch.Tensor,
    seeds: torch.Tensor,
    positions: torch.Tensor,
    temperature: torch.Tensor,
) -> torch.Tensor:
    """`logprobs: f32 [T, V]`, `seeds: int64 [T]`, `positions: int32 [T]`, `temperature: f32
    [T]` -> int64 `[T]` token ids.

    Temperature 0 is greedy (ties to the lowest token id); otherwise
    `argmax(logprobs / temperature + gumbel(seed, position))`, also ties to the lowest id.
    """
    if logprobs.dim() != 2 or logprobs.dtype != torch.float32:
        raise TypeError(f"logprobs must be f32 [T, V], got {logprobs.dtype} {list(logprobs.shape)}")
    t = logprobs.shape[0]
    for name, ten, dtypes in (
        ("seeds", seeds, (torch.int64,)),
        ("positions", positions, (torch.int32, torch.int64)),
        ("temperature", temperature, (torch.float32,)),
    ):
        if ten.shape != (t,):
            raise ValueError(f"{name} must be [{t}], got {list(ten.shape)}")
        if ten.dtype not in dtypes:
            raise TypeError(f"{name} must be {dtypes[0]}, got {ten.dtype}")
        if ten.device != logprobs.device:
            raise ValueError(f"{name} is on {ten.device}, logprobs on {logprobs.device}")
    greedy = temperature <= 0
    safe_t = torch.where(greedy, torch.ones_like(temperature), temperature)
    noisy = logprobs / safe_t[:, None] + gumbel_noise(seeds, positions, logprobs.shape[1])
    scores = torch.where(greedy[:, None], logprobs, noisy)
    # torch.argmax returns the first maximal index: ties go to the lowest token id.
    return torch.argmax(scores, dim=-1)
