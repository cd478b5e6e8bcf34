# mypy: allow-untyped-defs, allow-incomplete-defs, allow-untyped-calls
"""Paged indexer logits in Triton (SPEC section 6).

One program scores one row against `TILES` tiles of `BLOCK_N` consecutive entries: it resolves
each entry's page through the row's block table, runs `[BLOCK_N, Di] x [Di, HI_PAD]` on the
tensor cores (keys as the M side, fp32 accumulation), applies ReLU, scales by the head weights
and reduces over heads in the fixed tree order of one tile shape. MXFP4 keys go to the product
as packed e2m1 with their ue8m0 block scales (`tl.dot_scaled`, which upcasts them to bf16 on
Hopper: exact, every scaled e2m1 value with a scale byte in [2, 252] is a normal bf16); fp8 keys
as e4m3 times their power-of-two row scale in bf16 (exact). Queries are MXFP4-dequantized bf16,
so every product is exact. A tile whose scale bytes fall outside [2, 252] decodes through fp32.

There is one tile shape (`TILE`), on every device and for every row count, so a row's logits are
the same whether it runs alone, in a large prefill or as a decode row. Under the interpreter
(`UPCAST`) the keys are built as fp32 from the same integer bit construction and the product is
an IEEE fp32 dot: same tiles, same head reduction, but numpy's summation order inside the dot,
so the CPU tests prove the tiling, masking, paging and decode, not the GPU's bits.

With `validate=False` the wrapper checks no values; the kernel still reads only inside the
tensors it is given: a request id outside the block table, a table column past its width and a
page outside the cache read nothing (those keys count as zero).
"""

import torch
import triton
import triton.language as tl

from ds41_cache.ops.codec.triton_jit import e2m1_to_f32, e4m3_to_f32, ue8m0_to_f32
from ds41_cache.paged import PagedCache

FMT_MXFP4 = 0
FMT_FP8 = 1
BF16_MAX = tl.constexpr(3.3895313892515355e38)


