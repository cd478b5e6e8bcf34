"""Host side of the Hopper Gluon kernels (`gluon_kernels.py`, `gluon_pair_kernels.py`): support
check, split planner, the pair kernel's choice, compile checks and cluster launch, launches of
the invariant path and of the fast (split-KV) path."""

from __future__ import annotations

import functools
import warnings
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
    """Whether the Gluon kernels serve this call: a CUDA sm_90 device (Hopper), D = 512.

    The tile configuration is fixed (64 heads x 32 keys per tile, one producer and two
    consumer warpgroups, 3 K stages, 2 for bf16 records); it depends on nothing but (H, D)
    and the cache formats, never on the batch, like the Triton kernel's. The invariant path's
    pair kernel (`use_pair_kernel`) and persistent grid (`persistent_programs`), both chosen
    by the batch, give a row the same bits.
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


def persistent_programs(num_rows: int, head_blocks: int, splits: int, num_sms: int) -> int:
    """Programs of the invariant kernel's persistent grid, or 0 for the one-item grid (a
    program per (row, head block)). Persistent once the items (rows x head blocks) outnumber
    the SMs: one program an SM walks items p, p + SMs, ..., overlapping an item's end with the
    next one's start (H200, twenty-eighth session: 0.942-0.952 of the one-item grid's time at
    T = 1024, 0.933-0.947 at 2112 / 4096); within one wave it would only add its bookkeeping
    (the lab kernel: 1.026-1.034 at T = 67..132). Split mode (the fast path) keeps the
    one-item grid. A row's bits are the same either way (each item's arithmetic is the
    one-item kernel's)."""
    if splits != 1 or num_rows * head_blocks <= num_sms:
        return 0
    return num_sms


