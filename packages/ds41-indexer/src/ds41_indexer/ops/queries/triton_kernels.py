# mypy: allow-untyped-defs, allow-incomplete-defs
"""The index queries in one launch: bf16 cast, RoPE and the MXFP4 round trip
(`queries.prepare_index_queries`), which the separate path runs as a copy, `rope_inplace`,
`encode` and `decode` (four launches); with them, in the same launch, the head weights
(`queries.index_queries_and_weights`; torch's product by the scale otherwise).

Each step is the separate kernels' operations in their order, rounded at the same points:
the bf16 cast of the projection (torch's RNE, NaN -> 0x7FC0), `rope_inplace_kernel`'s fp32
products and sums on the bf16 pairs rounded back to bf16 (launched with
`enable_fp_fusion=False` like it, so no product folds into an FMA), then `quantize_store`'s
MXFP4 codes and scale byte (integer rounding; its products are by powers of two) decoded as
`load_decode` reads them back, and the bf16 store of `decode_kernel`. The values never leave
the registers in between, so the bits are those of the four launches (tested bitwise on the
interpreter and on the GPU).
"""

import torch
import triton
import triton.language as tl

from ds41_cache.ops.codec.triton_jit import (
    bf16_bits_to_f32,
    f32_to_bf16_bits,
    f32_to_bf16_store_bits,
    ue8m0_to_f32,
)
from ds41_cache.ops.codec.triton_kernels import (
    _signed_e2m1,
    finite_or_saturated,
    mxfp4_codes,
    pair_channels,
    rows_per_program,
    tile_geometry,
)
from ds41_cache.ops.launch import dependent_launch, enter_dependent
from ds41_cache.outputs import empty


@triton.jit
def _mxfp4_round_trip(xe, xo, QB: tl.constexpr):
    # quantize_store (FMT 2) then load_decode (FMT 2) of one record, in registers: the codes
    # and the scale byte as they would be stored, decoded as they would be read.
    xe = finite_or_saturated(xe)
    xo = finite_or_saturated(xo)
    amax = tl.max(tl.maximum(tl.abs(xe), tl.abs(xo)), axis=2)  # [BN, NG]
    codes, e = mxfp4_codes(xe, xo, amax)
    byte = codes.to(tl.uint8).to(tl.int32)
    sf = ue8m0_to_f32((e + 127).to(tl.uint8))[:, :, None]
    return _signed_e2m1(byte & 15) * sf, _signed_e2m1(byte >> 4) * sf


@triton.jit
def _queries(
    pid, x_ptr, cos_ptr, sin_ptr, out_ptr, rot_ptr, N, stride_t,
    HEADS: tl.constexpr, D: tl.constexpr, HALF_R: tl.constexpr,
    QB: tl.constexpr, NG: tl.constexpr, NGROUPS: tl.constexpr, BN: tl.constexpr,
    X_BF16: tl.constexpr, ROT: tl.constexpr,
):  # fmt: skip
    # BN (row, head) records of D channels (record r = row r // HEADS, head r % HEADS), as
    # even/odd channel tiles [BN, NG, QB/2] (the codec's layout: a RoPE pair is an (even,
    # odd) pair of a tile).
    rec = pid.to(tl.int64) * BN + tl.arange(0, BN)
    ok = rec < N
    t = rec // HEADS
    head = rec % HEADS
    ce, g = pair_channels(QB, NG)
    m = ok[:, None, None] & (g < NGROUPS)
    off = t[:, None, None] * stride_t + head[:, None, None] * D + ce
    if X_BF16:
        xe = bf16_bits_to_f32(tl.load(x_ptr + off, mask=m, other=0))
        xo = bf16_bits_to_f32(tl.load(x_ptr + off + 1, mask=m, other=0))
    else:  # torch's fp32 -> bf16 cast
        xe = bf16_bits_to_f32(f32_to_bf16_store_bits(tl.load(x_ptr + off, mask=m, other=0.0)))
        xo = bf16_bits_to_f32(f32_to_bf16_store_bits(tl.load(x_ptr + off + 1, mask=m, other=0.0)))
    # RoPE on the last 2 * HALF_R channels: pair k = channels (D - 2 HALF_R + 2k, + 1).
    k = (ce - (D - 2 * HALF_R)) // 2
    in_rope = k >= 0
    km = m & in_rope
    kk = tl.where(in_rope, k, 0)
    c = tl.load(cos_ptr + t[:, None, None] * HALF_R + kk, mask=km, other=1.0)
    s = tl.load(sin_ptr + t[:, None, None] * HALF_R + kk, mask=km, other=0.0)
    y0 = bf16_bits_to_f32(f32_to_bf16_store_bits(xe * c - xo * s))
    y1 = bf16_bits_to_f32(f32_to_bf16_store_bits(xe * s + xo * c))
    xe = tl.where(in_rope, y0, xe)
    xo = tl.where(in_rope, y1, xo)
    out = rec[:, None, None] * D + ce
    if ROT:  # the rotated bf16 queries, for the caller's finiteness checks
        tl.store(rot_ptr + out, f32_to_bf16_bits(xe).to(tl.int16), mask=m)
        tl.store(rot_ptr + out + 1, f32_to_bf16_bits(xo).to(tl.int16), mask=m)
    ve, vo = _mxfp4_round_trip(xe, xo, QB)
    tl.store(out_ptr + out, f32_to_bf16_bits(ve).to(tl.int16), mask=m)
    tl.store(out_ptr + out + 1, f32_to_bf16_bits(vo).to(tl.int16), mask=m)


