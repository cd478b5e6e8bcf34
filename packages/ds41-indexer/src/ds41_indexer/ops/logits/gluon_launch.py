"""Host side of the paged logits on GPUs: the Hopper Gluon kernel (`gluon_kernels.py`) for the
calls it serves, the Triton kernel (`triton_kernels.py`) for every other call.

Bits: the Gluon kernel writes the Triton kernel's bits on every span: the fast path's (the same
operands, instruction shape, order of products and head-sum tree) where the span is in that
path's range, and the general path's, scored again at the program's end, where it is not
(checked bitwise on the H200 by `tests/test_gluon_logits.py`). So the logits are the Triton
kernel's whichever kernel runs: a row's logits stay a function of that row alone, and the fused
and unfused calls agree. Every call the Gluon kernel can serve takes it, one row included
(measured on the H200: one row of 128K entries with group maxima, 18.1 us for the Gluon kernel
and the Triton pass it then needed against 23.2 us for the Triton kernel alone, BENCHMARKS.md,
issue 12, sixth round; without that pass, fused one row at 1M 3-4 us less: fourteenth
session).
"""

from __future__ import annotations

import functools

import torch

from ds41_cache.backend import interpreter_active
from ds41_cache.ops.launch import dependent_launch
from ds41_cache.paged import PagedCache

from .triton_kernels import MAX_GRID_Y, TILE, paged_logits_triton

# Program shapes by grid size (rows x spans of GLUON_SPAN tiles), measured on the H200
# (BENCHMARKS.md, issue 12, seventh and ninth rounds; the package README, tenth session;
# thirteenth session's sweep, `scripts/issue12/config_sweep.py`): up to GLUON_SPLIT_PROGRAMS
# spans, two consumer warpgroups split a program's tiles (one row of 128K entries: 14.7 us
# against 18.5); from GLUON_WIDE_PROGRAMS spans a program takes two spans, from
# GLUON_WIDER_PROGRAMS four and from GLUON_WIDEST_PROGRAMS eight (fewer programs, so less setup
# per tile, while the grid still fills the GPU's 4 programs an SM: at 1,024 spans, 32 x 32K /
# 8 x 128K, two spans a program 40.1 / 40.3 us against 42.7 / 43.3 with one and 53.1 / 51.6
# with four; at 2,048 spans, 64 x 32K, four 70.4 us against 72.2 with two; at 4,096, 128 x 32K,
# eight 132.3 against 135.9 with four; from 8,192 spans four and eight are even)
GLUON_SPLIT_PROGRAMS = 256
GLUON_WIDE_PROGRAMS = 1024
GLUON_WIDER_PROGRAMS = 2048
GLUON_WIDEST_PROGRAMS = 4096
GLUON_TILES = (16, 32, 64, 128)


@functools.cache
def _gluon_importable() -> bool:
    try:
        from . import gluon_kernels  # noqa: F401
    except ImportError:
        return False
    return True


def gluon_shape_ok(
    fmt: str, hi: int, di: int, page_size: int, entry_base: int, capability: tuple[int, int]
) -> bool:
    """Whether the Gluon kernel can serve a call of this shape on a device of this compute
    capability: sm_90 (Hopper), MXFP4 keys of 128 channels, at most 64 heads, tiles inside one
    page (page_size and entry_base multiples of 64). A pure function (tested on the CPU)."""
    block_n = TILE[0]
    return (
        capability == (9, 0)
        and fmt == "mxfp4"
        and di == 128
        and 1 <= hi <= 64
        and page_size % block_n == 0
        and entry_base % block_n == 0
    )


