"""Host side of the Triton kernels: tile configuration, split planning, launches."""

from __future__ import annotations

import enum
from dataclasses import dataclass

import torch
import triton

from ds41_cache import PagedCache, empty
from ds41_cache.backend import interpreter_active

from .triton_kernels import _combine_kernel, _sparse_attn_kernel


class KvFormat(enum.IntEnum):
    """Record format codes the kernels branch on (constexpr `W_FMT` / `C_FMT`)."""

    MXFP8 = 0
    NVFP4 = 1
    BF16 = 2
    NONE = 3
    """No compressed cache."""

    @classmethod
    def from_name(cls, fmt: str) -> KvFormat:
        """The code of a `PagedCache.fmt` name ("mxfp8", "nvfp4", "bf16")."""
        try:
            return cls[fmt.upper()] if fmt != "none" else cls.NONE
        except KeyError:
            raise ValueError(f"fmt must be one of 'mxfp8', 'nvfp4', 'bf16', got {fmt!r}") from None


FMT_NONE = KvFormat.NONE
MAX_SPLITS = 64


@dataclass(frozen=True)
class KernelConfig:
    """Tile shape and launch parameters; chosen from (H, D) only, never from the batch."""

    block_h: int
    block_n: int
    num_warps: int
    num_stages: int


def default_config(num_heads: int, dim: int) -> KernelConfig:
    """Fixed per (H, D): a block of up to 64 heads (>= 16, the tensor-core M minimum)."""
    block_h = min(64, max(16, triton.next_power_of_2(num_heads)))
    if dim >= 256:
        return KernelConfig(block_h, 64, 8, 1)
    return KernelConfig(block_h, 32, 4, 2)


def _num_sms(device: torch.device) -> int:
    if device.type == "cuda":
        return int(torch.cuda.get_device_properties(device).multi_processor_count)
    return 8


def plan_splits(num_rows: int, head_blocks: int, max_tiles: int, device: torch.device) -> int:
    """Fast-path split count from the batch shape: split a row's keys only while the grid
    would not fill the SMs once (measured on the H200: a second wave of shorter programs plus
    the combine pass costs more than it saves)."""
    programs = max(1, num_rows * head_blocks)
    splits = _num_sms(device) // programs
    return int(max(1, min(splits, max_tiles, MAX_SPLITS)))


def _storage_args(
    cache: PagedCache,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int, int]:
    """The storage as bytes, 16-bit and 32-bit words (page strides are multiples of 16)."""
    st = cache.storage
    return st, st.view(torch.int16), st.view(torch.int32), cache.page_stride, cache.page_size


def launch_sparse_attention(
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
    config: KernelConfig | None = None,
    splits: int | None = None,
    hw_fp8: bool | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Run the kernels on validated inputs; returns (out bf16 [T, H, D], lse f32 [T, H]).

    `batch_invariant=True`: one program per (row, head block), no split. Otherwise `splits`
    (or the planner) decides how many programs share one row's keys, merged by a combine pass.
    `hw_fp8`: decode e4m3 with the hardware conversion (default on CUDA) or the integer helpers;
    both give identical values. Slots outside [0, num_slots) and lengths outside [0, W] /
    [0, K] never make the kernels read out of bounds (such keys are skipped).
    """
    t_rows, h, d = q.shape
    device = q.device
    out = empty((t_rows, h, d), torch.bfloat16, device)
    lse = empty((t_rows, h), torch.float32, device)
    if t_rows == 0:
        return out, lse
    cfg = config or default_config(h, d)
    upcast = interpreter_active()
    use_hw_fp8 = (not upcast) and device.type == "cuda" and hw_fp8 is not False
    head_blocks = triton.cdiv(h, cfg.block_h)
    w_st, w_st16, w_st32, w_stride, w_ps = _storage_args(window_cache)
    w_fmt = KvFormat.from_name(window_cache.fmt)
    if comp_cache is not None and comp_slots is not None and comp_lens is not None:
        c_st, c_st16, c_st32, c_stride, c_ps = _storage_args(comp_cache)
        c_fmt = KvFormat.from_name(comp_cache.fmt)
        c_slots, c_lens = comp_slots, comp_lens
    else:
        # placeholders the kernel never reads (C_FMT == FMT_NONE)
        c_st, c_st16, c_st32, c_stride, c_ps = w_st, w_st16, w_st32, w_stride, w_ps
        c_fmt = FMT_NONE
        c_slots, c_lens = swa_slots, swa_lens

    if batch_invariant:
        num_splits = 1
    elif splits is not None:
        num_splits = max(1, int(splits))
    else:
        max_tiles = triton.cdiv(swa_slots.shape[1], cfg.block_n)
        if c_fmt != FMT_NONE:
            max_tiles += triton.cdiv(c_slots.shape[1], cfg.block_n)
        num_splits = plan_splits(t_rows, head_blocks, max_tiles, device)
    split = num_splits > 1
    if split:
        part_o = empty((t_rows, h, num_splits, d), torch.float32, device)
        part_ml = empty((t_rows, h, num_splits, 2), torch.float32, device)
    else:
        part_o, part_ml = lse, lse  # unused placeholders
    # The main kernel reads q and writes out as int32 words (pairs of bf16 channels); the
    # combine kernel writes bf16, as rounded int16 bits under the interpreter (_store_bf16).
    if q.stride(2) != 1 or q.stride(1) % 2 or q.stride(0) % 2 or q.data_ptr() % 4:
        q = q.contiguous()
    q_words = q.view(torch.int32)
    out_words = out.view(torch.int32)
    out_arg = out.view(torch.int16) if upcast else out

    w_slots_n = window_cache.num_slots
    c_slots_n = comp_cache.num_slots if c_fmt != FMT_NONE and comp_cache is not None else 0
    _sparse_attn_kernel[(t_rows, head_blocks, num_splits)](
        q_words, q.stride(0), q.stride(1),
        w_st, w_st16, w_st32, w_stride, w_ps, w_slots_n,
        swa_slots, swa_slots.stride(0), swa_lens, swa_slots.shape[1],
        c_st, c_st16, c_st32, c_stride, c_ps, c_slots_n,
        c_slots, c_slots.stride(0), c_lens, c_slots.shape[1],
        sink, float(scale),
        out_words, out.stride(0), out.stride(1),
        lse, lse.stride(0),
        part_o, part_ml, num_splits,
        h,
        D=d, BLOCK_H=cfg.block_h, BLOCK_N=cfg.block_n,
        W_FMT=int(w_fmt), C_FMT=int(c_fmt), SPLIT=split, UPCAST=upcast, HW_FP8=use_hw_fp8,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )  # fmt: skip
    if split:
        _combine_kernel[(t_rows, h)](
            part_o, part_ml, num_splits, sink,
            out_arg, out.stride(0), out.stride(1), lse, lse.stride(0),
            h, D=d, BLOCK_S=max(2, triton.next_power_of_2(num_splits)), UPCAST=upcast,
            num_warps=4,
        )  # fmt: skip
    return out, lse
