"""Host side of the Triton kernels: tile configuration, split planning, launches."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch
import triton

from ds41_cache import PagedCache, empty
from ds41_cache.backend import interpreter_active

from .triton_kernels import _combine_kernel, _sparse_attn_kernel

FMT_CODES = {"mxfp8": 0, "nvfp4": 1, "bf16": 2}
"""Format codes the kernels branch on (constexpr); 3 means "no compressed cache"."""
FMT_NONE = 3
MAX_SPLITS = 64


@dataclass(frozen=True)
class KernelConfig:
    """Tile shape and launch parameters; chosen from (H, D) only, never from the batch.

    `d_tiles`: programs per (row, head block), each owning a share of the output channels
    (1, or 2 = one channel parity each; both recompute the same scores, so they agree on the
    softmax bit for bit). Measured slower on the H200 at H=64, D=512 (README), kept as an option.
    """

    block_h: int
    block_n: int
    num_warps: int
    num_stages: int
    d_tiles: int = 1


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
    profile_drop: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Run the kernels on validated inputs; returns (out bf16 [T, H, D], lse f32 [T, H]).

    `batch_invariant=True`: one program per (row, head block), no split. Otherwise `splits`
    (or the planner) decides how many programs share one row's keys, merged by a combine pass.
    `hw_fp8`: decode e4m3 with the hardware conversion (default on CUDA) or the integer helpers;
    both give identical values. `profile_drop` (stage-drop profiling only, meaningless
    outputs): the kernel's DROP switch, see `_sparse_attn_kernel`.
    """
    if profile_drop not in (0, 1, 2, 3):
        raise ValueError(f"profile_drop must be 0, 1, 2 or 3, got {profile_drop}")
    t_rows, h, d = q.shape
    device = q.device
    out = empty((t_rows, h, d), torch.bfloat16, device)
    lse = empty((t_rows, h), torch.float32, device)
    if t_rows == 0:
        return out, lse
    cfg = config or default_config(h, d)
    if cfg.d_tiles not in (1, 2):
        raise ValueError(f"config.d_tiles must be 1 or 2, got {cfg.d_tiles}")
    if not batch_invariant:
        cfg = replace(cfg, d_tiles=1)  # the split path keeps whole rows of channels
    upcast = interpreter_active()
    use_hw_fp8 = (not upcast) and device.type == "cuda" and hw_fp8 is not False
    head_blocks = triton.cdiv(h, cfg.block_h)
    w_st, w_st16, w_st32, w_stride, w_ps = _storage_args(window_cache)
    w_fmt = FMT_CODES[window_cache.fmt]
    if comp_cache is not None and comp_slots is not None and comp_lens is not None:
        c_st, c_st16, c_st32, c_stride, c_ps = _storage_args(comp_cache)
        c_fmt = FMT_CODES[comp_cache.fmt]
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

    _sparse_attn_kernel[(t_rows, head_blocks * cfg.d_tiles, num_splits)](
        q_words, q.stride(0), q.stride(1),
        w_st, w_st16, w_st32, w_stride, w_ps, swa_slots, swa_slots.stride(0), swa_lens,
        c_st, c_st16, c_st32, c_stride, c_ps, c_slots, c_slots.stride(0), c_lens,
        sink, float(scale),
        out_words if cfg.d_tiles == 1 else out_arg, out.stride(0), out.stride(1),
        lse, lse.stride(0),
        part_o, part_ml, num_splits,
        h,
        D=d, BLOCK_H=cfg.block_h, BLOCK_N=cfg.block_n,
        W_FMT=w_fmt, C_FMT=c_fmt, SPLIT=split, UPCAST=upcast, HW_FP8=use_hw_fp8,
        D_TILES=cfg.d_tiles, DROP=profile_drop,
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


def kernel_signature(
    cfg: KernelConfig, dim: int, w_fmt: int, c_fmt: int
) -> tuple[dict[str, str], dict[str, int | bool], dict[tuple[int], list[list[Any]]]]:
    """(signature, constexprs, attrs) of the invariant `_sparse_attn_kernel` as the launcher
    specializes it on the V4.1 geometry (pointers and strides divisible by 16, one split), for
    offline compiles (ptxas reports without a GPU)."""
    out_t = "*i32" if cfg.d_tiles == 1 else "*bf16"
    p = {"q_ptr": "*i32", "w_ptr": "*u8", "w16_ptr": "*i16", "w32_ptr": "*i32",
         "swa_ptr": "*i32", "swa_lens_ptr": "*i32", "c_ptr": "*u8", "c16_ptr": "*i16",
         "c32_ptr": "*i32", "comp_ptr": "*i32", "comp_lens_ptr": "*i32", "sink_ptr": "*fp32",
         "out_ptr": out_t, "lse_ptr": "*fp32", "part_o_ptr": "*fp32", "part_ml_ptr": "*fp32",
         "scale": "fp32"}  # fmt: skip
    constexprs: dict[str, int | bool] = {
        "D": dim, "BLOCK_H": cfg.block_h, "BLOCK_N": cfg.block_n, "W_FMT": w_fmt,
        "C_FMT": c_fmt, "SPLIT": False, "UPCAST": False, "HW_FP8": True,
        "D_TILES": cfg.d_tiles, "DROP": 0, "num_splits": 1,
    }  # fmt: skip
    sig = {}
    attrs: dict[tuple[int], list[list[Any]]] = {}
    for i, name in enumerate(_sparse_attn_kernel.arg_names):
        sig[name] = "constexpr" if name in constexprs else p.get(name, "i32")
        if sig[name] != "constexpr" and name != "scale":
            attrs[(i,)] = [["tt.divisibility", 16]]
    return sig, constexprs, attrs
