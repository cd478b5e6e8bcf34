# mypy: allow-untyped-defs, allow-incomplete-defs
"""The compressor's step in two launches (the torch reference takes ~40 small kernels).

`compress_rows_kernel`, one program per row: ratio 2 finds the row's partner (the row one
position earlier of the same request) by scanning this call's `(req, pos)` pairs, else reads
it from the ring; pools the pair (`pool_pair`'s operations in its order: IEEE division, no
fused multiply-add), rounds to bf16 and normalizes (`ops/norm`'s `rms_norm_tile`); ratio 1
normalizes the row itself. It also gives each row its ring target (the request while the
position is among the request's last `capacity` positions of this call, else the scratch
row). `ring_write_kernel` then stores the raw rows: a second launch, because a row may read a
ring slot that another row of the same call overwrites.

The pooling's exp is libdevice's `exp` on the GPU, the function torch's CUDA `exp` calls, so
the latents are the torch path's bit for bit (a GPU test makes the pairs cancel, where an
approximate exp would change many latents). Triton's own `tl.math.exp` would not do: Triton
3.6 lowers it on the H200 to the approximate ex2 of x * log2(e), up to ~12 ulp from exp
(it differed from torch's on 88% of 16.8M arguments). The interpreter has no libdevice and
takes `tl.math.exp` (numpy's exp), which agrees with torch's CPU exp on the tests' inputs.

Everything a row gets is a function of its own values, its partner's and the call's
`(req, pos)` pairs, so a row's bits do not depend on the other rows' values, their number or
their order.
"""

import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice

from ...backend import interpreter_active
from ...outputs import empty
from ..codec.triton_jit import bf16_bits_to_f32, f32_to_bf16_store_bits
from ..launch import dependent_launch, enter_dependent
from ..norm.triton_kernels import load_f32, rms_norm_tile

SCAN_BLOCK = 256
"""(req, pos) pairs one scan step of `compress_rows_kernel` compares."""


@triton.jit
def compress_rows_kernel(
    kv_ptr, score_ptr, stride_kv, stride_score, req_ptr, pos_ptr, ring_ptr, w_ptr, eps,
    latent_ptr, emit_ptr, entry_ptr, target_ptr, T, R,
    D: tl.constexpr, LOG2_D: tl.constexpr, RATIO: tl.constexpr, CAP: tl.constexpr,
    KV_BF16: tl.constexpr, SCORE_BF16: tl.constexpr, W_BF16: tl.constexpr,
    SCAN_BLOCK: tl.constexpr, PRECISE_EXP: tl.constexpr,
    GDC: tl.constexpr = False,
):  # fmt: skip
    enter_dependent(GDC)
    i = tl.program_id(0).to(tl.int64)
    r = tl.load(req_ptr + i).to(tl.int64)
    p = tl.load(pos_ptr + i).to(tl.int64)
    valid = (r >= 0) & (r < R)
    cols = tl.arange(0, D)
    all_cols = cols < D
    w = load_f32(w_ptr, cols, all_cols, W_BF16)
    kv = load_f32(kv_ptr, i * stride_kv + cols, all_cols, KV_BF16)
    if RATIO == 1:
        emit = valid
        entry = p
        x = kv
    else:
        score = load_f32(score_ptr, i * stride_score + cols, all_cols, SCORE_BF16)
        # This call's rows of the same request: the partner (position p - 1) and the last
        # position (only the last CAP positions go into the ring).
        partner = tl.full((), -1, tl.int64)
        last = tl.full((), -1, tl.int64)
        start = tl.zeros((), tl.int64)
        while start < T:  # a while loop: the interpreter cannot `range` over a runtime bound
            j = start + tl.arange(0, SCAN_BLOCK).to(tl.int64)
            ok = j < T
            rj = tl.load(req_ptr + j, mask=ok, other=-1).to(tl.int64)
            pj = tl.load(pos_ptr + j, mask=ok, other=0).to(tl.int64)
            same = ok & (rj == r)
            last = tl.maximum(last, tl.max(tl.where(same, pj, -1), axis=0))
            partner = tl.maximum(partner, tl.max(tl.where(same & (pj == p - 1), j, -1), axis=0))
            start += SCAN_BLOCK
        keep = valid & (p > last - CAP)
        tl.store(target_ptr + i, tl.where(keep, r, R))
        emit = valid & ((p & 1) == 1)  # & as Python's % for any sign
        entry = ((p + 1) >> 1) - 1  # (p + 1) // 2 - 1 for any sign
        in_call = partner >= 0
        in_ring = emit & ~in_call
        ring_row = ring_ptr + (tl.maximum(r, 0) * CAP + ((p - 1) & (CAP - 1))) * (2 * D)
        kv0 = tl.load(ring_row + cols, mask=all_cols & in_ring, other=0.0)
        s0 = tl.load(ring_row + D + cols, mask=all_cols & in_ring, other=0.0)
        prow = tl.maximum(partner, 0)
        kv0 = tl.where(
            in_call, load_f32(kv_ptr, prow * stride_kv + cols, all_cols & in_call, KV_BF16), kv0
        )
        s0 = tl.where(
            in_call,
            load_f32(score_ptr, prow * stride_score + cols, all_cols & in_call, SCORE_BF16),
            s0,
        )
        # naive.pool_pair: m, e_i = exp(s_i - m), w_i = e_i / (e0 + e1), w0 kv0 + w1 kv1
        m = tl.maximum(s0, score, propagate_nan=tl.PropagateNan.ALL)
        if PRECISE_EXP:
            e0 = libdevice.exp(s0 - m)
            e1 = libdevice.exp(score - m)
        else:
            e0 = tl.math.exp(s0 - m)
            e1 = tl.math.exp(score - m)
        den = e0 + e1
        pooled = tl.math.div_rn(e0, den) * kv0 + tl.math.div_rn(e1, den) * kv
        # the reference normalizes the bf16 values (a NaN as torch's cast gives it)
        x = bf16_bits_to_f32(f32_to_bf16_store_bits(pooled))
    y = rms_norm_tile(tl.reshape(x, [1, D]), w, eps, D, LOG2_D, 1)
    bits = tl.where(emit, f32_to_bf16_store_bits(tl.reshape(y, [D])), 0).to(tl.int16)
    tl.store(latent_ptr + i * D + cols, bits)
    tl.store(emit_ptr + i, emit.to(tl.uint8))
    tl.store(entry_ptr + i, tl.where(emit, entry, -1))


