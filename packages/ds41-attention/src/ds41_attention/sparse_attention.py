"""Public entry point: `sparse_attention` (SPEC section 8) with validation and dispatch."""

from __future__ import annotations

import math

import torch

from ds41_cache import PagedCache, resolve_backend

from .ops.sparse_attention.naive import torch_sparse_attention

WINDOW_FORMATS = ("mxfp8", "bf16")
"""Window cache formats the kernels read (SPEC section 4: MXFP8, or bf16 for baselines)."""
COMPRESSED_FORMATS = ("mxfp8", "nvfp4", "bf16")
"""Compressed cache formats the kernels read."""
GLUON_DEFAULT = True
"""Whether `backend="auto"/"triton"` picks the Hopper Gluon kernel where it can run (sm_90,
D = 512), for the invariant path and for the fast (split-KV) path.

On: the kernel rewritten for issue 11 is 2.0-2.2x faster than the Triton kernel on the H200
and passed the package's `gpu` tests there (float64 bound, row alone == in batches up to 512
rows, graph == eager; BENCHMARKS.md). Set it to False to pin the portable Triton kernels;
`backend="gluon"` selects the Gluon kernel explicitly."""


def _check_index(name: str, x: torch.Tensor, shape: tuple[int, ...], device: torch.device) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be an int32 tensor, got {type(x).__name__}")
    if x.dtype != torch.int32:
        raise TypeError(f"{name} must be int32, got {x.dtype}")
    if tuple(x.shape) != shape:
        raise ValueError(f"{name} must have shape {list(shape)}, got {list(x.shape)}")
    if x.device != device:
        raise ValueError(f"{name} must be on {device} (the device of q), got {x.device}")
    if x.ndim >= 1 and x.numel() > 0 and x.stride(-1) != 1:
        raise ValueError(f"{name} must be contiguous in its last dimension")


def _check_cache(
    name: str, cache: object, formats: tuple[str, ...], dim: int, device: torch.device
) -> PagedCache:
    if not isinstance(cache, PagedCache):
        raise TypeError(f"{name} must be a ds41_cache.PagedCache, got {type(cache).__name__}")
    if cache.fmt not in formats:
        raise ValueError(f"{name}.fmt must be one of {formats}, got {cache.fmt!r}")
    if cache.dim != dim:
        raise ValueError(f"{name}.dim must equal q's head dim {dim}, got {cache.dim}")
    if cache.device != device:
        raise ValueError(f"{name} must be on {device} (the device of q), got {cache.device}")
    return cache


def _check_range(name: str, x: torch.Tensor, lo: int, hi: int, what: str) -> None:
    """Raise unless every value lies in [lo, hi] (one host sync)."""
    if x.numel() == 0:
        return
    xmin, xmax = int(x.min()), int(x.max())
    if xmin < lo or xmax > hi:
        err = IndexError if "slot" in what else ValueError
        raise err(f"{name} must lie in [{lo}, {hi}] ({what}), got values in [{xmin}, {xmax}]")


