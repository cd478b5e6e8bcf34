"""`linear(x, w)`: the runner's matmul, batch invariant in mode "bi"."""

from __future__ import annotations

import dataclasses
from typing import Literal

import torch

from ds41_cache.backend import interpreter_active, resolve_backend
from ds41_cache.outputs import empty

from .matmul.naive import cpu_segment_len, reduce_partials, rowwise_matmul, rowwise_partials
from .matmul.plan import BLOCK_N, MatmulPlan, half_split, plan_matmul

Mode = Literal["bi", "fast"]
MODES: tuple[str, ...] = ("bi", "fast")
_FLOATS = (torch.bfloat16, torch.float16, torch.float32)


def check_mode(mode: str) -> None:
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")


def _check_operands(x: torch.Tensor, w: torch.Tensor, x_dims: int) -> None:
    shapes = "([M, K], [N, K])" if x_dims == 2 else "([M, G, K], [G, N, K])"
    if x.dim() != x_dims or w.dim() != x_dims:
        raise ValueError(
            f"x and w must be {x_dims}-D {shapes}, got {list(x.shape)}, {list(w.shape)}"
        )
    if x.dtype not in _FLOATS or w.dtype not in _FLOATS:
        raise TypeError(f"x and w must be bf16/fp16/fp32, got {x.dtype}, {w.dtype}")
    if x.device != w.device:
        raise ValueError(f"w is on {w.device}, x on {x.device}")


def linear(
    x: torch.Tensor,
    w: torch.Tensor,
    *,
    mode: str = "bi",
    out_dtype: torch.dtype | None = None,
    fp32: bool = False,
    backend: str = "auto",
    plan_shape: tuple[int, int, int] | None = None,
) -> torch.Tensor:
    """`x: [M, K]`, `w: [N, K]` -> `x @ w^T: [M, N]` (dtype `out_dtype`, default `x.dtype`).

    Accumulation is fp32. `fp32=True` upcasts both operands to fp32 first (the compressor's
    projections, SPEC section 5). Mode "bi": each row's result is independent of M and of the
    other rows (Triton: tiles and K segments fixed by the weight's shape, `matmul.plan`;
    torch: per-row products). Mode "fast": `torch.matmul`, whose blocking may depend on M.
    `plan_shape = (n, k, groups)`: the weight whose plan fixes the K segments when `w` is a
    column shard of it (tensor parallelism: the shard's columns get the full weight's bits).
    """
    check_mode(mode)
    _check_operands(x, w, 2)
    if x.shape[1] != w.shape[1]:
        raise ValueError(f"w must be [N, {x.shape[1]}] to match x's K, got {list(w.shape)}")
    return _dispatch(x.unsqueeze(1), w.unsqueeze(0), mode, out_dtype, fp32, backend, plan_shape)


def grouped_linear(
    x: torch.Tensor,
    w: torch.Tensor,
    *,
    mode: str = "bi",
    out_dtype: torch.dtype | None = None,
    backend: str = "auto",
    plan_shape: tuple[int, int, int] | None = None,
) -> torch.Tensor:
    """`x: [M, G, K]`, `w: [G, N, K]` -> `[M, G * N]`, block g = `x[:, g] @ w[g]^T`.

    One launch for all groups (the output projection's `wo_a`). Mode "bi": rows are
    independent of M as in `linear`; the K segmentation is planned from the whole `[G, N, K]`
    weight, so a group's bits may differ from `linear(x[:, g], w[g])` on Triton.
    `plan_shape`: as in `linear` (a shard of the groups of a larger weight).
    """
    check_mode(mode)
    _check_operands(x, w, 3)
    if x.shape[1] != w.shape[0] or x.shape[2] != w.shape[2]:
        raise ValueError(
            f"w must be [{x.shape[1]}, N, {x.shape[2]}] to match x's groups and K, "
            f"got {list(w.shape)}"
        )
    return _dispatch(x, w, mode, out_dtype, False, backend, plan_shape)


