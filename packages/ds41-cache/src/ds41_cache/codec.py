"""Encode / decode token rows in every cache format (SPEC section 4, byte layouts in DESIGN.md).

`encode(fmt, x)` returns the data and scale rows a `PagedCache` page stores for each token;
`decode` inverts it exactly (every decoded value is a bf16 number). `backend="auto"` runs the
Triton kernels on CUDA tensors and the torch reference on CPU tensors; both give the same bytes.
"""

from __future__ import annotations

import torch

from .backend import resolve_backend
from .formats import check_format, row_layout
from .ops.codec import naive
from .outputs import empty

_FLOAT_INPUTS = (torch.float32, torch.bfloat16)


def _check_rows(x: torch.Tensor, name: str = "x") -> None:
    if x.dtype not in _FLOAT_INPUTS:
        raise TypeError(f"{name} must be float32 or bfloat16, got {x.dtype}")
    if x.dim() != 2:
        raise ValueError(f"{name} must be 2-D [N, D], got shape {list(x.shape)}")
    if x.shape[1] <= 0 or x.shape[1] % 32:
        raise ValueError(f"{name} width D must be a positive multiple of 32, got {x.shape[1]}")


def require_finite(x: torch.Tensor, name: str = "x") -> None:
    """Raise ValueError if `x` holds NaN or +-inf (host sync)."""
    bad = ~torch.isfinite(x)
    if bool(bad.any()):
        first = [int(i) for i in bad.nonzero()[0]]
        raise ValueError(
            f"{name} must be finite; found {int(bad.sum())} NaN/inf values "
            f"(first at index {first}: {x[tuple(first)].item()})"
        )


def require_encodable(fmt: str, x: torch.Tensor, name: str = "x") -> None:
    """Raise ValueError if a finite value of `x` would make its `fmt` record decode to inf
    under SPEC section 4's rule (host sync). See `naive.OVERFLOW_FROM` for the limits:
    |x| >= 248 * 2^120 (~3.296e38) for mxfp8 and fp8_index, |x| >= 1.75 * 2^127 (~2.978e38)
    for mxfp4, fp32 |x| >= (2 - 2^-8) * 2^127 for bf16; nvfp4 has none."""
    limit = naive.OVERFLOW_FROM[check_format(fmt)]
    if limit is None or x.numel() == 0:
        return
    over = x.abs().to(torch.float32) >= limit
    if bool(over.any()):
        first = [int(i) for i in over.nonzero()[0]]
        raise ValueError(
            f"{name} holds {int(over.sum())} value(s) whose {fmt} record would decode to inf "
            f"(|value| must be < {limit:.6g}; first at index {first}: {x[tuple(first)].item()})"
        )


def encode(
    fmt: str,
    x: torch.Tensor,
    *,
    backend: str = "auto",
    check_finite: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize rows. x: [N, D] float32|bf16, D a multiple of 32.

    Returns (data uint8 [N, data_bytes], scales uint8 [N, scale_bytes]) laid out as SPEC
    section 4 (`bf16` has scale_bytes = 0).

    `check_finite=True` (host syncs) raises ValueError for NaN/inf input and for finite values
    whose record would decode to inf (`require_encodable`: |x| near the bf16/fp32 maximum), as
    SPEC section 4 asks. `check_finite=False` skips both: finite inputs then always give
    records that decode to finite values, identical on every backend (the blocks that SPEC's
    rule would overflow get saturated codes: at most 240 * 2^120 for mxfp8/fp8_index,
    3 * 2^126 for mxfp4, the bf16 maximum for bf16; see the package README), and NaN / +-inf
    are quantized as +0 / +-fp32 max (`naive.finite_or_saturated`): no record ever decodes to
    NaN or inf.
    """
    check_format(fmt)
    _check_rows(x)
    if check_finite:
        require_finite(x)
        require_encodable(fmt, x)
    which = resolve_backend(backend, x.device)
    layout = row_layout(fmt, x.shape[1])
    n = x.shape[0]
    if which == "torch":
        data, scales = naive.encode(fmt, x)
        out_d = empty((n, layout.data_bytes), torch.uint8, x.device)
        out_s = empty((n, layout.scale_bytes), torch.uint8, x.device)
        out_d.copy_(data)
        out_s.copy_(scales)
        return out_d, out_s
    from .ops.codec import triton_kernels

    out_d = empty((n, layout.data_bytes), torch.uint8, x.device)
    out_s = empty((n, layout.scale_bytes), torch.uint8, x.device)
    if n:
        triton_kernels.launch_encode(fmt, x.contiguous(), out_d, out_s)
    return out_d, out_s


def decode(
    fmt: str,
    data: torch.Tensor,
    scales: torch.Tensor,
    *,
    backend: str = "auto",
) -> torch.Tensor:
    """Dequantize rows. data: uint8 [N, data_bytes], scales: uint8 [N, scale_bytes] -> bf16 [N, D].

    D follows from `data_bytes` (mxfp8/fp8_index: D, nvfp4/mxfp4: D/2, bf16: 2D bytes).
    """
    check_format(fmt)
    for name, t in (("data", data), ("scales", scales)):
        if t.dtype != torch.uint8:
            raise TypeError(f"{name} must be uint8, got {t.dtype}")
        if t.dim() != 2:
            raise ValueError(f"{name} must be 2-D [N, bytes], got shape {list(t.shape)}")
    if scales.device != data.device:
        raise ValueError(f"scales is on {scales.device}, data on {data.device}")
    dim = naive.dim_of(fmt, data.shape[1])
    layout = row_layout(fmt, dim)
    if tuple(scales.shape) != (data.shape[0], layout.scale_bytes):
        raise ValueError(
            f"scales must be uint8 [{data.shape[0]}, {layout.scale_bytes}] for {fmt} rows of "
            f"width {dim}, got {list(scales.shape)}"
        )
    which = resolve_backend(backend, data.device)
    out = empty((data.shape[0], dim), torch.bfloat16, data.device)
    if which == "torch":
        out.copy_(naive.decode(fmt, data, scales))
        return out
    from .ops.codec import triton_kernels

    if data.shape[0]:
        triton_kernels.launch_decode(fmt, data.contiguous(), scales.contiguous(), out)
    return out


def quantize_dequantize(
    fmt: str,
    x: torch.Tensor,
    *,
    backend: str = "auto",
    check_finite: bool = True,
) -> torch.Tensor:
    """Round trip through `fmt`: x [..., D] float32|bf16 -> bf16 [..., D] (blocks along D).

    Used for the MXFP4 index queries (SPEC section 6). `check_finite` as in `encode`.
    """
    if x.dim() < 1:
        raise ValueError("x must have at least one dimension (the channel dim D)")
    rows = x.reshape(-1, x.shape[-1])
    data, scales = encode(fmt, rows, backend=backend, check_finite=check_finite)
    return decode(fmt, data, scales, backend=backend).reshape(x.shape)
