# mypy: allow-untyped-defs, allow-incomplete-defs
"""Triton encode/decode kernels for every cache format (SPEC section 4).

A row is handled as a `[NG, HQ]` tile of channel pairs: group `g` (one scale block of `QB`
channels) and pair `j` inside it, i.e. channels `g*QB + 2j` (even) and `g*QB + 2j + 1` (odd).
Splitting even/odd channels makes e2m1 nibble packing (element 2i low, 2i+1 high) and the
interleaved RoPE pairs plain elementwise work. The row-level helpers `load_pairs`,
`quantize_store` and `load_decode` are shared with the fused insert/gather kernels.

Format ids (constexpr `FMT`): 0 mxfp8, 1 nvfp4, 2 mxfp4, 3 fp8_index, 4 bf16.
"""

import torch
import triton
import triton.language as tl

from .triton_jit import (
    ceil_log2_f32,
    e2m1_to_f32,
    e4m3_to_f32,
    f32_to_bf16_bits,
    f32_to_e2m1,
    f32_to_e4m3,
    pow2_f32,
    ue8m0_to_f32,
)

FMT_IDS = {"mxfp8": 0, "nvfp4": 1, "mxfp4": 2, "fp8_index": 3, "bf16": 4}
QUANT_BLOCK = {"mxfp8": 32, "nvfp4": 16, "mxfp4": 32, "fp8_index": 32, "bf16": 32}


def tile_geometry(fmt: str, dim: int) -> tuple[int, int, int]:
    """(QB, NG, NGROUPS): channels per group, groups per tile (a power of two), real groups."""
    qb = QUANT_BLOCK[fmt]
    groups = dim // qb
    return qb, int(triton.next_power_of_2(groups)), groups