def _q_rows(q: torch.Tensor) -> torch.Tensor:
    """q (bf16 [T, H, D], unit channel stride) as the [T H, D] matrix the persistent kernel's
    TMA descriptor reads: a view where q's head rows are evenly spaced at a 16-byte multiple
    from a 16-byte aligned start, else a contiguous copy."""
    t_rows, h, d = q.shape
    if q.stride(0) != h * q.stride(1) or q.stride(1) % 8 or q.data_ptr() % 16:
        q = q.contiguous()
    return q.as_strided((t_rows * h, d), (q.stride(1), 1))


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
    constexprs (also used by the lab variants in scripts/). The kernels take the softmax
    scale times log2(e) (`scale_log2`), rounded once to fp32 from the double product."""
    from .gluon_kernels import LOG2E

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
        sink, float(scale) * LOG2E.value,  # the kernels' softmax runs in base 2
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
    blocks of 64, splits), or `persistent_programs` programs once the items outnumber the SMs
    (invariant mode); `options` extra launch options. `splits` > 1: each program takes a
    contiguous slice of its row's tiles, writes fp32 partials, and the Triton combine kernel
    merges them (the fast path; not batch invariant: the slices follow the split count)."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    from .gluon_kernels import GLUON_BLOCK_H, GLUON_D, GLUON_NUM_WARPS, tma_box_layouts

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
    programs = persistent_programs(t_rows, head_blocks, splits, _num_sms(device.index))
    if programs:
        # Q as [T H, D] in [64, 256] boxes (a later item's Q; past a row's H heads the box reads
        # the next row's, whose outputs are never stored), the output as [T, H, D] in [1, 64,
        # 256] boxes (heads past H clipped)
        q_box, out_box = tma_box_layouts()
        q_desc = TensorDescriptor.from_tensor(_q_rows(args[0]), [GLUON_BLOCK_H, 256], q_box)
        out_desc = TensorDescriptor.from_tensor(out, [1, GLUON_BLOCK_H, 256], out_box)
        kernel[(programs,)](
            *args, part_o, part_ml, splits, t_rows, q_desc, out_desc, **fmts, SPLIT=False,
            PERSISTENT=True, num_warps=GLUON_NUM_WARPS, **options,
        )  # fmt: skip
    else:
        kernel[(t_rows, head_blocks, splits)](
            *args, part_o, part_ml, splits, t_rows, None, None, **fmts, SPLIT=split,
            num_warps=GLUON_NUM_WARPS, **options,
        )  # fmt: skip
    if split:
        _combine_kernel[(t_rows, h)](
            part_o, part_ml, splits, sink,
            out, out.stride(0), out.stride(1), lse, lse.stride(0),
            h, D=GLUON_D, BLOCK_S=max(2, triton.next_power_of_2(splits)), UPCAST=False,
            num_warps=4,
        )  # fmt: skip
    return out, lse


def use_pair_kernel(num_rows: int, head_blocks: int, num_sms: int) -> bool:
    """Whether the invariant path runs the pair kernel (`gluon_pair_kernels.py`): while every
    (row, head block) can have two SMs in one wave. Both kernels give every row the same bits
    (the pair kernel's arithmetic is the one-CTA kernel's), so the choice, which follows the
    batch, does not touch invariance; past one wave the one-CTA kernel does more rows per SM.
    """
    from .gluon_pair_kernels import PAIR_CLUSTER

    return 0 < num_rows * head_blocks * PAIR_CLUSTER <= num_sms


PAIR_ENV = "DS41_PAIR"
"""Environment variable: `0` keeps the invariant path on the one-CTA kernel at every batch size
(a comparison baseline and an escape hatch; read once per process)."""


@functools.cache
def _num_sms(index: int | None) -> int:
    return int(torch.cuda.get_device_properties(index).multi_processor_count)


@functools.cache
def _pair_allowed() -> bool:
    import os

    return os.environ.get(PAIR_ENV, "1") != "0"


def _fmt_key(window_cache: PagedCache, comp_cache: PagedCache | None) -> tuple[int, int]:
    cfmt = -1 if comp_cache is None else int(KvFormat.from_name(comp_cache.fmt))
    return int(KvFormat.from_name(window_cache.fmt)), cfmt


def _pair_serves(q: torch.Tensor, fmt_key: tuple[int, int]) -> bool:
    """Whether the pair kernel takes this batch when the caller leaves the choice open."""
    from .gluon_kernels import GLUON_BLOCK_H

    return (
        _pair_allowed()
        and fmt_key not in _PAIR_DISABLED
        and use_pair_kernel(q.shape[0], -(-q.shape[1] // GLUON_BLOCK_H), _num_sms(q.device.index))
    )


class PairKernelUnavailable(RuntimeError):
    """The pair kernel cannot run as compiled (its K stages are not where its bulk copies
    address them); the one-CTA kernel serves instead."""


_PAIR_DISABLED: set[tuple[int, int]] = set()
_PAIR_XBASE: dict[tuple[int, int, bool], int] = {}


def _k_stages_offset(kernel: Any) -> int:
    """Shared-memory byte offset of the pair kernel's K stages (its first [N, 32, 256] bf16
    allocation), from Triton's own shared-memory allocation pass run on the compiled kernel's
    TTGIR (the passes `make_llir` runs before it, in its order)."""
    import re
    import tempfile

    from triton._C.libtriton import ir, nvidia, passes
    from triton.backends.compiler import GPUTarget
    from triton.backends.nvidia.compiler import CUDABackend, get_ptx_version_from_options

    backend = CUDABackend(GPUTarget("cuda", 90, 32))
    ctx = ir.context()
    ir.load_dialects(ctx)
    backend.load_dialects(ctx)
    with tempfile.NamedTemporaryFile("w", suffix=".ttgir") as f:
        f.write(kernel.asm["ttgir"])
        f.flush()
        mod = ir.parse_mlir_module(f.name, ctx)
    pm = ir.pass_manager(ctx)
    passes.ttgpuir.add_combine_tensor_select_and_if(pm)
    passes.ttgpuir.add_allocate_warp_groups(pm)
    passes.convert.add_scf_to_cf(pm)
    passes.gluon.add_inliner(pm)
    ptx = get_ptx_version_from_options(backend.parse_options({}), 90)
    nvidia.passes.ttgpuir.add_allocate_shared_memory_nv(pm, 90, ptx)
    pm.run(mod, "ds41_pair_offsets")
    m = re.search(
        r"local_alloc \{allocation\.offset = (\d+) : i32\} : \(\) -> "
        r"!ttg\.memdesc<\d+x32x256xbf16",
        str(mod),
    )
    if m is None:
        raise PairKernelUnavailable("the pair kernel's K stages were not found in its TTGIR")
    return int(m.group(1))


def _pair_kernel(args: list[Any], fmts: dict[str, int], grid: tuple[int, int],
                 options: dict[str, Any]) -> tuple[Any, int]:  # fmt: skip
    """(compiled pair kernel ready for a cluster launch, its XBASE) for these arguments.

    Triton compiles the kernel for one CTA; its barriers past Triton's shared memory start at
    XBASE (a first compile at XBASE = 0 gives the size; XBASE only enters inline asm). Before
    its first launch, a compiled kernel is checked (shared memory below XBASE, K stages at
    offset 0) and its launch metadata set to clusters of two CTAs and the barrier bytes
    (Triton's launcher multiplies the first grid dimension by the cluster size).
    """
    from .gluon_pair_kernels import PAIR_CLUSTER, _gluon_pair_attn_kernel, pair_barrier_bytes

    kern = _gluon_pair_attn_kernel
    key = (fmts["W_FMT"], fmts["C_FMT"], bool(options.get("GDC")))
    xbase = _PAIR_XBASE.get(key)
    if xbase is None:
        sized = kern.warmup(*args, **fmts, XBASE=0, grid=grid, **options)
        xbase = -(-sized.metadata.shared // 1024) * 1024
        _PAIR_XBASE[key] = xbase
    k = kern.warmup(*args, **fmts, XBASE=xbase, grid=grid, **options)
    if not getattr(k, "ds41_pair_ready", False):
        if k.metadata.shared > xbase:
            raise PairKernelUnavailable(
                f"pair kernel shared memory {k.metadata.shared} B exceeds XBASE {xbase}"
            )
        try:
            off = _k_stages_offset(k)
        except Exception as e:  # a Triton whose passes or IR differ: no cluster launch
            raise PairKernelUnavailable(f"pair kernel offset check failed: {e}") from e
        if off != 0:
            raise PairKernelUnavailable(f"pair kernel K stages at shared offset {off}, not 0")
        if k.module is not None:
            raise PairKernelUnavailable("pair kernel loaded before its cluster launch was set")
        total = xbase + pair_barrier_bytes()
        k.metadata = k.metadata._replace(shared=total)
        k.packed_metadata = (k.metadata.num_warps, PAIR_CLUSTER, total)
        k.ds41_pair_ready = True
    return k, xbase


def launch_gluon_pair(
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
    """The invariant path on two CTAs a row sharing the decode (`gluon_pair_kernels.py`);
    returns (out bf16 [T, H, D], lse f32 [T, H]), bitwise those of the one-CTA kernel.
    Inputs as for `launch_gluon_sparse_attention`. Raises `PairKernelUnavailable` where the
    compiled kernel fails its checks."""
    from .gluon_pair_kernels import PAIR_BLOCK_H, PAIR_MAXNREG, PAIR_NUM_WARPS

    t_rows, h, d = q.shape
    device = q.device
    out = empty((t_rows, h, d), torch.bfloat16, device)
    lse = empty((t_rows, h), torch.float32, device)
    if t_rows == 0:
        return out, lse
    args, fmts = kernel_args(q, window_cache, swa_slots, swa_lens, comp_cache, comp_slots,
                             comp_lens, sink, scale, out, lse)  # fmt: skip
    grid = (t_rows, -(-h // PAIR_BLOCK_H))
    dl = dependent_launch(device)
    options = {"num_warps": PAIR_NUM_WARPS, "maxnreg": PAIR_MAXNREG, **dl}
    k, xbase = _pair_kernel(args, fmts, grid, options)
    k[(*grid, 1)](*args, fmts["W_FMT"], fmts["C_FMT"], xbase, dl["GDC"])  # (a 3-D grid)
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
    *,
    pair: bool | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The batch-invariant path on Hopper; returns (out bf16 [T, H, D], lse f32 [T, H]).

    Inputs as `sparse_attention` accepts them (shapes, dtypes, devices checked by the
    caller); `gluon_supported(q)` must hold. Slots outside [0, num_slots) and lengths outside
    [0, W] / [0, K] never make the kernel read out of bounds (such keys are skipped).
    `pair`: None picks the pair kernel (two CTAs a row) by `use_pair_kernel` (unless the
    environment sets DS41_PAIR=0) and the one-CTA kernel otherwise (the same bits either way;
    past one wave the one-CTA kernel runs persistent programs, `persistent_programs`),
    falling back to the one-CTA kernel with a warning where the pair kernel fails its compile
    checks; True / False forces one of them (True raises `PairKernelUnavailable` there).
    """
    from .gluon_kernels import GLUON_MAXNREG, _gluon_sparse_attn_kernel

    fmt_key = _fmt_key(window_cache, comp_cache)
    forced = pair is True
    if pair is None:
        pair = _pair_serves(q, fmt_key)
    if pair:
        try:
            return launch_gluon_pair(q, window_cache, swa_slots, swa_lens, comp_cache,
                                     comp_slots, comp_lens, sink, scale)  # fmt: skip
        except PairKernelUnavailable as e:
            if forced:
                raise
            _PAIR_DISABLED.add(fmt_key)
            warnings.warn(f"{e}; the one-CTA kernel serves instead", RuntimeWarning, stacklevel=2)
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
    SM count) slices per row. With one slice it is the invariant kernel; where the default
    plan gives two slices and the pair kernel serves the batch, the invariant path's pair
    kernel runs instead (faster there, and a batch-dependent choice like the split count).
    Not batch invariant: a row's slices, so its bits, follow the batch size. Inputs as for
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
        sms = _num_sms(q.device.index)
        splits = plan_gluon_splits(t_rows, -(-h // GLUON_BLOCK_H), max_tiles, sms)
        if splits == 2 and _pair_serves(q, _fmt_key(window_cache, comp_cache)):
            # Two slices a row: the pair kernel's two CTAs a row share one unsplit walk and
            # need no combine (measured on the H200 at T = 48..66: 0.91-0.98 of the time).
            return launch_gluon_sparse_attention(
                q, window_cache, swa_slots, swa_lens, comp_cache, comp_slots, comp_lens, sink,
                scale,
            )  # fmt: skip
    if not 1 <= splits <= GLUON_MAX_SPLITS:
        raise ValueError(f"splits must lie in [1, {GLUON_MAX_SPLITS}], got {splits}")
    options = {"maxnreg": GLUON_MAXNREG, **dependent_launch(q.device)}
    return launch_with(
        _gluon_sparse_attn_kernel, options, q, window_cache, swa_slots, swa_lens, comp_cache,
        comp_slots, comp_lens, sink, scale, splits=splits,
    )  # fmt: skip
