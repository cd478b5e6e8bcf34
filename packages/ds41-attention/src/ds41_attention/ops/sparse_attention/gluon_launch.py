"""Host side of the Hopper Gluon kernel (`gluon_kernels.py`): support check and launch."""

from __future__ import annotations

import functools
from typing import Any

import torch

from ds41_cache import PagedCache, empty

from .launch import FMT_NONE, KvFormat


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
) -> tuple[torch.Tensor, torch.Tensor]:
    """Launch a Gluon kernel with the signature of `_gluon_sparse_attn_kernel` (also used by
    the variants in scripts/); grid (T, head blocks of 64), `options` extra launch options."""
    from .gluon_kernels import GLUON_BLOCK_H, GLUON_NUM_WARPS

    t_rows, h, d = q.shape
    device = q.device
    out = empty((t_rows, h, d), torch.bfloat16, device)
    lse = empty((t_rows, h), torch.float32, device)
    if t_rows == 0:
        return out, lse
    if q.stride(2) != 1 or q.stride(1) % 2 or q.stride(0) % 2 or q.data_ptr() % 16:
        q = q.contiguous()
    w_fmt = int(KvFormat.from_name(window_cache.fmt))
    if comp_cache is not None and comp_slots is not None and comp_lens is not None:
        cc, cs, cl = comp_cache, comp_slots, comp_lens
        c_fmt = int(KvFormat.from_name(comp_cache.fmt))
    else:
        cc, cs, cl = window_cache, swa_slots, swa_lens  # placeholders, never read
        c_fmt = int(FMT_NONE)
    head_blocks = -(-h // GLUON_BLOCK_H)
    kernel[(t_rows, head_blocks)](
        q, q.stride(0), q.stride(1),
        window_cache.storage, window_cache.page_stride, window_cache.page_size,
        window_cache.num_slots, swa_slots, swa_slots.stride(0), swa_lens, swa_slots.shape[1],
        cc.storage, cc.page_stride, cc.page_size, cc.num_slots, cs, cs.stride(0), cl, cs.shape[1],
        sink, float(scale),
        out, out.stride(0), out.stride(1), lse, lse.stride(0),
        h,
        W_FMT=w_fmt, C_FMT=c_fmt,
        num_warps=GLUON_NUM_WARPS, **options,
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

    return launch_with(
        _gluon_sparse_attn_kernel, {"maxnreg": GLUON_MAXNREG}, q, window_cache, swa_slots,
        swa_lens, comp_cache, comp_slots, comp_lens, sink, scale,
    )  # fmt: skip