def validate_inputs(
    q: torch.Tensor,
    window_cache: PagedCache,
    swa_slots: torch.Tensor,
    swa_lens: torch.Tensor,
    comp_cache: PagedCache | None,
    comp_slots: torch.Tensor | None,
    comp_lens: torch.Tensor | None,
    sink: torch.Tensor,
    scale: float,
    *,
    check_values: bool = True,
) -> None:
    """Raise TypeError / ValueError / IndexError naming the bad argument; nothing is launched.

    `check_values=False` skips the checks that read tensor values (host syncs): slot and
    length ranges, a finite `q`, a sink without NaN.
    """
    if not isinstance(q, torch.Tensor):
        raise TypeError(f"q must be a bf16 tensor [T, H, D], got {type(q).__name__}")
    if q.dtype != torch.bfloat16:
        raise TypeError(f"q must be bf16, got {q.dtype}")
    if q.ndim != 3:
        raise ValueError(f"q must have shape [T, H, D], got {list(q.shape)}")
    t_rows, h, d = q.shape
    if h <= 0:
        raise ValueError(f"q must have H >= 1 heads, got shape {list(q.shape)}")
    if d < 32 or d & (d - 1):
        raise ValueError(f"q's head dim D must be a power of two >= 32, got {d}")
    if q.stride(2) != 1:
        raise ValueError("q must be contiguous in its last dimension (stride(2) == 1)")
    device = q.device
    _check_cache("window_cache", window_cache, WINDOW_FORMATS, d, device)
    if not isinstance(swa_slots, torch.Tensor) or swa_slots.ndim != 2:
        raise ValueError(f"swa_slots must be an int32 tensor [T, W] with T = {t_rows}")
    w = swa_slots.shape[1]
    if w < 1:
        raise ValueError(f"swa_slots must have W >= 1 columns, got shape {list(swa_slots.shape)}")
    _check_index("swa_slots", swa_slots, (t_rows, w), device)
    _check_index("swa_lens", swa_lens, (t_rows,), device)
    given = [comp_cache is not None, comp_slots is not None, comp_lens is not None]
    if any(given) and not all(given):
        raise ValueError(
            "comp_cache, comp_slots and comp_lens must be given together or all be None, got "
            f"cache={given[0]}, slots={given[1]}, lens={given[2]}"
        )
    k = 0
    if comp_cache is not None and comp_slots is not None and comp_lens is not None:
        _check_cache("comp_cache", comp_cache, COMPRESSED_FORMATS, d, device)
        if not isinstance(comp_slots, torch.Tensor) or comp_slots.ndim != 2:
            raise ValueError(f"comp_slots must be an int32 tensor [T, K] with T = {t_rows}")
        k = comp_slots.shape[1]
        if k < 1:
            raise ValueError(f"comp_slots must have K >= 1 columns, got {list(comp_slots.shape)}")
        _check_index("comp_slots", comp_slots, (t_rows, k), device)
        _check_index("comp_lens", comp_lens, (t_rows,), device)
    if not isinstance(sink, torch.Tensor) or sink.dtype != torch.float32:
        got = sink.dtype if isinstance(sink, torch.Tensor) else type(sink).__name__
        raise TypeError(f"sink must be a float32 tensor [H], got {got}")
    if tuple(sink.shape) != (h,):
        raise ValueError(f"sink must have shape [{h}] (one per head), got {list(sink.shape)}")
    if sink.device != device:
        raise ValueError(f"sink must be on {device} (the device of q), got {sink.device}")
    if sink.stride(0) != 1 and h > 1:
        raise ValueError("sink must be contiguous")
    # > 0: a softmax temperature (the Hopper kernels take the running max as max(S) * scale)
    if not isinstance(scale, (float, int)) or not math.isfinite(scale) or scale <= 0:
        raise ValueError(f"scale must be a positive finite float (e.g. D ** -0.5), got {scale!r}")
    if not check_values:
        return
    if q.numel() > 0 and not bool(torch.isfinite(q).all()):
        raise ValueError("q must be finite (no NaN or inf), got non-finite values")
    if bool(torch.isnan(sink).any()):
        raise ValueError("sink must not be NaN (+inf and -inf are allowed), got NaN values")
    _check_range("swa_slots", swa_slots, -1, window_cache.num_slots - 1, "slot -1 or a slot")
    _check_range("swa_lens", swa_lens, 0, w, f"at most W = {w}")
    if comp_cache is not None and comp_slots is not None and comp_lens is not None:
        _check_range("comp_slots", comp_slots, -1, comp_cache.num_slots - 1, "slot -1 or a slot")
        _check_range("comp_lens", comp_lens, 0, k, f"at most K = {k}")


