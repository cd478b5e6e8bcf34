# mypy: allow-untyped-defs, allow-incomplete-defs, allow-untyped-calls
"""Paged indexer logits in Triton (SPEC section 6).

One program scores one row against `BLOCK_N` consecutive entries: it resolves each entry's page
through the row's block table, decodes the stored index keys (mxfp4 or fp8_index) with the
shared integer-exact helpers, runs `[HI_PAD, Di] x [Di, BLOCK_N]` on the tensor cores (bf16
operands are exact: queries are MXFP4-dequantized bf16 and every decoded key fits bf16; fp32
accumulation), applies ReLU, scales by the head weights and reduces over heads in the fixed tree
order of one tile shape. The tile shape never depends on the row count, so a row's logits are
the same whether it runs alone, in a large prefill or as a decode row.
"""

import os

import torch
import triton
import triton.language as tl

from ds41_cache.ops.codec.triton_jit import e2m1_to_f32, e4m3_to_f32, ue8m0_to_f32
from ds41_cache.paged import PagedCache

FMT_MXFP4 = 0
FMT_FP8 = 1
BF16_MAX = tl.constexpr(3.3895313892515355e38)


@triton.jit
def _mxfp4_bits_bf16(byte, sc, DI: tl.constexpr, BLOCK_N: tl.constexpr):
    """e2m1 codes times 2**(sc-127), built directly as bf16 bit patterns (int32 [BLOCK_N, DI]).

    A code (e, m) >= 2 scaled by 2**(sc-127) has the bf16 exponent field e + sc - 1 and mantissa
    bit m, i.e. the bits `(code << 6) + ((sc - 1) << 7)`; code 1 (0.5) is `(sc - 1) << 7`.
    Exact for 2 <= sc <= 252 (the caller checks the tile).
    """
    nib = tl.reshape(tl.join(byte & 15, byte >> 4), (BLOCK_N, DI))  # element 2i = low nibble
    code = nib & 7
    sbits = tl.broadcast_to(((sc - 1) << 7)[:, :, None], (BLOCK_N, DI // 32, 32))
    sbits = tl.reshape(sbits, (BLOCK_N, DI))
    mag = tl.where(code > 1, (code << 6) + sbits, tl.where(code == 1, sbits, 0))
    return mag | ((nib & 8) << 12)


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
        sc = tl.load(cache_ptr + scale_at[:, None] + blk[None, :], mask=m2, other=127).to(tl.int32)
        if (tl.min(tl.min(sc, axis=1), axis=0) >= 2) & (tl.max(tl.max(sc, axis=1), axis=0) <= 252):
            # Common case: integer bit construction only, no float math per element.
            bits = _mxfp4_bits_bf16(byte, sc, DI, BLOCK_N)
            if UPCAST:
                k = (bits << 16).to(tl.float32, bitcast=True)
            else:
                k = bits.to(tl.int16).to(tl.bfloat16, bitcast=True)
        else:
            vals = tl.reshape(tl.join(e2m1_to_f32(byte), e2m1_to_f32(byte >> 4)), (BLOCK_N, DI))
            scale = ue8m0_to_f32(sc)[:, :, None]
            kf = tl.reshape(tl.reshape(vals, (BLOCK_N, DI // 32, 32)) * scale, (BLOCK_N, DI))
            if UPCAST:
                k = kf
            else:
                k = kf.to(tl.bfloat16)
    else:
        d = tl.arange(0, DI)
        byte = tl.load(cache_ptr + row_at[:, None] + d[None, :], mask=m2, other=0)
        b0 = tl.load(cache_ptr + scale_at, mask=valid, other=0).to(tl.int32)
        b1 = tl.load(cache_ptr + scale_at + 1, mask=valid, other=0).to(tl.int32)
        b2 = tl.load(cache_ptr + scale_at + 2, mask=valid, other=0).to(tl.int32)
        b3 = tl.load(cache_ptr + scale_at + 3, mask=valid, other=0).to(tl.int32)
        scale = (b0 | (b1 << 8) | (b2 << 16) | (b3 << 24)).to(tl.float32, bitcast=True)
        kf = e4m3_to_f32(byte) * scale[:, None]
        if UPCAST:
            k = kf
        else:
            k = kf.to(tl.bfloat16)
    return k


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
    bt_stride_r,
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
    KEYS_M: tl.constexpr,
):
    t = tl.program_id(0).to(tl.int64)
    j = tl.program_id(1)
    r = tl.load(req_ptr + t)
    p = tl.load(pos_ptr + t)
    n_vis = tl.where(r >= 0, (p + 1) // ratio, 0)
    # The row's query and head weights are loaded once and reused for TILES key tiles.
    h = tl.arange(0, HI_PAD)
    hm = h < HI
    d = tl.arange(0, DI)
    q = tl.load(
        q_ptr + t * q_stride_t + h[:, None] * q_stride_h + d[None, :], mask=hm[:, None], other=0.0
    )
    if UPCAST:
        q = q.to(tl.float32)
    else:
        q = q.to(tl.bfloat16)
    w = tl.load(w_ptr + t * w_stride_t + h, mask=hm, other=0.0)
    for i in range(TILES):
        cols = (j * TILES + i) * BLOCK_N + tl.arange(0, BLOCK_N)
        entries = entry_base + cols
        in_seg = cols < n_cols
        valid = in_seg & (entries < n_vis)
        if entry_base + (j * TILES + i) * BLOCK_N < n_vis:
            page = tl.load(
                bt_ptr + r.to(tl.int64) * bt_stride_r + entries // page_size, mask=valid, other=0
            )
            off = (entries % page_size).to(tl.int64)
            page_base = page.to(tl.int64) * page_stride
            row_at = page_base + off * DATA_BYTES
            scale_at = page_base + page_size * DATA_BYTES + off * SCALE_BYTES
            k = _decode_keys(cache_ptr, row_at, scale_at, valid, DI, FMT, BLOCK_N, UPCAST)
            if KEYS_M:
                # Keys as the M side ([BLOCK_N, Di] x [Di, HI_PAD]): M=64/128 suits wgmma.
                if UPCAST:
                    s = tl.dot(k, tl.trans(q), input_precision="ieee")
                else:
                    s = tl.dot(k, tl.trans(q))
                logit = tl.sum(tl.maximum(s, 0.0) * w[None, :], axis=1)
            else:
                if UPCAST:
                    s = tl.dot(q, tl.trans(k), input_precision="ieee")
                else:
                    s = tl.dot(q, tl.trans(k))
                logit = tl.sum(tl.maximum(s, 0.0) * w[:, None], axis=0)
            keep = valid
            if HAS_CAND:
                c = tl.load(
                    cand_ptr + t * cand_stride_t + entries,
                    mask=valid & (entries < cand_cols),
                    other=0,
                )
                keep = keep & (c != 0)
            logit = tl.where(keep, logit, float("-inf"))
        else:
            logit = tl.full((BLOCK_N,), float("-inf"), tl.float32)
        if OUT_BF16:
            logit = tl.where(
                logit == float("-inf"), logit, tl.minimum(tl.maximum(logit, -BF16_MAX), BF16_MAX)
            )
            # Round to nearest even on the bits (exact under the interpreter too); out is int16.
            b = logit.to(tl.uint32, bitcast=True)
            rounded = (b + 0x7FFF + ((b >> 16) & 1)) >> 16
            tl.store(out_ptr + t * out_stride_t + cols, rounded.to(tl.int16), mask=in_seg)
        else:
            tl.store(out_ptr + t * out_stride_t + cols, logit, mask=in_seg)


TILE_CONFIG = {"cuda": (64, 8, 4, 1), "cpu": (128, 1, 4, 0)}
"""(BLOCK_N, TILES, num_warps, KEYS_M) per device type: the interpreter pays per program, the
GPU per register. A program scores BLOCK_N * TILES entries, loading the row's query once.
`DS41_INDEXER_LOGITS_TILE="64,8,4,1"` overrides the CUDA entry (benchmark sweeps); a row's
logits never depend on the row count under any one configuration."""


def tile_config(device: torch.device) -> tuple[int, int, int, int]:
    if device.type != "cuda":
        return TILE_CONFIG["cpu"]
    env = os.environ.get("DS41_INDEXER_LOGITS_TILE")
    if env:
        vals = tuple(int(v) for v in env.split(","))
        if len(vals) != 4:
            raise ValueError(
                f"DS41_INDEXER_LOGITS_TILE must be 'BLOCK_N,TILES,WARPS,KEYS_M', got {env!r}"
            )
        return vals  # type: ignore[return-value]
    return TILE_CONFIG["cuda"]


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
    block_n, tiles, warps, keys_m = tile_config(q.device)
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
            keys_m,
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
    keys_m,
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
        block_table.stride(0),
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
        KEYS_M=bool(keys_m),
        num_warps=warps,
    )