@triton.jit
def pair_channels(QB: tl.constexpr, NG: tl.constexpr):
    """Even channel index `[1, NG, QB/2]` and group index `[1, NG, 1]` of a row tile."""
    g = tl.arange(0, NG)[None, :, None]
    j = tl.arange(0, QB // 2)[None, None, :]
    return g * QB + 2 * j, g


@triton.jit
def load_pairs(
    x_ptr,
    rows,
    ok,
    D: tl.constexpr,
    QB: tl.constexpr,
    NG: tl.constexpr,
    NGROUPS: tl.constexpr,
    X_BF16: tl.constexpr,
):
    """Even/odd channels of rows `rows` ([BN] int64) of x [N, D] as fp32 `[BN, NG, QB/2]`.

    bf16 inputs come in as int16 bit patterns and are widened with a shift (exact everywhere).
    Masked lanes read 0.
    """
    ce, g = pair_channels(QB, NG)
    m = ok[:, None, None] & (g < NGROUPS)
    off = rows[:, None, None] * D + ce
    if X_BF16:
        xe = (tl.load(x_ptr + off, mask=m, other=0).to(tl.int32) << 16).to(tl.float32, bitcast=True)
        xo = (tl.load(x_ptr + off + 1, mask=m, other=0).to(tl.int32) << 16).to(
            tl.float32, bitcast=True
        )
    else:
        xe = tl.load(x_ptr + off, mask=m, other=0.0).to(tl.float32)
        xo = tl.load(x_ptr + off + 1, mask=m, other=0.0).to(tl.float32)
    return xe, xo


@triton.jit
def _store_bf16_bytes(ptr, v, m):
    bits = f32_to_bf16_bits(v)
    tl.store(ptr, (bits & 255).to(tl.uint8), mask=m)
    tl.store(ptr + 1, (bits >> 8).to(tl.uint8), mask=m)


@triton.jit
def finite_or_saturated(x):
    """NaN -> +0, +-inf -> +-fp32 max, as `naive.finite_or_saturated` (unchecked input)."""
    x = tl.where(x != x, 0.0, x)
    return tl.minimum(tl.maximum(x, -3.4028234663852886e38), 3.4028234663852886e38)


@triton.jit
def mxfp4_codes(xe, xo, amax):
    """MXFP4 codes of finite pair tiles `[BN, NG, QB/2]` with their block maxima `amax` [BN,
    NG]: (bytes, low nibble the even channel's e2m1 code and high nibble the odd one's, and the
    block exponent e, stored as the ue8m0 byte e + 127). `quantize_store`'s MXFP4 branch, and
    the index queries' round trip in registers (`ds41_indexer.ops.queries`)."""
    q = tl.div_rn(tl.maximum(amax, 7.052966104933725e-38), tl.full(amax.shape, 6.0, tl.float32))
    # amax/6 lies in [2^-126, 2^126), so e and -e stay inside pow2_f32's range.
    e = tl.minimum(tl.maximum(ceil_log2_f32(q), -127), 127)
    sc = pow2_f32(-e)[:, :, None]
    # codes saturate at 3 where e = 126 so the record stays finite (naive.E2M1_TOP_*)
    lim = tl.where(e >= 126, 3.0, 6.0)[:, :, None]
    lo = f32_to_e2m1(tl.minimum(tl.maximum(xe * sc, -lim), lim))
    hi = f32_to_e2m1(tl.minimum(tl.maximum(xo * sc, -lim), lim))
    return lo | (hi << 4), e


@triton.jit
def quantize_store(
    xe,
    xo,
    ok,
    data_row,
    scale_row,
    FMT: tl.constexpr,
    QB: tl.constexpr,
    NG: tl.constexpr,
    NGROUPS: tl.constexpr,
):
    """Quantize fp32 pair tiles `[BN, NG, QB/2]` and write one data row + scale row per row.

    `data_row` / `scale_row`: [BN] pointers to the first byte of each row's data / scale row;
    `ok`: [BN] rows to write. Unwritten lanes (masked rows, groups past D) are left untouched.
    Every record decodes to finite values, byte for byte as `naive.py`: NaN is quantized as +0,
    +-inf as +-fp32 max, and blocks at the one exponent where SPEC section 4's codes could
    decode past the bf16 maximum get saturated codes.
    """
    ce, g = pair_channels(QB, NG)
    m = ok[:, None, None] & (g < NGROUPS)
    dptr = data_row[:, None, None]
    xe = finite_or_saturated(xe)
    xo = finite_or_saturated(xo)
    g2 = tl.arange(0, NG)[None, :]
    m2 = ok[:, None] & (g2 < NGROUPS)
    amax = tl.max(tl.maximum(tl.abs(xe), tl.abs(xo)), axis=2)  # [BN, NG]
    if FMT == 0:  # mxfp8
        e = ceil_log2_f32(tl.div_rn(tl.maximum(amax, 1e-4), tl.full(amax.shape, 448.0, tl.float32)))
        sc = pow2_f32(-e)[:, :, None]
        # codes saturate at 240 where e = 120 so the record stays finite (naive.E4M3_TOP_*)
        lim = tl.where(e >= 120, 240.0, 448.0)[:, :, None]
        ce_code = f32_to_e4m3(tl.minimum(tl.maximum(xe * sc, -lim), lim))
        co_code = f32_to_e4m3(tl.minimum(tl.maximum(xo * sc, -lim), lim))
        tl.store(dptr + ce, ce_code.to(tl.uint8), mask=m)
        tl.store(dptr + ce + 1, co_code.to(tl.uint8), mask=m)
        tl.store(scale_row[:, None] + g2, (e + 127).to(tl.uint8), mask=m2)
    elif FMT == 1:  # nvfp4
        s = tl.div_rn(amax, tl.full(amax.shape, 6.0, tl.float32))
        s_code = f32_to_e4m3(tl.minimum(tl.maximum(s, 0.001953125), 448.0))
        sf = e4m3_to_f32(s_code)[:, :, None]
        lo = f32_to_e2m1(tl.div_rn(xe, sf))
        hi = f32_to_e2m1(tl.div_rn(xo, sf))
        tl.store(dptr + (ce >> 1), (lo | (hi << 4)).to(tl.uint8), mask=m)
        tl.store(scale_row[:, None] + g2, s_code.to(tl.uint8), mask=m2)
    elif FMT == 2:  # mxfp4
        codes, e = mxfp4_codes(xe, xo, amax)
        tl.store(dptr + (ce >> 1), codes.to(tl.uint8), mask=m)
        tl.store(scale_row[:, None] + g2, (e + 127).to(tl.uint8), mask=m2)
    elif FMT == 3:  # fp8_index: one fp32 power-of-two scale per row
        ramax = tl.maximum(tl.max(amax, axis=1), 1e-4)  # [BN]
        e = ceil_log2_f32(tl.div_rn(ramax, tl.full(ramax.shape, 448.0, tl.float32)))
        sc = pow2_f32(-e)[:, None, None]
        lim = tl.where(e >= 120, 240.0, 448.0)[:, None, None]
        ce_code = f32_to_e4m3(tl.minimum(tl.maximum(xe * sc, -lim), lim))
        co_code = f32_to_e4m3(tl.minimum(tl.maximum(xo * sc, -lim), lim))
        tl.store(dptr + ce, ce_code.to(tl.uint8), mask=m)
        tl.store(dptr + ce + 1, co_code.to(tl.uint8), mask=m)
        k = tl.arange(0, 4)[None, :]
        sbits = ((e + 127) << 23)[:, None]  # fp32 bits of 2^e, little-endian bytes
        tl.store(
            scale_row[:, None] + k,
            ((sbits >> (8 * k)) & 255).to(tl.uint8),
            mask=ok[:, None] & (k < 4),
        )
    else:  # bf16: two bytes per channel, little-endian; fp32 past the bf16 range saturates
        bmax = 3.3895313892515355e38
        _store_bf16_bytes(dptr + 2 * ce, tl.minimum(tl.maximum(xe, -bmax), bmax), m)
        _store_bf16_bytes(dptr + 2 * ce + 2, tl.minimum(tl.maximum(xo, -bmax), bmax), m)


@triton.jit
def _signed_e4m3(b):
    """e4m3 byte -> fp32 with the sign applied as a bit, so code 0x80 decodes to -0.0."""
    b = b.to(tl.int32)
    mag = e4m3_to_f32(b & 0x7F).to(tl.int32, bitcast=True)
    return (mag | ((b & 0x80) << 24)).to(tl.float32, bitcast=True)


@triton.jit
def _signed_e2m1(n):
    """e2m1 nibble -> fp32 with the sign applied as a bit (nibble 8 decodes to -0.0)."""
    n = n.to(tl.int32)
    mag = e2m1_to_f32(n & 7).to(tl.int32, bitcast=True)
    return (mag | ((n & 8) << 28)).to(tl.float32, bitcast=True)


@triton.jit
def load_decode(
    data_row,
    scale_row,
    ok,
    FMT: tl.constexpr,
    QB: tl.constexpr,
    NG: tl.constexpr,
    NGROUPS: tl.constexpr,
):
    """Read one record per row and decode it: fp32 even/odd tiles `[BN, NG, QB/2]` (exact)."""
    ce, g = pair_channels(QB, NG)
    m = ok[:, None, None] & (g < NGROUPS)
    dptr = data_row[:, None, None]
    if FMT == 4:
        b0 = tl.load(dptr + 2 * ce, mask=m, other=0).to(tl.int32)
        b1 = tl.load(dptr + 2 * ce + 1, mask=m, other=0).to(tl.int32)
        b2 = tl.load(dptr + 2 * ce + 2, mask=m, other=0).to(tl.int32)
        b3 = tl.load(dptr + 2 * ce + 3, mask=m, other=0).to(tl.int32)
        ve = ((b0 | (b1 << 8)) << 16).to(tl.float32, bitcast=True)
        vo = ((b2 | (b3 << 8)) << 16).to(tl.float32, bitcast=True)
    elif FMT == 3:
        k = tl.arange(0, 4)[None, :]
        sb = tl.load(scale_row[:, None] + k, mask=ok[:, None] & (k < 4), other=0).to(tl.int32)
        sf = tl.sum(sb << (8 * k), axis=1).to(tl.float32, bitcast=True)[:, None, None]
        ve = _signed_e4m3(tl.load(dptr + ce, mask=m, other=0)) * sf
        vo = _signed_e4m3(tl.load(dptr + ce + 1, mask=m, other=0)) * sf
    else:
        sb = tl.load(scale_row[:, None, None] + g, mask=m, other=127)
        if FMT == 1:
            sf = _signed_e4m3(sb)
        else:
            sf = ue8m0_to_f32(sb)
        if FMT == 0:
            ve = _signed_e4m3(tl.load(dptr + ce, mask=m, other=0)) * sf
            vo = _signed_e4m3(tl.load(dptr + ce + 1, mask=m, other=0)) * sf
        else:
            byte = tl.load(dptr + (ce >> 1), mask=m, other=0).to(tl.int32)
            ve = _signed_e2m1(byte & 15) * sf
            vo = _signed_e2m1(byte >> 4) * sf
    return ve, vo


@triton.jit
def store_bf16_pairs(
    out_ptr,
    rows,
    row_ok,
    valid,
    ve,
    vo,
    D: tl.constexpr,
    QB: tl.constexpr,
    NG: tl.constexpr,
    NGROUPS: tl.constexpr,
):
    """Write even/odd fp32 tiles as bf16 (RNE) into out [N, D] (an int16 view); rows that are
    in range but not `valid` get zeros."""
    ce, g = pair_channels(QB, NG)
    m = row_ok[:, None, None] & (g < NGROUPS)
    v = valid[:, None, None]
    off = rows[:, None, None] * D + ce
    tl.store(out_ptr + off, tl.where(v, f32_to_bf16_bits(ve), 0).to(tl.int16), mask=m)
    tl.store(out_ptr + off + 1, tl.where(v, f32_to_bf16_bits(vo), 0).to(tl.int16), mask=m)


@triton.jit
def encode_kernel(
    x_ptr,
    data_ptr,
    scale_ptr,
    N,
    D: tl.constexpr,
    DATA_BYTES: tl.constexpr,
    SCALE_BYTES: tl.constexpr,
    FMT: tl.constexpr,
    QB: tl.constexpr,
    NG: tl.constexpr,
    NGROUPS: tl.constexpr,
    BN: tl.constexpr,
    X_BF16: tl.constexpr,
):
    rows = tl.program_id(0).to(tl.int64) * BN + tl.arange(0, BN)
    ok = rows < N
    xe, xo = load_pairs(x_ptr, rows, ok, D, QB, NG, NGROUPS, X_BF16)
    quantize_store(
        xe,
        xo,
        ok,
        data_ptr + rows * DATA_BYTES,
        scale_ptr + rows * SCALE_BYTES,
        FMT,
        QB,
        NG,
        NGROUPS,
    )


@triton.jit
def decode_kernel(
    data_ptr,
    scale_ptr,
    out_ptr,
    N,
    D: tl.constexpr,
    DATA_BYTES: tl.constexpr,
    SCALE_BYTES: tl.constexpr,
    FMT: tl.constexpr,
    QB: tl.constexpr,
    NG: tl.constexpr,
    NGROUPS: tl.constexpr,
    BN: tl.constexpr,
):
    rows = tl.program_id(0).to(tl.int64) * BN + tl.arange(0, BN)
    ok = rows < N
    ve, vo = load_decode(
        data_ptr + rows * DATA_BYTES, scale_ptr + rows * SCALE_BYTES, ok, FMT, QB, NG, NGROUPS
    )
    store_bf16_pairs(out_ptr, rows, ok, ok, ve, vo, D, QB, NG, NGROUPS)


def rows_per_program(dim: int) -> int:
    """Rows per program: about 2K channels per tile."""
    return max(1, min(16, 2048 // int(triton.next_power_of_2(dim))))


def launch_encode(fmt: str, x: torch.Tensor, data: torch.Tensor, scales: torch.Tensor) -> None:
    """x: [N, D] fp32|bf16 -> fills data [N, data_bytes], scales [N, scale_bytes] (uint8)."""
    n, d = x.shape
    qb, ng, groups = tile_geometry(fmt, d)
    bn = rows_per_program(d)
    x_bf16 = x.dtype == torch.bfloat16
    encode_kernel[(triton.cdiv(n, bn),)](
        x.view(torch.int16) if x_bf16 else x,
        data,
        scales if scales.numel() else data,
        n,
        D=d,
        DATA_BYTES=data.shape[1],
        SCALE_BYTES=scales.shape[1],
        FMT=FMT_IDS[fmt],
        QB=qb,
        NG=ng,
        NGROUPS=groups,
        BN=bn,
        X_BF16=x_bf16,
    )


def launch_decode(fmt: str, data: torch.Tensor, scales: torch.Tensor, out: torch.Tensor) -> None:
    """(data, scales) uint8 -> fills out bf16 [N, D]."""
    n, d = out.shape
    qb, ng, groups = tile_geometry(fmt, d)
    bn = rows_per_program(d)
    decode_kernel[(triton.cdiv(n, bn),)](
        data,
        scales if scales.numel() else data,
        out.view(torch.int16),
        n,
        D=d,
        DATA_BYTES=data.shape[1],
        SCALE_BYTES=scales.shape[1],
        FMT=FMT_IDS[fmt],
        QB=qb,
        NG=ng,
        NGROUPS=groups,
        BN=bn,
    )
