"""Index keys (SPEC section 6): RMSNorm -> RoPE at e*m -> quantize -> paged write."""

from __future__ import annotations

import torch

from ds41_cache.backend import resolve_backend
from ds41_cache.compressor import rms_norm
from ds41_cache.outputs import empty
from ds41_cache.paged import PagedCache
from ds41_cache.rope import rope_cos_sin

from ._checks import check_index_cache, check_tensor


def rms_norm_rows(
    x: torch.Tensor, weight: torch.Tensor, eps: float, *, backend: str = "auto"
) -> torch.Tensor:
    """x: [N, D] -> bf16 [N, D]; fp32 math with a fixed pairwise sum of squares per row.

    The sum of squares is a halving tree of elementwise adds (D a power of two), so a row's
    result never depends on how many rows are normalized together. It is the compressor's
    RMSNorm (`ds41_cache.compressor.rms_norm`, the same operations for a power-of-two D):
    one Triton launch on the Triton backend, the torch reference otherwise, the same bits.
    """
    d = x.shape[1]
    if d & (d - 1) or d == 0:
        raise ValueError(f"x width must be a power of two, got {d}")
    return rms_norm(x, weight, eps, backend=backend)


def write_index_keys(
    k_proj: torch.Tensor,
    norm_weight: torch.Tensor,
    eps: float,
    entries_pos: torch.Tensor,
    freqs: torch.Tensor,
    key_cache: PagedCache,
    slots: torch.Tensor,
    *,
    rope_tables: tuple[torch.Tensor, torch.Tensor] | None = None,
    backend: str = "auto",
    validate: bool = True,
) -> torch.Tensor:
    """Write index keys of N compressed entries; returns the normalized pre-RoPE keys bf16 [N, Di].

    k_proj: [N, Di] bf16|f32 (= wk(latent)); norm_weight: [Di]; entries_pos: int [N] (= e*m,
    the RoPE position of entry e); freqs: f32 [R/2]; slots: int32|int64 [N] cache slots of the
    entries (-1 = skip). RMSNorm -> bf16 -> RoPE -> quantize to key_cache.fmt -> write.
    `validate=False` skips the host-syncing slot checks of `ds41_cache.insert.insert`; on the
    Triton backend the norm and the write are then one launch (`ops/keys`) with the bits of
    the two (the checks need the normed rows first, so a validated call runs them apart).
    `rope_tables`: `rope_cos_sin(entries_pos, freqs)` when the caller already holds them (a
    model step computes them once for all its layers), handed to `insert`, whose Triton kernel
    reads them instead of computing its own; they must be exactly those tables.
    """
    check_tensor(k_proj, "k_proj", dtypes=(torch.bfloat16, torch.float32), ndim=2)
    n, di = k_proj.shape
    if di & (di - 1):
        raise ValueError(f"k_proj width must be a power of two, got {di}")
    check_index_cache(key_cache, di)
    check_tensor(
        norm_weight,
        "norm_weight",
        dtypes=(torch.bfloat16, torch.float32),
        ndim=1,
        device=k_proj.device,
    )
    if norm_weight.shape[0] != di:
        raise ValueError(f"norm_weight must have shape {[di]}, got {list(norm_weight.shape)}")
    check_tensor(
        entries_pos, "entries_pos", dtypes=(torch.int32, torch.int64), ndim=1, device=k_proj.device
    )
    check_tensor(slots, "slots", dtypes=(torch.int32, torch.int64), ndim=1, device=k_proj.device)
    for name, v in (("entries_pos", entries_pos), ("slots", slots)):
        if v.shape[0] != n:
            raise ValueError(f"{name} must have shape {[n]}, got {list(v.shape)}")
    from ds41_cache.insert import _check_insert, insert

    if (
        not validate
        and n > 0
        and resolve_backend(backend, k_proj.device) == "triton"
        and k_proj.stride(1) == 1
    ):
        from .ops.keys.triton_kernels import fits, launch_norm_insert

        if fits(key_cache, di):
            # One launch (`ops/keys`): the bits of `rms_norm_rows` then `insert` below.
            _check_insert(key_cache, k_proj, slots, entries_pos, freqs, rope_tables)
            if rope_tables is None:
                cos, sin = rope_cos_sin(entries_pos, freqs)
            else:
                cos, sin = rope_tables
            normed = empty((n, di), torch.bfloat16, k_proj.device)
            launch_norm_insert(
                k_proj, norm_weight.contiguous(), float(eps), key_cache, slots.contiguous(),
                cos.contiguous(), sin.contiguous(), normed,
            )  # fmt: skip
            return normed
    normed = rms_norm_rows(k_proj, norm_weight, eps, backend=backend)
    insert(
        key_cache,
        normed,
        slots,
        positions=entries_pos,
        freqs=freqs,
        rope_tables=rope_tables,
        backend=backend,
        validate=validate,
    )
    return normed
