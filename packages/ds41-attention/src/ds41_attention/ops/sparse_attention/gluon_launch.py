"""Host side of the Hopper Gluon kernel (`gluon_kernels.py`): support check, split planner,
launches of the invariant path and of the fast (split-KV) path."""

from __future__ import annotations

import functools
from typing import Any

import torch
import triton

from ds41_cache import PagedCache, empty
from ds41_cache.ops.launch import dependent_launch

from .launch import FMT_NONE, KvFormat
from .triton_kernels import _combine_kernel


@functools.cache
def _gluon_importable() -> bool:
    try:
        from . import gluon_kernels  # noqa: F401
    except ImportError:
        return False
    return True


def gluon_supported(q: torch.Tensor) -> bool:
    """Whether the Gluon kernel serves this call: a CUDA sm_90 device (Hopper), D = 512.

    The tile configuration is fixed (64 heads x 32 keys per tile, one producer and two
    consumer warpgroups, 3 K stages, 2 for bf16 records); it depends on nothing but (H, D)
    and the cache formats, never on the batch, like the Triton kernel's.
    """
    from ds41_cache.backend import interpreter_active

    if q.device.type != "cuda" or interpreter_active() or q.shape[2] != 512:
        return False
    if torch.cuda.get_device_capability(q.device) != (9, 0):
        return False
    return _gluon_importable()


GLUON_MAX_SPLITS = 32
"""Most slices the fast path cuts a row into (the combine kernel holds [splits, D] fp32)."""


