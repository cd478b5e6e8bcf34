# mypy: allow-untyped-defs, allow-incomplete-defs
"""Device-side decode helpers shared by every kernel that reads a ds41 cache format.

Written with integer bit operations only, so they are exact both on the GPU and under the
Triton CPU interpreter (where fp8 casts are unreliable). Each returns fp32; every value they
produce is exactly representable in bf16 (SPEC section 4).
"""

import triton
import triton.language as tl


@triton.jit
def pow2_f32(e):
    """2**e as fp32 for an int32 tensor `e` in [-126, 127], built from its exponent bits."""
    return ((e + 127) << 23).to(tl.float32, bitcast=True)


@triton.jit
def ue8m0_to_f32(b):
    """A ue8m0 scale byte (uint8/int32, 1..254) -> 2**(b - 127)."""
    b = b.to(tl.int32)
    # byte 0 (2**-127) is subnormal: build it from its mantissa bit instead.
    return tl.where(b == 0, 5.877471754111438e-39, (b << 23).to(tl.float32, bitcast=True))


@triton.jit
def e4m3_to_f32(b):
    """An e4m3fn byte -> fp32 (0x7F/0xFF, the NaN codes, decode as +-480; encoders never emit them)."""
    b = b.to(tl.int32)
    e = (b >> 3) & 15
    m = b & 7
    normal = (((e + 120) << 23) | (m << 20)).to(tl.float32, bitcast=True)
    sub = m.to(tl.float32) * 0.001953125  # m * 2**-9
    mag = tl.where(e == 0, sub, normal)
    # The sign goes in as a bit so that -0 (code 0x80) decodes to -0.0 on every backend.
    return (mag.to(tl.int32, bitcast=True) | ((b & 0x80) << 24)).to(tl.float32, bitcast=True)


@triton.jit
def e2m1_to_f32(n):
    """An e2m1 nibble (low 4 bits of an int tensor) -> fp32 on the grid {0,.5,1,1.5,2,3,4,6}."""
    n = n.to(tl.int32) & 15
    e = (n >> 1) & 3
    m = n & 1
    # e == 0: subnormal 0 or 0.5; else (1 + m/2) * 2**(e-1)
    normal = (((e + 126) << 23) | (m << 22)).to(tl.float32, bitcast=True)
    mag = tl.where(e == 0, m.to(tl.float32) * 0.5, normal)
    return (mag.to(tl.int32, bitcast=True) | ((n & 8) << 28)).to(tl.float32, bitcast=True)


# ---- quantize side: fp32 -> format codes, integer rounding (exact on GPU and interpreter) ----


@triton.jit
def rne_shift(v, shift):
    """`v >> shift` rounded to nearest, ties to even (int32 v >= 0, v < 2**30, 1 <= shift <= 30)."""
    return (v + (1 << (shift - 1)) - 1 + ((v >> shift) & 1)) >> shift


@triton.jit
def f32_to_e4m3(x):
    """fp32 with |x| <= 448 -> e4m3fn code (int32 0..255), RNE, sign bit kept."""
    b = x.to(tl.int32, bitcast=True)
    mag = b & 0x7FFFFFFF
    fexp = mag >> 23
    sig = (mag & 0x7FFFFF) | tl.where(fexp > 0, 0x800000, 0)
    normal = rne_shift(mag, 20) - (120 << 3)
    # below 2^-6 the codes count multiples of 2^-9: sig >> (141 - fexp), rounded
    sub = rne_shift(sig, tl.minimum(tl.maximum(141 - fexp, 1), 26))
    code = tl.where(fexp >= 121, normal, sub)
    return code | tl.where(b < 0, 0x80, 0)


@triton.jit
def f32_to_e2m1(x):
    """fp32 -> e2m1 nibble (int32 0..15): RNE, saturating at 6, sign bit kept (also for -0)."""
    b = x.to(tl.int32, bitcast=True)
    mag = b & 0x7FFFFFFF
    fexp = mag >> 23
    sig = (mag & 0x7FFFFF) | tl.where(fexp > 0, 0x800000, 0)
    normal = tl.minimum(rne_shift(mag, 22) - (126 << 1), 7)
    # below 1 the codes count multiples of 0.5: sig >> (149 - fexp), rounded
    sub = rne_shift(sig, tl.minimum(tl.maximum(149 - fexp, 1), 26))
    code = tl.where(fexp >= 127, normal, sub)
    return code | tl.where(b < 0, 8, 0)


@triton.jit
def ceil_log2_f32(q):
    """ceil(log2(q)) (int32) of a positive normal fp32 `q`, exact (read from its bits)."""
    b = q.to(tl.int32, bitcast=True)
    return (b >> 23) - 127 + tl.where((b & 0x7FFFFF) != 0, 1, 0)


@triton.jit
def f32_to_bf16_bits(x):
    """fp32 -> bf16 bit pattern (int32 0..65535), round to nearest even (finite x)."""
    b = x.to(tl.int32, bitcast=True)
    return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) & 0xFFFF


@triton.jit
def bf16_round_f32(x):
    """fp32 rounded to the nearest bf16 value (RNE), returned as fp32."""
    return (f32_to_bf16_bits(x) << 16).to(tl.float32, bitcast=True)


@triton.jit
def bf16_bits_to_f32(bits):
    """A bf16 bit pattern (the low 16 bits of an int tensor) -> its exact fp32 value."""
    return ((bits.to(tl.int32) & 0xFFFF) << 16).to(tl.float32, bitcast=True)


@triton.jit
def f32_to_bf16_store_bits(y):
    """fp32 -> int16 bf16 bits as torch's fp32 -> bf16 cast gives them: RNE, and a NaN becomes
    0x7FC0, torch's quiet NaN (the integer rounding alone would turn some NaN patterns into
    inf)."""
    bits = tl.where(y != y, 0x7FC0, f32_to_bf16_bits(y))
    return bits.to(tl.int16)