@triton.jit
def index_queries_kernel(
    x_ptr, cos_ptr, sin_ptr, out_ptr, rot_ptr, N, stride_t, w_ptr, wout_ptr, NW, w_scale,
    Q_PROGRAMS,
    HEADS: tl.constexpr, D: tl.constexpr, HALF_R: tl.constexpr,
    QB: tl.constexpr, NG: tl.constexpr, NGROUPS: tl.constexpr, BN: tl.constexpr,
    X_BF16: tl.constexpr, ROT: tl.constexpr, W_BLOCK: tl.constexpr, W_BF16: tl.constexpr,
    GDC: tl.constexpr = False,
):  # fmt: skip
    enter_dependent(GDC)
    # Programs [0, Q_PROGRAMS): the queries; the others (when launched): the head weights
    # `float32(w) * float32(scale)` (`queries.head_weights`: torch's product by a Python
    # scalar, one fp32 rounding), W_BLOCK elements each.
    pid = tl.program_id(0)
    if pid < Q_PROGRAMS:
        _queries(
            pid, x_ptr, cos_ptr, sin_ptr, out_ptr, rot_ptr, N, stride_t, HEADS, D, HALF_R,
            QB, NG, NGROUPS, BN, X_BF16, ROT,
        )  # fmt: skip
    else:
        i = (pid - Q_PROGRAMS).to(tl.int64) * W_BLOCK + tl.arange(0, W_BLOCK)
        wm = i < NW
        if W_BF16:
            w = bf16_bits_to_f32(tl.load(w_ptr + i, mask=wm, other=0))
        else:
            w = tl.load(w_ptr + i, mask=wm, other=0.0)
        tl.store(wout_ptr + i, w * w_scale, mask=wm)


W_BLOCK = 1024


def launch_index_queries(
    q_proj: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    n_heads: int,
    rotated: bool,
    w_proj: torch.Tensor | None = None,
    w_scale: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """`q_proj: [T, Hi * Di]` bf16|f32 (unit column stride), `cos`, `sin`: f32 `[T, R/2]`
    contiguous -> (bf16 `[T, Hi, Di]` index queries, with `rotated` the bf16 rotated queries
    before quantization else None, with `w_proj` (bf16|f32 `[T, Hw]` contiguous) the f32 head
    weights `w_proj * w_scale` else None)."""
    t, width = q_proj.shape
    d = width // n_heads
    half_r = cos.shape[1]
    qb, ng, groups = tile_geometry("mxfp4", d)
    bn = rows_per_program(d)
    n = t * n_heads
    dev = q_proj.device
    out = empty((t, n_heads, d), torch.bfloat16, dev)
    rot = empty((t, n_heads, d), torch.bfloat16, dev) if rotated else None
    w_out = None if w_proj is None else empty(tuple(w_proj.shape), torch.float32, dev)
    q_programs = triton.cdiv(n, bn)
    nw = 0 if w_proj is None else w_proj.numel()
    grid = q_programs + triton.cdiv(nw, W_BLOCK)
    if grid == 0:
        return out, rot, w_out
    x_bf16 = q_proj.dtype == torch.bfloat16
    w_bf16 = w_proj is not None and w_proj.dtype == torch.bfloat16
    index_queries_kernel[(grid,)](
        q_proj.view(torch.int16) if x_bf16 else q_proj, cos, sin, out.view(torch.int16),
        (out if rot is None else rot).view(torch.int16), n, q_proj.stride(0),
        cos if w_proj is None else (w_proj.view(torch.int16) if w_bf16 else w_proj),
        cos if w_out is None else w_out, nw, w_scale, q_programs,
        HEADS=n_heads, D=d, HALF_R=half_r, QB=qb, NG=ng, NGROUPS=groups, BN=bn,
        X_BF16=x_bf16, ROT=rotated, W_BLOCK=W_BLOCK, W_BF16=w_bf16, enable_fp_fusion=False,
        **dependent_launch(dev),
    )  # fmt: skip
    return out, rot, w_out