def plan_gluon_splits(num_rows: int, head_blocks: int, max_tiles: int, num_sms: int) -> int:
    """Slices per row for the fast path: enough programs to fill the SMs once
    (`num_sms // (rows x head blocks)`), at most one per 32-key tile (`max_tiles`, from the
    slot tables' widths) and GLUON_MAX_SPLITS; 1 (the invariant kernel, no combine) once the
    rows fill the SMs. Measured on the H200 (BENCHMARKS.md): within 3% of the best forced
    split count from T = 4 to 128 rows; more slices than SMs (a second wave) lose."""
    programs = max(1, num_rows * head_blocks)
    return int(max(1, min(num_sms // programs, max(1, max_tiles), GLUON_MAX_SPLITS)))


def kernel_args(
    q: torch.Tensor,
    window_cache: PagedCache,
    swa_slots: torch.Tensor,
    swa_lens: torch.Tensor,
    comp_cache: PagedCache | None,
    comp_slots: torch.Tensor | None,
    comp_lens: torch.Tensor | None,
    sink: torch.Tensor,
    scale: float,
    out: torch.Tensor,
    lse: torch.Tensor,
) -> tuple[list[Any], dict[str, int]]:
    """The positional arguments of `_gluon_sparse_attn_kernel` up to `H` and its format
    constexprs (also used by the lab variants in scripts/)."""
    if q.stride(2) != 1 or q.stride(1) % 2 or q.stride(0) % 2 or q.data_ptr() % 16:
        q = q.contiguous()
    w_fmt = int(KvFormat.from_name(window_cache.fmt))
    if comp_cache is not None and comp_slots is not None and comp_lens is not None:
        cc, cs, cl = comp_cache, comp_slots, comp_lens
        c_fmt = int(KvFormat.from_name(comp_cache.fmt))
    else:
        cc, cs, cl = window_cache, swa_slots, swa_lens  # placeholders, never read
        c_fmt = int(FMT_NONE)
    args = [
        q, q.stride(0), q.stride(1),
        window_cache.storage, window_cache.page_stride, window_cache.page_size,
        window_cache.num_slots, swa_slots, swa_slots.stride(0), swa_lens, swa_slots.shape[1],
        cc.storage, cc.page_stride, cc.page_size, cc.num_slots, cs, cs.stride(0), cl, cs.shape[1],
        sink, float(scale),
        out, out.stride(0), out.stride(1), lse, lse.stride(0),
        q.shape[1],
    ]  # fmt: skip
    return args, {"W_FMT": w_fmt, "C_FMT": c_fmt}


def launch_with(
    kernel: Any,
    options: dict[str, int],
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
    splits: int = 1,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Launch a Gluon kernel with the signature of `_gluon_sparse_attn_kernel`; grid (T, head
    blocks of 64, splits), `options` extra launch options. `splits` > 1: each program takes a
    contiguous slice of its row's tiles, writes fp32 partials, and the Triton combine kernel
    merges them (the fast path; not batch invariant: the slices follow the split count)."""
    from .gluon_kernels import GLUON_BLOCK_H, GLUON_D, GLUON_NUM_WARPS

    t_rows, h, d = q.shape
    device = q.device
    out = empty((t_rows, h, d), torch.bfloat16, device)
    lse = empty((t_rows, h), torch.float32, device)
    if t_rows == 0:
        return out, lse
    args, fmts = kernel_args(q, window_cache, swa_slots, swa_lens, comp_cache, comp_slots,
                             comp_lens, sink, scale, out, lse)  # fmt: skip
    head_blocks = -(-h // GLUON_BLOCK_H)
    split = splits > 1
    if split:
        part_o = empty((t_rows, h, splits, d), torch.float32, device)
        part_ml = empty((t_rows, h, splits, 2), torch.float32, device)
    else:
        part_o, part_ml = lse, lse  # unused placeholders
    kernel[(t_rows, head_blocks, splits)](
        *args, part_o, part_ml, splits, **fmts, SPLIT=split, num_warps=GLUON_NUM_WARPS, **options
    )
    if split:
        _combine_kernel[(t_rows, h)](
            part_o, part_ml, splits, sink,
            out, out.stride(0), out.stride(1), lse, lse.stride(0),
            h, D=GLUON_D, BLOCK_S=max(2, triton.next_power_of_2(splits)), UPCAST=False,
            num_warps=4,
        )  # fmt: skip
    return out, lse


def launch_gluon_sparse_attention(
    q: torch.Tensor,
    window_cache: PagedCache,
    swa_slots: torch.Tensor,
    swa_lens: torch.Tensor,
    comp_cache: PagedCache | None,
    comp_slots: torch.Tensor | None,
    comp_lens: torch.Tensor | None,
    sink: torch.Tensor,
    scale: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The batch-invariant path on Hopper; returns (out bf16 [T, H, D], lse f32 [T, H]).

    Inputs as `sparse_attention` accepts them (shapes, dtypes, devices checked by the
    caller); `gluon_supported(q)` must hold. Slots outside [0, num_slots) and lengths outside
    [0, W] / [0, K] never make the kernel read out of bounds (such keys are skipped).
    """
    from .gluon_kernels import GLUON_MAXNREG, _gluon_sparse_attn_kernel

    options = {"maxnreg": GLUON_MAXNREG, **dependent_launch(q.device)}
    return launch_with(
        _gluon_sparse_attn_kernel, options, q, window_cache, swa_slots, swa_lens, comp_cache,
        comp_slots, comp_lens, sink, scale,
    )  # fmt: skip


def launch_gluon_fast(
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
    splits: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The fast (split-KV) path on Hopper; returns (out bf16 [T, H, D], lse f32 [T, H]).

    The same kernel with each program on a contiguous slice of its row's 32-key tiles, then
    the combine kernel; `splits` (default `plan_gluon_splits` from the batch shape and the
    SM count) slices per row. With one slice it is the invariant kernel. Not batch
    invariant: a row's slices, so its bits, follow the batch size. Inputs as for
    `launch_gluon_sparse_attention`.
    """
    from .gluon_kernels import (
        GLUON_BLOCK_H,
        GLUON_BLOCK_N,
        GLUON_MAXNREG,
        _gluon_sparse_attn_kernel,
    )

    t_rows, h, _d = q.shape
    if splits is None:
        max_tiles = -(-swa_slots.shape[1] // GLUON_BLOCK_N)
        if comp_slots is not None and comp_cache is not None:
            max_tiles += -(-comp_slots.shape[1] // GLUON_BLOCK_N)
        sms = torch.cuda.get_device_properties(q.device).multi_processor_count
        splits = plan_gluon_splits(t_rows, -(-h // GLUON_BLOCK_H), max_tiles, sms)
    if not 1 <= splits <= GLUON_MAX_SPLITS:
        raise ValueError(f"splits must lie in [1, {GLUON_MAX_SPLITS}], got {splits}")
    options = {"maxnreg": GLUON_MAXNREG, **dependent_launch(q.device)}
    return launch_with(
        _gluon_sparse_attn_kernel, options, q, window_cache, swa_slots, swa_lens, comp_cache,
        comp_slots, comp_lens, sink, scale, splits=splits,
    )  # fmt: skip
