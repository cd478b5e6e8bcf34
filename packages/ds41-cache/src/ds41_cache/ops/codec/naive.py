"""Torch reference encoder/decoder for every cache format (SPEC section 4).

Rounding is done on fp32 bit patterns with integer operations so that every step is visible and
exact: e4m3fn and e2m1 round-to-nearest-even, ceil(log2) of a positive fp32, RNE to bf16. The
Triton kernels in `triton_kernels.py` follow the same recipe and must produce identical bytes.
"""

from __future__ import annotations

import torch

from ...formats import E2M1_MAX, E4M3_MAX, MXFP4_BLOCK, MXFP8_BLOCK, NVFP4_BLOCK, row_layout

MXFP8_AMAX_FLOOR = 1e-4
"""MXFP8 and fp8 index keys: `amax = max(amax, 1e-4)` (as fp32) before choosing the exponent."""
NVFP4_SCALE_MIN = 2.0**-9
"""NVFP4: the block scale `amax / 6` is clamped to [2^-9, 448] before rounding to e4m3."""
MXFP4_AMAX_FLOOR = 6.0 * 2.0**-126
"""MXFP4: `amax = max(amax, 6 * 2^-126)`, so `amax / 6` is a normal fp32 number."""
UE8M0_BIAS = 127

# ---- the top of the range (SPEC section 4, "Range") ----
# SPEC's exponent rules put the largest finite inputs in blocks whose largest code decodes past
# the bf16 maximum (2 - 2^-7) * 2^127: `encode(check_finite=True)` rejects those inputs (the
# SPEC rule); unchecked encoders (`check_finite=False`, `insert(validate=False)`, every kernel)
# saturate the codes of such blocks instead, so no encoder ever writes a record that decodes to
# inf. Codes of every other block are the SPEC rule's, unchanged.
F32_MAX = 3.4028234663852886e38
"""Largest finite fp32 value: what +inf encodes as in the unchecked encoders."""
BF16_MAX = 3.3895313892515355e38
"""Largest finite bf16 value, (2 - 2^-7) * 2^127 (exact in fp32)."""
E4M3_TOP_EXP = 120
"""MXFP8 / fp8 index: the largest exponent a finite input gives (amax / 448 < 2^120)."""
E4M3_TOP_CODE_MAX = 240.0
"""Codes at exponent 120 saturate at 240 (240 * 2^120 = 1.875 * 2^127; 256 * 2^120 = inf)."""
E2M1_TOP_EXP = 126
"""MXFP4: the largest exponent a finite input gives (amax / 6 < 2^126)."""
E2M1_TOP_CODE_MAX = 3.0
"""Codes at exponent 126 saturate at 3 (3 * 2^126 = 1.5 * 2^127; 4 * 2^126 = inf)."""
OVERFLOW_FROM: dict[str, float | None] = {
    "mxfp8": 248.0 * 2.0**120,  # x * 2^-120 >= 248 rounds (ties to even) to code 256
    "fp8_index": 248.0 * 2.0**120,
    "mxfp4": 3.5 * 2.0**126,  # x * 2^-126 >= 3.5 rounds (ties to even) to code 4
    "bf16": (2.0 - 2.0**-8) * 2.0**127,  # fp32 inputs from here round to inf in bf16
    "nvfp4": None,  # the scale is clamped to 448: every record is finite
}
"""Per format, the smallest |x| whose record would decode to inf under SPEC section 4's rule
(elementwise: an element at or above it makes its block overflow, and nothing below does)."""

_F32_MANT_BITS = 23
_F32_MANT_MASK = (1 << _F32_MANT_BITS) - 1
_F32_BIAS = 127


def _bits(x: torch.Tensor) -> torch.Tensor:
    """fp32 -> its int32 bit pattern (int64 so shifts and sums never overflow)."""
    return x.to(torch.float32).contiguous().view(torch.int32).to(torch.int64)


def _from_bits(b: torch.Tensor) -> torch.Tensor:
    return b.to(torch.int32).view(torch.float32)