@triton.jit
def _decode_keys(
    cache_ptr,
    row_at,
    scale_at,
    valid,
    DI: tl.constexpr,
    FMT: tl.constexpr,
    BLOCK_N: tl.constexpr,
    UPCAST: tl.constexpr,
):
    """Index-key rows of one tile -> [BLOCK_N, DI], exact: fp32 when UPCAST (interpreter), else
    bf16 (the tensor-core operand). Masked rows load zero bytes and decode to zeros."""
    m2 = valid[:, None]
    if FMT == 0:
        # Packed e2m1: byte i holds element 2i (low nibble) and 2i+1 (high nibble).
        half = tl.arange(0, DI // 2)
        byte = tl.load(cache_ptr + row_at[:, None] + half[None, :], mask=m2, other=0).to(tl.int32)
        blk = tl.arange(0, DI // 32)
        sc = tl.load(cache_ptr + scale_at[:, None] + blk[None, :], mask=m2, other=127)
        vals = tl.reshape(tl.join(e2m1_to_f32(byte), e2m1_to_f32(byte >> 4)), (BLOCK_N, DI))
        scale = ue8m0_to_f32(sc)[:, :, None]
        k = tl.reshape(tl.reshape(vals, (BLOCK_N, DI // 32, 32)) * scale, (BLOCK_N, DI))
    else:
        d = tl.arange(0, DI)
        byte = tl.load(cache_ptr + row_at[:, None] + d[None, :], mask=m2, other=0)
        b0 = tl.load(cache_ptr + scale_at, mask=valid, other=0).to(tl.int32)
        b1 = tl.load(cache_ptr + scale_at + 1, mask=valid, other=0).to(tl.int32)
        b2 = tl.load(cache_ptr + scale_at + 2, mask=valid, other=0).to(tl.int32)
        b3 = tl.load(cache_ptr + scale_at + 3, mask=valid, other=0).to(tl.int32)
        scale = (b0 | (b1 << 8) | (b2 << 16) | (b3 << 24)).to(tl.float32, bitcast=True)
        # The row scale is a power of two (SPEC section 4): e4m3 times it is exact in bf16.
        k = e4m3_to_f32(byte) * scale[:, None]
    if not UPCAST:
        k = k.to(tl.bfloat16)
    return k


@triton.jit
def _tile_scores(
    cache_ptr,
    row_at,
    scale_at,
    valid,
    qt,
    DI: tl.constexpr,
    FMT: tl.constexpr,
    BLOCK_N: tl.constexpr,
    UPCAST: tl.constexpr,
):
    """[BLOCK_N, Di] keys x qt [Di, HI_PAD] -> fp32 [BLOCK_N, HI_PAD] (exact products)."""
    if UPCAST:
        k = _decode_keys(cache_ptr, row_at, scale_at, valid, DI, FMT, BLOCK_N, UPCAST)
        s = tl.dot(k, qt, input_precision="ieee")
    elif FMT == 0:
        m2 = valid[:, None]
        half = tl.arange(0, DI // 2)
        byte = tl.load(cache_ptr + row_at[:, None] + half[None, :], mask=m2, other=0)
        blk = tl.arange(0, DI // 32)
        sc = tl.load(cache_ptr + scale_at[:, None] + blk[None, :], mask=m2, other=127)
        sci = sc.to(tl.int32)
        # Scale bytes in [2, 252] keep every scaled e2m1 value a normal bf16, so the upcast
        # inside dot_scaled is exact; tiles with other bytes decode through fp32.
        if tl.max(tl.max(((sci < 2) | (sci > 252)).to(tl.int32), axis=1), axis=0) == 0:
            s = tl.dot_scaled(byte, sc, "e2m1", qt, None, "bf16")
        else:
            k = _decode_keys(cache_ptr, row_at, scale_at, valid, DI, FMT, BLOCK_N, UPCAST)
            s = tl.dot(k, qt)
    else:
        k = _decode_keys(cache_ptr, row_at, scale_at, valid, DI, FMT, BLOCK_N, UPCAST)
        s = tl.dot(k, qt)
    return s


@triton.jit
def _paged_logits_kernel(
    q_ptr,
    w_ptr,
    cache_ptr,
    bt_ptr,
    req_ptr,
    pos_ptr,
    cand_ptr,
    out_ptr,
    ratio,
    entry_base,
    n_cols,
    q_stride_t,
    q_stride_h,
    w_stride_t,
    n_req,
    bt_cols,
    bt_stride_r,
    num_pages,
    page_stride,
    page_size,
    cand_stride_t,
    cand_cols,
    out_stride_t,
    HI: tl.constexpr,
    HI_PAD: tl.constexpr,
    DI: tl.constexpr,
    DATA_BYTES: tl.constexpr,
    SCALE_BYTES: tl.constexpr,
    FMT: tl.constexpr,
    HAS_CAND: tl.constexpr,
    OUT_BF16: tl.constexpr,
    UPCAST: tl.constexpr,
    BLOCK_N: tl.constexpr,
    TILES: tl.constexpr,
    STAGES: tl.constexpr,
):
    t = tl.program_id(0).to(tl.int64)
    j = tl.program_id(1)
    r = tl.load(req_ptr + t)
    p = tl.load(pos_ptr + t)
    # A request id outside the table is a padding row (validate=False reads nothing for it).
    live = (r >= 0) & (r < n_req)
    n_vis = tl.where(live, (p + 1) // ratio, 0)
    # The row's query and head weights are loaded once and reused for TILES key tiles.
    h = tl.arange(0, HI_PAD)
    hm = h < HI
    d = tl.arange(0, DI)
    q = tl.load(
        q_ptr + t * q_stride_t + h[:, None] * q_stride_h + d[None, :], mask=hm[:, None], other=0.0
    )
    if UPCAST:
        qt = tl.trans(q.to(tl.float32))
    else:
        qt = tl.trans(q.to(tl.bfloat16))
    w = tl.load(w_ptr + t * w_stride_t + h, mask=hm, other=0.0)
    r_at = tl.where(live, r, 0).to(tl.int64) * bt_stride_r
    # Programs past the row's visible entries (a wide block table) only write -inf.
    if entry_base + j * TILES * BLOCK_N < n_vis:
        for i in tl.range(TILES, num_stages=STAGES):
            cols = (j * TILES + i) * BLOCK_N + tl.arange(0, BLOCK_N)
            entries = entry_base + cols
            in_seg = cols < n_cols
            valid = in_seg & (entries < n_vis)
            col = entries // page_size
            page = tl.load(bt_ptr + r_at + col, mask=valid & (col < bt_cols), other=-1)
            # Keys of pages outside the cache are never read (they score as zero keys).
            readable = valid & (page >= 0) & (page < num_pages)
            off = (entries % page_size).to(tl.int64)
            page_base = page.to(tl.int64) * page_stride
            row_at = page_base + off * DATA_BYTES
            scale_at = page_base + page_size * DATA_BYTES + off * SCALE_BYTES
            s = _tile_scores(cache_ptr, row_at, scale_at, readable, qt, DI, FMT, BLOCK_N, UPCAST)
            logit = tl.sum(tl.maximum(s, 0.0) * w[None, :], axis=1)
            keep = valid
            if HAS_CAND:
                c = tl.load(
                    cand_ptr + t * cand_stride_t + entries,
                    mask=valid & (entries < cand_cols),
                    other=0,
                )
                keep = keep & (c != 0)
            logit = tl.where(keep, logit, float("-inf"))
            _store_logits(out_ptr + t * out_stride_t, cols, logit, in_seg, OUT_BF16)
    else:
        for i in range(TILES):
            cols = (j * TILES + i) * BLOCK_N + tl.arange(0, BLOCK_N)
            logit = tl.full((BLOCK_N,), float("-inf"), tl.float32)
            _store_logits(out_ptr + t * out_stride_t, cols, logit, cols < n_cols, OUT_BF16)


@triton.jit
def _store_logits(row_ptr, cols, logit, mask, OUT_BF16: tl.constexpr):
    if OUT_BF16:
        logit = tl.where(
            logit == float("-inf"), logit, tl.minimum(tl.maximum(logit, -BF16_MAX), BF16_MAX)
        )
        # Round to nearest even on the bits (exact under the interpreter too); out is int16.
        b = logit.to(tl.uint32, bitcast=True)
        rounded = (b + 0x7FFF + ((b >> 16) & 1)) >> 16
        tl.store(row_ptr + cols, rounded.to(tl.int16), mask=mask)
    else:
        tl.store(row_ptr + cols, logit, mask=mask)


TILE = (64, 8, 4, 1)
"""(BLOCK_N, TILES, num_warps, num_stages): a program scores BLOCK_N * TILES entries of one row,
loading the row's query once; num_stages > 1 pipelines the key loads of its tiles. One shape on
every device (the interpreter runs the GPU's tiles and head reduction tree) and for every row
count."""


def paged_logits_triton(
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
) -> torch.Tensor:
    """Fill `out` [T, n] (f32 or bf16) with logits of entries `entry_base + [0, n)`."""
    t = q.shape[0]
    n = out.shape[1]
    if t == 0 or n == 0:
        return out
    block_n, tiles, warps, stages = TILE
    # The grid's second dimension is capped at 65535 programs: very long rows go in pieces.
    span = MAX_GRID_Y * block_n * tiles
    for c0 in range(0, n, span):
        _launch(
            q,
            weights,
            cache,
            block_table,
            req_idx,
            pos,
            ratio,
            out[:, c0 : c0 + span],
            candidates,
            entry_base + c0,
            upcast,
            block_n,
            tiles,
            warps,
            stages,
        )
    return out


MAX_GRID_Y = 65535


def _launch(
    q,
    weights,
    cache,
    block_table,
    req_idx,
    pos,
    ratio,
    out,
    candidates,
    entry_base,
    upcast,
    block_n,
    tiles,
    warps,
    stages,
):
    t, hi, di = q.shape
    n = out.shape[1]
    cand = candidates if candidates is not None else out
    grid = (t, triton.cdiv(n, block_n * tiles))
    _paged_logits_kernel[grid](
        q,
        weights,
        cache.storage,
        block_table,
        req_idx,
        pos,
        cand.view(torch.uint8) if candidates is not None else cand,
        out.view(torch.int16) if out.dtype == torch.bfloat16 else out,
        ratio,
        entry_base,
        n,
        q.stride(0),
        q.stride(1),
        weights.stride(0),
        block_table.shape[0],
        block_table.shape[1],
        block_table.stride(0),
        cache.num_pages,
        cache.page_stride,
        cache.page_size,
        cand.stride(0),
        candidates.shape[1] if candidates is not None else 0,
        out.stride(0),
        HI=hi,
        HI_PAD=max(16, triton.next_power_of_2(hi)),
        DI=di,
        DATA_BYTES=cache.data_bytes,
        SCALE_BYTES=cache.scale_bytes,
        FMT=FMT_MXFP4 if cache.fmt == "mxfp4" else FMT_FP8,
        HAS_CAND=candidates is not None,
        OUT_BF16=out.dtype == torch.bfloat16,
        UPCAST=upcast,
        BLOCK_N=block_n,
        TILES=tiles,
        STAGES=stages,
        num_warps=warps,
    )