@triton.jit
def ring_write_kernel(
    kv_ptr, score_ptr, stride_kv, stride_score, pos_ptr, target_ptr, ring_ptr, R,
    D: tl.constexpr, CAP: tl.constexpr, KV_BF16: tl.constexpr, SCORE_BF16: tl.constexpr,
    GDC: tl.constexpr = False,
):  # fmt: skip
    enter_dependent(GDC)
    i = tl.program_id(0).to(tl.int64)
    target = tl.load(target_ptr + i)
    if target < R:  # the scratch row takes padding and superseded rows: nothing reads it
        p = tl.load(pos_ptr + i).to(tl.int64)
        cols = tl.arange(0, D)
        row = ring_ptr + (target * CAP + (p & (CAP - 1))) * (2 * D)
        tl.store(row + cols, load_f32(kv_ptr, i * stride_kv + cols, cols < D, KV_BF16))
        score = load_f32(score_ptr, i * stride_score + cols, cols < D, SCORE_BF16)
        tl.store(row + D + cols, score)


def _as_bits(x: torch.Tensor) -> torch.Tensor:
    """bf16 tensors go into the kernels as their int16 bits (widened exactly there)."""
    return x.view(torch.int16) if x.dtype == torch.bfloat16 else x


def compress_rows(
    kv: torch.Tensor,
    score: torch.Tensor | None,
    req_idx: torch.Tensor,
    pos: torch.Tensor,
    ring: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    ratio: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """One launch: `(latent bf16 [T, D], emit bool [T], entry int64 [T], target int64 [T] | None)`.

    kv / score: f32|bf16 `[T, D]` with unit column stride (score None at ratio 1); req_idx /
    pos: int32 `[T]`; ring: f32 `[R + 1, CAP, 2 D]` contiguous (row R is scratch); weight:
    f32|bf16 `[D]` contiguous; D a power of two. `target` (ratio 2): the ring row each row's
    raw values go to (`R` = nowhere), for `write_ring`.
    """
    t, d = kv.shape
    dev = kv.device
    latent = empty((t, d), torch.bfloat16, dev)
    emit = empty((t,), torch.bool, dev)
    entry = empty((t,), torch.int64, dev)
    target = empty((t,), torch.int64, dev) if ratio == 2 else None
    if t == 0:
        return latent, emit, entry, target
    sc = score if score is not None else kv
    compress_rows_kernel[(t,)](
        _as_bits(kv), _as_bits(sc), kv.stride(0), sc.stride(0), req_idx.contiguous(),
        pos.contiguous(), ring, _as_bits(weight), float(eps), latent.view(torch.int16),
        emit.view(torch.uint8), entry, target if target is not None else entry, t,
        ring.shape[0] - 1,
        D=d, LOG2_D=d.bit_length() - 1, RATIO=ratio, CAP=ring.shape[1],
        KV_BF16=kv.dtype == torch.bfloat16, SCORE_BF16=sc.dtype == torch.bfloat16,
        W_BF16=weight.dtype == torch.bfloat16, SCAN_BLOCK=SCAN_BLOCK,
        PRECISE_EXP=not interpreter_active(),
        num_warps=4, enable_fp_fusion=False,
        **dependent_launch(kv.device),
    )  # fmt: skip
    return latent, emit, entry, target


def write_ring(
    kv: torch.Tensor, score: torch.Tensor, pos: torch.Tensor, target: torch.Tensor,
    ring: torch.Tensor,
) -> None:  # fmt: skip
    """One launch: `ring[target[i], pos[i] % CAP] = [f32(kv[i]) | f32(score[i])]` where
    `target[i] < R` (the targets `compress_rows` gave; no two rows share a slot)."""
    t, d = kv.shape
    if t == 0:
        return
    ring_write_kernel[(t,)](
        _as_bits(kv), _as_bits(score), kv.stride(0), score.stride(0), pos.contiguous(),
        target, ring, ring.shape[0] - 1,
        D=d, CAP=ring.shape[1], KV_BF16=kv.dtype == torch.bfloat16,
        SCORE_BF16=score.dtype == torch.bfloat16, num_warps=4,
        **dependent_launch(kv.device),
    )  # fmt: skip