def shard_plan(n: int, k: int, groups: int, plan_shape: tuple[int, int, int] | None) -> MatmulPlan:
    """The plan of a `[groups, n, k]` weight, or of the larger weight `plan_shape` it is a
    column (or group) shard of: the segments of the full weight, the tiles of the shard."""
    if plan_shape is None:
        return plan_matmul(n, k, groups)
    full = plan_matmul(*plan_shape)
    return dataclasses.replace(full, n=n, groups=groups, n_tiles=-(-n // BLOCK_N))


def _shard_operands(
    x: torch.Tensor, w: torch.Tensor, fp32: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """Checked operands of a K-shard product (`x: [M, Ks]`, `w: [N, Ks]`), fp32 if asked."""
    _check_operands(x, w, 2)
    if x.shape[1] != w.shape[1]:
        raise ValueError(f"w must be [N, {x.shape[1]}] to match x's K, got {list(w.shape)}")
    if fp32:
        x, w = x.to(torch.float32), w.to(torch.float32)
    return x, w


def _kernel_operands(
    x: torch.Tensor, w: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, bool, bool]:
    """(x, w, upcast, ieee_fp32) for a Triton launch: mixed dtypes run in fp32; fp32 operands
    and the interpreter take the IEEE fp32 dot."""
    interp = interpreter_active()
    if x.dtype != w.dtype:
        x, w = x.to(torch.float32), w.to(torch.float32)
    return x, w, interp, x.dtype == torch.float32 or interp


def linear_partials(
    x: torch.Tensor,
    w: torch.Tensor,
    *,
    plan_shape: tuple[int, int, int],
    fp32: bool = False,
    backend: str = "auto",
) -> torch.Tensor:
    """Mode "bi" K-shard product: `x: [M, Ks]`, `w: [N, Ks]` -> f32 `[S, M, N]`, the fp32
    chain of each K segment the shard holds, in order.

    `plan_shape = (n, k, 1)` names the full weight; the shard must start and end on its
    segment boundaries (`segment_len`). Adding the segments of all shards with
    `reduce_linear_partials` gives `linear(x_full, w_full)` bitwise.
    """
    x, w = _shard_operands(x, w, fp32)
    if resolve_backend(backend, x.device) == "torch":
        return rowwise_partials(x, w, cpu_segment_len(plan_shape[1]))
    from .matmul.triton_kernels import launch_partials

    x, w, interp, ieee = _kernel_operands(x, w)
    plan = plan_matmul(*plan_shape)
    return launch_partials(x.unsqueeze(1), w.unsqueeze(0), plan, upcast=interp, ieee_fp32=ieee)


def linear_chain(
    x: torch.Tensor,
    w: torch.Tensor,
    *,
    plan_shape: tuple[int, int, int],
    fp32: bool = False,
    backend: str = "auto",
) -> torch.Tensor:
    """Mode "bi" K-shard product: `x: [M, Ks]`, `w: [N, Ks]` -> f32 `[M, N]`, the chains of
    the K segments the shard holds (segments of the full weight `plan_shape = (n, k, 1)`)
    added in order to a zero total, in one launch. When the shard is one half of the full
    plan (`half_split`), this is that half's total, bitwise `reduce_linear_partials(
    linear_partials(...), float32, half=S)`."""
    x, w = _shard_operands(x, w, fp32)
    if resolve_backend(backend, x.device) == "torch":
        parts = rowwise_partials(x, w, cpu_segment_len(plan_shape[1]))
        return reduce_partials(parts, torch.float32, parts.shape[0])
    from .matmul.plan import BLOCK_K
    from .matmul.triton_kernels import launch_matmul

    x, w, interp, ieee = _kernel_operands(x, w)
    m, ks = x.shape
    n = w.shape[0]
    full = plan_matmul(*plan_shape)
    k_tiles = -(-ks // BLOCK_K)
    plan = dataclasses.replace(
        full, n=n, k=ks, groups=1, n_tiles=-(-n // BLOCK_N), k_tiles=k_tiles,
        n_segs=-(-k_tiles // full.seg_tiles), halves=False,
    )  # fmt: skip
    out = empty((m, n), torch.float32, x.device)
    if m == 0 or n == 0:
        return out
    return launch_matmul(x.unsqueeze(1), w.unsqueeze(0), out, plan, upcast=interp, ieee_fp32=ieee)


def segment_count(n: int, k: int, groups: int, backend: str) -> int:
    """K segments of a `[groups, n, k]` weight's plan on `backend` ("torch" or "triton")."""
    if backend == "torch":
        return -(-k // cpu_segment_len(k))
    return plan_matmul(n, k, groups).n_segs


def reduce_linear_partials(
    parts: torch.Tensor,
    out_dtype: torch.dtype,
    *,
    backend: str = "auto",
    half: int | None = None,
) -> torch.Tensor:
    """f32 `[S, M, N]` segment chains -> `[M, N]` in `out_dtype`: the chains `[0, half)` and
    `[half, S)` each added in order to a zero total, then the two totals (the single-process
    matmul's last step). `half` defaults to the plan's `half_split(S)`; `half >= S` gives one
    ascending chain (a rank's own half, or two half totals)."""
    h = half_split(parts.shape[0]) if half is None else half
    if resolve_backend(backend, parts.device) == "torch":
        return reduce_partials(parts, out_dtype, h)
    from .matmul.triton_kernels import launch_reduce

    out = empty(tuple(parts.shape[1:]), out_dtype, parts.device)
    return launch_reduce(parts.contiguous(), out, h)


def segment_len(n: int, k: int, groups: int, backend: str) -> int:
    """Channels of K per segment of a `[groups, n, k]` weight on `backend` ("torch" or
    "triton"): a K shard must start on a multiple of this."""
    from .matmul.plan import BLOCK_K

    if backend == "torch":
        return cpu_segment_len(k)
    return plan_matmul(n, k, groups).seg_tiles * BLOCK_K


def _dispatch(
    x: torch.Tensor,
    w: torch.Tensor,
    mode: str,
    out_dtype: torch.dtype | None,
    fp32: bool,
    backend: str,
    plan_shape: tuple[int, int, int] | None = None,
) -> torch.Tensor:
    """`x: [M, G, K]`, `w: [G, N, K]` (checked) -> `[M, G * N]`."""
    m, g, _ = x.shape
    n = w.shape[1]
    dtype = x.dtype if out_dtype is None else out_dtype
    if fp32:
        x, w = x.to(torch.float32), w.to(torch.float32)
    if mode == "fast":
        if x.dtype != w.dtype:
            w = w.to(x.dtype)
        if g == 1:
            return torch.matmul(x[:, 0], w[0].T).to(dtype)
        return (
            torch.bmm(x.transpose(0, 1), w.transpose(1, 2))
            .transpose(0, 1)
            .reshape(m, g * n)
            .to(dtype)
        )
    if resolve_backend(backend, x.device) == "torch":
        parts = [rowwise_matmul(x[:, i], w[i], dtype) for i in range(g)]
        return parts[0] if g == 1 else torch.cat(parts, dim=1)
    from .matmul.triton_kernels import launch_matmul

    x, w, interp, ieee = _kernel_operands(x, w)
    out = empty((m, g * n), dtype, x.device)
    if m == 0 or n == 0:
        return out
    if w.shape[2] == 0:
        return out.zero_()
    plan = shard_plan(n, w.shape[2], g, plan_shape)
    return launch_matmul(x, w, out, plan, upcast=interp, ieee_fp32=ieee)