def use_gluon(q: torch.Tensor, cache: PagedCache, entry_base: int, n: int) -> bool:
    """Whether `paged_logits_gpu` runs the Gluon kernel for a call scoring `n` entries per row
    (see the module doc)."""
    if q.device.type != "cuda" or interpreter_active() or q.shape[0] == 0:
        return False
    if -(-n // (TILE[0] * TILE[1])) > MAX_GRID_Y:
        return False
    cap = torch.cuda.get_device_capability(q.device)
    if not gluon_shape_ok(cache.fmt, q.shape[1], q.shape[2], cache.page_size, entry_base, cap):
        return False
    return cache.storage.data_ptr() % 16 == 0 and _gluon_importable()


def paged_logits_gpu(
    q: torch.Tensor,
    weights: torch.Tensor,
    cache: PagedCache,
    block_table: torch.Tensor,
    req_idx: torch.Tensor,
    pos: torch.Tensor,
    ratio: int,
    out: torch.Tensor,
    candidates: torch.Tensor | None = None,
    *,
    entry_base: int = 0,
    upcast: bool = False,
    gmax: torch.Tensor | None = None,
) -> torch.Tensor:
    """`paged_logits_triton`'s contract (same arguments, same bits), on the Gluon kernel when
    `use_gluon` holds, else on the Triton kernel."""
    if upcast or not use_gluon(q, cache, entry_base, out.shape[1]):
        return paged_logits_triton(
            q, weights, cache, block_table, req_idx, pos, ratio, out, candidates,
            entry_base=entry_base, upcast=upcast, gmax=gmax,
        )  # fmt: skip
    launch_gluon_logits(
        q, weights, cache, block_table, req_idx, pos, ratio, out, candidates,
        entry_base=entry_base, gmax=gmax,
    )  # fmt: skip
    return out


def gluon_config(rows: int, spans: int) -> tuple[int, int]:
    """(consumer warpgroups, tiles) of a Gluon program for a call of `rows` rows of `spans`
    spans (GLUON_SPAN tiles each): few programs (one row) take two consumer warpgroups each,
    many programs take two, four or eight spans each (one path decision per span). A pure
    function of the shape (tested on the CPU); the logits are the same bits whichever shape
    runs."""
    programs = rows * spans
    if programs <= GLUON_SPLIT_PROGRAMS:
        return 2, TILE[1]
    if programs >= GLUON_WIDEST_PROGRAMS:
        return 1, 8 * TILE[1]
    if programs >= GLUON_WIDER_PROGRAMS:
        return 1, 4 * TILE[1]
    if programs >= GLUON_WIDE_PROGRAMS:
        return 1, 2 * TILE[1]
    return 1, TILE[1]


def launch_gluon_logits(
    q: torch.Tensor,
    weights: torch.Tensor,
    cache: PagedCache,
    block_table: torch.Tensor,
    req_idx: torch.Tensor,
    pos: torch.Tensor,
    ratio: int,
    out: torch.Tensor,
    candidates: torch.Tensor | None = None,
    *,
    entry_base: int = 0,
    gmax: torch.Tensor | None = None,
    config: tuple[int, int] | None = None,
) -> torch.Tensor:
    """Score every span of `out` (as `paged_logits_triton`, the same bits) on the Gluon kernel;
    returns int8 [T, spans] with each span's path: 1 the fp16 path, 2 the general path (the
    tests use it to show both ran). `config` (consumers 1 or 2, tiles 16, 32, 64 or 128)
    overrides `gluon_config` (the tests run every one)."""
    from . import gluon_kernels as gk

    t, hi, _di = q.shape
    n = out.shape[1]
    block_n, tiles = TILE[0], TILE[1]
    span = block_n * tiles
    assert block_n == gk.GLUON_BLOCK_N and tiles == gk.GLUON_SPAN
    spans = -(-n // span)
    paths = torch.empty((t, max(spans, 1)), dtype=torch.int8, device=q.device)
    if t == 0 or n == 0:
        return paths
    consumers, prog_tiles = config if config is not None else gluon_config(t, spans)
    if consumers not in (1, 2) or prog_tiles not in GLUON_TILES:
        raise ValueError(f"config must be (1 or 2, one of {GLUON_TILES}), got {config}")
    cand = candidates if candidates is not None else out
    grid = (t, -(-n // (block_n * prog_tiles)))
    gk._gluon_logits_kernel[grid](
        q, weights, cache.storage, block_table, req_idx, pos,
        cand.view(torch.uint8) if candidates is not None else req_idx,
        out.view(torch.int16) if out.dtype == torch.bfloat16 else out,
        gmax if gmax is not None else req_idx,
        paths,
        ratio, entry_base, n, q.stride(0), q.stride(1), weights.stride(0),
        block_table.shape[0], block_table.shape[1], block_table.stride(0),
        cache.num_pages, cache.page_stride,
        cand.stride(0) if candidates is not None else 0,
        candidates.shape[1] if candidates is not None else 0,
        out.stride(0), gmax.stride(0) if gmax is not None else 0, paths.stride(0), spans,
        HI=hi, HI_PAD=max(16, 1 << (hi - 1).bit_length()), PAGE_SIZE=cache.page_size,
        HAS_CAND=candidates is not None, OUT_BF16=out.dtype == torch.bfloat16,
        HAS_GMAX=gmax is not None, STAGES=gk.GLUON_STAGES, TILES=prog_tiles, NC=consumers,
        CONSUMER_REGS=gk.GLUON_CONSUMER_REGS,
        num_warps=gk.GLUON_NUM_WARPS, maxnreg=gk.GLUON_MAXNREG, **dependent_launch(q.device),
    )  # fmt: skip
    return paths