def rne_shift(v: torch.Tensor, shift: torch.Tensor | int) -> torch.Tensor:
    """`v >> shift` rounded to nearest, ties to even (v >= 0 int64, 1 <= shift <= 40)."""
    half = torch.ones_like(v) << (shift - 1)
    return (v + half - 1 + ((v >> shift) & 1)) >> shift


def _significand(mag_bits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(biased exponent, 24-bit significand with the implicit bit) of |x| bits."""
    fexp = mag_bits >> _F32_MANT_BITS
    sig = (mag_bits & _F32_MANT_MASK) | torch.where(fexp > 0, 1 << _F32_MANT_BITS, 0)
    return fexp, sig


def f32_to_e4m3(x: torch.Tensor) -> torch.Tensor:
    """fp32 with |x| <= 448 -> e4m3fn byte (uint8), round to nearest even; sign bit kept.

    Normal e4m3 values (|x| >= 2^-6) keep 3 mantissa bits of the fp32 pattern and rebias the
    exponent (7 instead of 127); smaller values are multiples of 2^-9 and round as integers.
    A carry out of the subnormal range lands on code 8 (= 2^-6), which is what the encoding needs.
    """
    b = _bits(x)
    mag = b & 0x7FFFFFFF
    fexp, sig = _significand(mag)
    normal = rne_shift(mag, _F32_MANT_BITS - 3) - ((_F32_BIAS - 7) << 3)
    # value = sig * 2^(fexp - 150); in units of 2^-9 that is sig >> (141 - fexp)
    sub = rne_shift(sig, torch.clamp(141 - fexp, 1, 40))
    code = torch.where(fexp >= _F32_BIAS - 6, normal, sub)
    sign = torch.where(((b >> 31) & 1) == 1, 0x80, 0)
    return (code | sign).to(torch.uint8)


def f32_to_e2m1(x: torch.Tensor) -> torch.Tensor:
    """fp32 -> e2m1 nibble (uint8 0..15): RNE on {0,.5,1,1.5,2,3,4,6}, saturating at 6.

    Bit 3 is the sign and is kept for negative values that round to zero (hardware behaviour).
    """
    b = _bits(x)
    mag = b & 0x7FFFFFFF
    fexp, sig = _significand(mag)
    normal = torch.clamp(rne_shift(mag, _F32_MANT_BITS - 1) - ((_F32_BIAS - 1) << 1), max=7)
    # |x| < 1: value in units of 0.5 is sig >> (149 - fexp)
    sub = rne_shift(sig, torch.clamp(149 - fexp, 1, 40))
    code = torch.where(fexp >= _F32_BIAS, normal, sub)
    sign = torch.where(((b >> 31) & 1) == 1, 8, 0)
    return (code | sign).to(torch.uint8)


def e4m3_to_f32(byte: torch.Tensor) -> torch.Tensor:
    """e4m3fn byte -> fp32 (the NaN codes 0x7F/0xFF decode as +-480, like the Triton helper)."""
    b = byte.to(torch.int64)
    e = (b >> 3) & 15
    m = b & 7
    normal = _from_bits(((e + 120) << 23) | (m << 20))
    sub = m.to(torch.float32) * 2.0**-9
    mag = torch.where(e == 0, sub, normal)
    return torch.where((b & 0x80) != 0, -mag, mag)


def e2m1_to_f32(nibble: torch.Tensor) -> torch.Tensor:
    """e2m1 nibble (low 4 bits) -> fp32."""
    n = nibble.to(torch.int64) & 15
    e = (n >> 1) & 3
    m = n & 1
    normal = _from_bits(((e + 126) << 23) | (m << 22))
    mag = torch.where(e == 0, m.to(torch.float32) * 0.5, normal)
    return torch.where((n & 8) != 0, -mag, mag)


def ceil_log2(q: torch.Tensor) -> torch.Tensor:
    """ceil(log2(q)) as int64 for positive normal fp32 `q`, exact (read from the bits)."""
    b = _bits(q)
    return (b >> _F32_MANT_BITS) - _F32_BIAS + ((b & _F32_MANT_MASK) != 0).to(torch.int64)


def pow2(e: torch.Tensor) -> torch.Tensor:
    """2**e as fp32 for int64 `e` in [-149, 127] (exact, subnormals included)."""
    normal = _from_bits((e.clamp(-126, 127) + _F32_BIAS) << _F32_MANT_BITS)
    sub = _from_bits(torch.ones_like(e) << (e.clamp(-149, -127) + 149))
    return torch.where(e >= -126, normal, sub)


def ue8m0_to_f32(byte: torch.Tensor) -> torch.Tensor:
    return pow2(byte.to(torch.int64) - UE8M0_BIAS)


def f32_to_bf16_bits(x: torch.Tensor) -> torch.Tensor:
    """fp32 -> bf16 bit pattern (int64 0..65535), round to nearest even (finite input)."""
    b = _bits(x) & 0xFFFFFFFF
    return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) & 0xFFFF


def _code_limit(e: torch.Tensor, top_exp: int, top_max: float, fmt_max: float) -> torch.Tensor:
    """Largest code magnitude allowed at exponent `e`: `fmt_max`, or `top_max` at `top_exp`
    and above (where `fmt_max * 2^e` would exceed the bf16 range)."""
    return torch.where(e >= top_exp, top_max, fmt_max).to(torch.float32)


def _blocks(x: torch.Tensor, block: int) -> torch.Tensor:
    n, d = x.shape
    return x.to(torch.float32).reshape(n, d // block, block)


def _pack_nibbles(codes: torch.Tensor) -> torch.Tensor:
    """[N, D] nibbles -> [N, D/2] bytes, element 2i in the low nibble of byte i."""
    pairs = codes.to(torch.int64).reshape(*codes.shape[:-1], codes.shape[-1] // 2, 2)
    return (pairs[..., 0] | (pairs[..., 1] << 4)).to(torch.uint8)


def _unpack_nibbles(data: torch.Tensor) -> torch.Tensor:
    b = data.to(torch.int64)
    return torch.stack((b & 15, b >> 4), dim=-1).flatten(-2)


def encode_mxfp8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    xb = _blocks(x, MXFP8_BLOCK)
    amax = xb.abs().amax(dim=-1, keepdim=True).clamp_min(MXFP8_AMAX_FLOOR)
    e = ceil_log2(amax / E4M3_MAX)
    lim = _code_limit(e, E4M3_TOP_EXP, E4M3_TOP_CODE_MAX, E4M3_MAX)
    scaled = torch.minimum(torch.maximum(xb * pow2(-e), -lim), lim)
    data = f32_to_e4m3(scaled).flatten(1)
    scales = torch.clamp(e + UE8M0_BIAS, 0, 255).to(torch.uint8).flatten(1)
    return data, scales


def encode_nvfp4(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    xb = _blocks(x, NVFP4_BLOCK)
    amax = xb.abs().amax(dim=-1, keepdim=True)
    s_byte = f32_to_e4m3(torch.clamp(amax / E2M1_MAX, NVFP4_SCALE_MIN, E4M3_MAX))
    s = e4m3_to_f32(s_byte)
    codes = f32_to_e2m1(xb / s).flatten(1)
    return _pack_nibbles(codes), s_byte.flatten(1)


def encode_mxfp4(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    xb = _blocks(x, MXFP4_BLOCK)
    amax = xb.abs().amax(dim=-1, keepdim=True).clamp_min(MXFP4_AMAX_FLOOR)
    e = torch.clamp(ceil_log2(amax / E2M1_MAX), -127, 127)
    lim = _code_limit(e, E2M1_TOP_EXP, E2M1_TOP_CODE_MAX, E2M1_MAX)
    codes = f32_to_e2m1(torch.minimum(torch.maximum(xb * pow2(-e), -lim), lim)).flatten(1)
    return _pack_nibbles(codes), (e + UE8M0_BIAS).to(torch.uint8).flatten(1)


def encode_fp8_index(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    xf = x.to(torch.float32)
    amax = xf.abs().amax(dim=-1, keepdim=True).clamp_min(MXFP8_AMAX_FLOOR)
    e = ceil_log2(amax / E4M3_MAX)
    # x / 2^e is exact, so it is computed as a product with 2^-e.
    lim = _code_limit(e, E4M3_TOP_EXP, E4M3_TOP_CODE_MAX, E4M3_MAX)
    data = f32_to_e4m3(torch.minimum(torch.maximum(xf * pow2(-e), -lim), lim))
    scales = pow2(e).contiguous().view(torch.uint8)  # fp32 little-endian, 4 bytes
    return data, scales


def encode_bf16(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    # fp32 inputs past the bf16 range saturate at its maximum instead of rounding to inf
    bits = f32_to_bf16_bits(torch.clamp(x.to(torch.float32), -BF16_MAX, BF16_MAX))
    data = torch.stack((bits & 0xFF, bits >> 8), dim=-1).flatten(1).to(torch.uint8)
    return data, torch.zeros((x.shape[0], 0), dtype=torch.uint8, device=x.device)


_ENCODERS = {
    "mxfp8": encode_mxfp8,
    "nvfp4": encode_nvfp4,
    "mxfp4": encode_mxfp4,
    "fp8_index": encode_fp8_index,
    "bf16": encode_bf16,
}


def finite_or_saturated(x: torch.Tensor) -> torch.Tensor:
    """fp32 copy of `x` with NaN -> +0 and +-inf -> +-fp32 max.

    What the unchecked encoders quantize (the checked ones reject such input first): every
    record then decodes to finite values, the same bytes on every backend.
    """
    xf = x.to(torch.float32)
    return torch.clamp(torch.where(torch.isnan(xf), 0.0, xf), -F32_MAX, F32_MAX)


def encode(fmt: str, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x: [N, D] fp32|bf16 -> (data uint8 [N, data_bytes], scales uint8 [N, scale_bytes]).

    NaN encodes as +0 and +-inf as +-fp32 max (`finite_or_saturated`), which then saturates
    like any value at the top of the range.
    """
    return _ENCODERS[fmt](finite_or_saturated(x))


def decode_f32(fmt: str, data: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """(data, scales) of `fmt` -> fp32 [N, D] (exact values)."""
    n = data.shape[0]
    if fmt == "bf16":
        b = data.to(torch.int64).reshape(n, data.shape[1] // 2, 2)
        return _from_bits((b[..., 0] | (b[..., 1] << 8)) << 16)
    if fmt == "fp8_index":
        scale = scales.contiguous().view(torch.float32)  # [N, 1]
        return e4m3_to_f32(data) * scale
    if fmt == "mxfp8":
        vals, block, scale = e4m3_to_f32(data), MXFP8_BLOCK, ue8m0_to_f32(scales)
    elif fmt == "nvfp4":
        vals, block, scale = e2m1_to_f32(_unpack_nibbles(data)), NVFP4_BLOCK, e4m3_to_f32(scales)
    else:
        vals, block, scale = e2m1_to_f32(_unpack_nibbles(data)), MXFP4_BLOCK, ue8m0_to_f32(scales)
    return (vals.reshape(n, vals.shape[1] // block, block) * scale.unsqueeze(-1)).flatten(1)


def decode(fmt: str, data: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """(data, scales) of `fmt` -> bf16 [N, D]; fp32 product rounded to bf16 (RNE)."""
    return decode_f32(fmt, data, scales).to(torch.bfloat16)


def dim_of(fmt: str, data_bytes: int) -> int:
    """Latent width D of a data row of `data_bytes` bytes in `fmt`."""
    per_byte = {"mxfp8": 1.0, "fp8_index": 1.0, "nvfp4": 2.0, "mxfp4": 2.0, "bf16": 0.5}[fmt]
    d = int(data_bytes * per_byte)
    if row_layout(fmt, d).data_bytes != data_bytes:
        raise ValueError(f"a {fmt} data row cannot be {data_bytes} bytes wide")
    return d
