"""Write token rows into a paged cache (RoPE + quantize + scatter) and read them back.

`insert` is what every layer calls to store window KV, compressed KV and index keys; `gather`
decodes rows by slot (tests, debugging, unfused reference paths). Both validate before
touching the cache: on any error nothing is written.
"""

from __future__ import annotations

import torch

from .backend import resolve_backend
from .codec import require_encodable, require_finite
from .outputs import empty
from .paged import PagedCache
from .rope import apply_rope, check_rope_tables, rope_cos_sin


def _check_slots(cache: PagedCache, slots: torch.Tensor, n: int | None) -> None:
    if slots.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"slots must be int32 or int64, got {slots.dtype}")
    if slots.dim() != 1 or (n is not None and slots.shape[0] != n):
        want = f"[{n}]" if n is not None else "[N]"
        raise ValueError(f"slots must be 1-D {want}, got shape {list(slots.shape)}")
    if slots.device != cache.device:
        raise ValueError(f"slots is on {slots.device}, the cache on {cache.device}")


def _check_insert(
    cache: PagedCache,
    x: torch.Tensor,
    slots: torch.Tensor,
    positions: torch.Tensor | None,
    freqs: torch.Tensor | None,
    rope_tables: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> None:
    if not isinstance(cache, PagedCache):
        raise TypeError(f"cache must be a PagedCache, got {type(cache).__name__}")
    if x.dtype not in (torch.float32, torch.bfloat16):
        raise TypeError(f"x must be float32 or bfloat16, got {x.dtype}")
    if x.dim() != 2 or x.shape[1] != cache.dim:
        raise ValueError(f"x must be [N, {cache.dim}] (the cache's dim), got {list(x.shape)}")
    if x.device != cache.device:
        raise ValueError(f"x is on {x.device}, the cache on {cache.device}")
    _check_slots(cache, slots, x.shape[0])
    if freqs is None:
        if positions is not None:
            raise ValueError("positions were given without freqs; pass freqs to apply RoPE")
        if rope_tables is not None:
            raise ValueError("rope_tables were given without positions and freqs")
        return
    if positions is None:
        raise ValueError("freqs were given without positions; RoPE needs positions [N]")
    if freqs.dtype != torch.float32 or freqs.dim() != 1 or freqs.numel() == 0:
        raise TypeError(f"freqs must be 1-D float32 [R/2], got {freqs.dtype} {list(freqs.shape)}")
    if 2 * freqs.numel() > cache.dim:
        raise ValueError(f"rope dim R = {2 * freqs.numel()} (from freqs) exceeds dim {cache.dim}")
    if positions.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"positions must be int32 or int64, got {positions.dtype}")
    if tuple(positions.shape) != (x.shape[0],):
        raise ValueError(f"positions must be [{x.shape[0]}], got {list(positions.shape)}")
    for name, t in (("positions", positions), ("freqs", freqs)):
        if t.device != cache.device:
            raise ValueError(f"{name} is on {t.device}, the cache on {cache.device}")
    if rope_tables is not None:
        check_rope_tables(rope_tables, x.shape[0], freqs.numel(), cache.device)


def insert(
    cache: PagedCache,
    x: torch.Tensor,
    slots: torch.Tensor,
    *,
    positions: torch.Tensor | None = None,
    freqs: torch.Tensor | None = None,
    rope_tables: tuple[torch.Tensor, torch.Tensor] | None = None,
    backend: str = "auto",
    validate: bool = True,
) -> None:
    """Quantize rows x: [N, D] bf16|f32 into `cache` at slots: [N] int32|int64 (-1 = skip).

    With freqs: f32 [R/2] (and positions: [N] int), the last R channels are RoPE-rotated at
    `positions` first (`rope.apply_rope`, result in x.dtype), then quantized.
    `rope_tables`: `rope.rope_cos_sin(positions, freqs)` when the caller already holds them
    (a model step computes them once for all its layers); the GPU kernel then reads them
    instead of computing its own (four launches fewer). They must be exactly those tables.

    `validate=True` checks, with host syncs and before any byte is written: slot ranges
    (IndexError), duplicate slots (ValueError), finite `freqs`, and the values that would be
    quantized, i.e. the rows *after* RoPE: NaN/inf (an fp32 rotation of finite values near
    the bf16 maximum can overflow) and finite values whose record would decode to inf
    (`codec.require_encodable`) raise ValueError. Rows at slot -1 are not checked.

    `validate=False` skips all of that so the call can be captured in a CUDA graph; what it
    gives up: a slot outside [-1, num_slots) is skipped like -1 (never written out of
    bounds); duplicate slots leave one of the rows' records (which one is unspecified);
    finite values past the format's range are saturated (`codec.encode`), so the record
    decodes to finite values; NaN / +-inf values after RoPE are quantized as +0 / +-fp32 max
    (the same bytes on every backend, never a record that decodes to NaN or inf).
    """
    _check_insert(cache, x, slots, positions, freqs, rope_tables)
    if validate:
        cache.check_slots(slots)
        keep = slots >= 0
        live = slots[keep]
        if live.numel() != torch.unique(live).numel():
            raise ValueError("slots must not repeat (apart from -1): two rows would race")
        name = "x"
        rows = x[keep]
        if freqs is not None:
            assert positions is not None
            require_finite(freqs, "freqs")
            # the kernels reproduce apply_rope bit for bit, so these are the quantized values
            rows, name = apply_rope(rows, positions[keep], freqs), "x after RoPE"
        require_finite(rows, name)
        require_encodable(cache.fmt, rows, name)
    which = resolve_backend(backend, cache.device)
    if which == "torch":
        from .ops.insert import naive

        naive.insert(cache, x, slots, positions, freqs)
        return
    from .ops.insert import triton_kernels

    if x.shape[0] == 0:
        return
    cos = sin = None
    if rope_tables is not None:
        cos, sin = (t.contiguous() for t in rope_tables)
    elif freqs is not None:
        assert positions is not None
        cos, sin = rope_cos_sin(positions, freqs)
    triton_kernels.launch_insert(cache, x.contiguous(), slots.contiguous(), cos, sin)


def gather(
    cache: PagedCache,
    slots: torch.Tensor,
    *,
    backend: str = "auto",
    validate: bool = True,
) -> torch.Tensor:
    """Decode the rows at slots: [N] int32|int64 -> bf16 [N, D]; slot -1 gives zeros.

    `validate=True` raises IndexError for a slot outside [-1, num_slots) (host sync);
    `validate=False` reads such a slot as zeros, like -1 (never out of bounds).
    """
    if not isinstance(cache, PagedCache):
        raise TypeError(f"cache must be a PagedCache, got {type(cache).__name__}")
    _check_slots(cache, slots, None)
    if validate:
        cache.check_slots(slots)
    which = resolve_backend(backend, cache.device)
    out = empty((slots.shape[0], cache.dim), torch.bfloat16, cache.device)
    if which == "torch":
        from .ops.insert import naive

        out.copy_(naive.gather(cache, slots))
        return out
    from .ops.insert import triton_kernels

    if slots.shape[0]:
        triton_kernels.launch_gather(cache, slots.contiguous(), out)
    return out
