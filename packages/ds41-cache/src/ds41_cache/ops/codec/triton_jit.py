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
    return tl.where((b & 0x80) != 0, -mag, mag)


@triton.jit
def e2m1_to_f32(n):
    """An e2m1 nibble (low 4 bits of an int tensor) -> fp32 on the grid {0,.5,1,1.5,2,3,4,6}."""
    n = n.to(tl.int32) & 15
    e = (n >> 1) & 3
    m = n & 1
    # e == 0: subnormal 0 or 0.5; else (1 + m/2) * 2**(e-1)
    normal = (((e + 126) << 23) | (m << 22)).to(tl.float32, bitcast=True)
    mag = tl.where(e == 0, m.to(tl.float32) * 0.5, normal)
    return tl.where((n & 8) != 0, -mag, mag)