def sparse_attention(
    q: torch.Tensor,
    window_cache: PagedCache,
    swa_slots: torch.Tensor,
    swa_lens: torch.Tensor,
    comp_cache: PagedCache | None,
    comp_slots: torch.Tensor | None,
    comp_lens: torch.Tensor | None,
    sink: torch.Tensor,
    scale: float,
    *,
    batch_invariant: bool = True,
    backend: str = "auto",
    validate: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sparse MQA attention with a per-head sink over paged caches (SPEC section 8).

    q: [T, H, D] bf16 (D a power of two, 64 or 512 in V4.1); window_cache: mxfp8 or bf16
    `PagedCache` of width D; swa_slots: int32 [T, W] (-1 = skip), swa_lens: int32 [T] (only
    the first len slots of a row count); comp_cache (mxfp8, nvfp4 or bf16) / comp_slots int32
    [T, K] / comp_lens int32 [T]: all three or none; sink: f32 [H] (unscaled, denominator
    only); scale: the softmax scale of q . kv (> 0). Entries are decoded inside the kernel
    from the paged records and shared by all heads (K = V = latent).

    Returns (out bf16 [T, H, D], lse f32 [T, H]); lse excludes the sink; a row with no valid
    entry gives zeros and lse = -inf. `batch_invariant=True`: every row's bits are a function
    of that row alone (one launch, no split over keys). `batch_invariant=False` (GPU kernels
    only) splits rows over keys by a plan chosen from the batch shape.

    `backend`: "auto" (kernels on CUDA, torch on CPU), "triton" (the GPU kernels: on a
    Hopper GPU (sm_90) with D = 512 both paths run the Gluon kernel, elsewhere the portable
    Triton kernel), "gluon" (the Gluon kernel or a ValueError where it cannot run), "torch".

    `validate=True` checks the values (one host sync): slots in [-1, num_slots), lengths in
    [0, W] / [0, K], `q` finite and `sink` not NaN; a failure raises (ValueError naming `q`
    or `sink`, IndexError for slots). `validate=False` skips these reads so the call can be
    captured in a CUDA graph, and gives up: (1) for non-finite `q` or NaN `sink` the result
    is unspecified and may differ between backends (NaN, zeros or -inf lse); (2) a slot
    outside [0, num_slots) counts as -1 (skipped) and lengths are clamped to [0, W] / [0, K]:
    no input makes any backend read or write out of bounds, but a caller's bad slot is
    silently dropped instead of reported.
    """
    validate_inputs(
        q,
        window_cache,
        swa_slots,
        swa_lens,
        comp_cache,
        comp_slots,
        comp_lens,
        sink,
        scale,
        check_values=validate,
    )
    use_gluon = False
    if backend == "gluon":
        from .ops.sparse_attention.gluon_launch import gluon_supported

        if not gluon_supported(q):
            raise ValueError(
                "backend='gluon' needs a CUDA sm_90 (Hopper) device and D = 512, got device "
                f"{q.device}, D = {q.shape[2]}"
            )
        use_gluon = True
        resolved = "triton"
    else:
        resolved = resolve_backend(backend, q.device)
        if resolved == "triton" and GLUON_DEFAULT:
            from .ops.sparse_attention.gluon_launch import gluon_supported

            use_gluon = gluon_supported(q)
    if use_gluon:
        from .ops.sparse_attention.gluon_launch import (
            launch_gluon_fast,
            launch_gluon_sparse_attention,
        )

        launch = launch_gluon_sparse_attention if batch_invariant else launch_gluon_fast
        return launch(
            q,
            window_cache,
            swa_slots,
            swa_lens,
            comp_cache,
            comp_slots,
            comp_lens,
            sink,
            float(scale),
        )
    if resolved == "torch":
        return torch_sparse_attention(
            q,
            window_cache,
            swa_slots,
            swa_lens,
            comp_cache,
            comp_slots,
            comp_lens,
            sink,
            float(scale),
        )
    from .ops.sparse_attention.launch import launch_sparse_attention

    out, lse = launch_sparse_attention(
        q,
        window_cache,
        swa_slots,
        swa_lens,
        comp_cache,
        comp_slots,
        comp_lens,
        sink,
        float(scale),
        batch_invariant=batch_invariant,
    )
    return out, lse
