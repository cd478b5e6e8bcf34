# mypy: disallow-untyped-defs=False, disallow-incomplete-defs=False, check-untyped-defs=False
"""RMSNorm (one program per row) and the vocabulary partials of log-softmax and sampling (one
program per row and vocabulary segment): every reduction in an order that depends only on the
row or segment length, never on the number of rows."""

import torch
import triton
import triton.language as tl


@triton.jit
def rmsnorm_kernel(x_ptr, w_ptr, out_ptr, D, stride_x, stride_o, eps, BLOCK_D: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_D)
    ok = cols < D
    x = tl.load(x_ptr + row * stride_x + cols, mask=ok, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=ok, other=0.0).to(tl.float32)
    ms = tl.sum(x * x, axis=0) / D
    y = x * (1.0 / tl.sqrt(ms + eps)) * w
    tl.store(out_ptr + row * stride_o + cols, y.to(out_ptr.dtype.element_ty), mask=ok)


def launch_rmsnorm(
    x: torch.Tensor, w: torch.Tensor, eps: float, out: torch.Tensor, interp: bool
) -> torch.Tensor:
    m, d = x.shape
    block = triton.next_power_of_2(d)
    # Warps follow the row width only (never the row count), so the reduction tree is fixed.
    rmsnorm_kernel[(m,)](
        x, w, out, d, x.stride(0), out.stride(0), eps, BLOCK_D=block,
        num_warps=4 if block <= 2048 else 8,
    )  # fmt: skip
    return out


VOCAB_BLOCK = 1024
_N_FIELDS = 6  # ops.vocab.PARTIAL_FIELDS


@triton.jit
def _mul32(a, c: tl.constexpr):
    # uint32 products wrap mod 2**32: the torch path's `_mul32`.
    return a * tl.full(a.shape, c, tl.uint32)


@triton.jit
def _fmix32(h):
    h = h ^ (h >> 16)
    h = _mul32(h, 0x85EBCA6B)
    h = h ^ (h >> 13)
    h = _mul32(h, 0xC2B2AE35)
    return h ^ (h >> 16)


@triton.jit
def vocab_partials_kernel(
    x_ptr,
    out_ptr,
    seed_ptr,
    posn_ptr,
    temp_ptr,
    tgt_ptr,
    stride_x,
    v0,
    seg_len,
    nseg,
    BLOCK: tl.constexpr,
    TILES: tl.constexpr,
    SAMPLE: tl.constexpr,
    TARGETS: tl.constexpr,
):
    # One program per (row, segment): the order of every reduction depends on the segment
    # length only. Fields as ops.vocab.PARTIAL_FIELDS. Pass 1: the max and the best score;
    # pass 2: the sum of exp(x - max).
    row = tl.program_id(0)
    sg = tl.program_id(1)
    cols = tl.arange(0, BLOCK)
    base = x_ptr + row * stride_x + sg * seg_len
    out = out_ptr + (row * nseg + sg) * 6
    id0 = v0 + sg * seg_len
    mx = tl.full((BLOCK,), float("-inf"), tl.float32)
    best = tl.full((BLOCK,), float("-inf"), tl.float32)
    bidx = tl.full((BLOCK,), 2147483647, tl.int32)
    bx = tl.zeros((BLOCK,), tl.float32)
    if SAMPLE:
        temp = tl.load(temp_ptr + row)
        seed = tl.load(seed_ptr + row)
        s_lo = (seed & 0xFFFFFFFF).to(tl.uint32)
        s_hi = ((seed >> 32) & 0xFFFFFFFF).to(tl.uint32)
        p = (tl.load(posn_ptr + row).to(tl.int64) & 0xFFFFFFFF).to(tl.uint32)
        greedy = temp <= 0
        safe_t = tl.where(greedy, 1.0, temp)
    for t in range(0, TILES):
        c = t * BLOCK + cols
        ok = c < seg_len
        x = tl.load(base + c, mask=ok, other=float("-inf"))
        mx = tl.maximum(mx, x)
        if SAMPLE:
            ids = id0 + c
            h = _fmix32(((ids.to(tl.int64) + 0x9E3779B9) & 0xFFFFFFFF).to(tl.uint32))
            h = _fmix32(h ^ p)
            h = _fmix32(h ^ s_hi)
            h = _fmix32(h ^ s_lo)
            u = ((h >> 8).to(tl.float32) + 0.5) * (1.0 / 16777216.0)
            # fp32 log (no fp64 math on the GPU path): a fixed function of the element, so
            # the same bits in any batch; the torch path's float64 noise may differ by an ulp.
            g = -tl.log(-tl.log(u))
            noisy = tl.div_rn(x, tl.full(x.shape, 1.0, tl.float32) * safe_t) + g
            score = tl.where(greedy, x, noisy)
            score = tl.where(ok, score, float("-inf"))
            # Strictly greater: a lane keeps its earlier (lower) id on ties.
            upd = score > best
            best = tl.where(upd, score, best)
            bidx = tl.where(upd, ids, bidx)
            bx = tl.where(upd, x, bx)
    m = tl.max(mx, axis=0)
    acc = tl.zeros((BLOCK,), tl.float32)
    for t in range(0, TILES):
        c = t * BLOCK + cols
        x = tl.load(base + c, mask=c < seg_len, other=float("-inf"))
        acc += tl.exp(x - m)
    tl.store(out, m)
    tl.store(out + 1, tl.sum(acc, axis=0))
    if SAMPLE:
        top = tl.max(best, axis=0)
        idx = tl.min(tl.where(best == top, bidx, 2147483647), axis=0)
        # No finite score (e.g. all -inf): the segment's first id, as torch.argmax.
        idx = tl.where(idx == 2147483647, id0, idx)
        xv = tl.max(tl.where(bidx == idx, bx, float("-inf")), axis=0)
        xv = tl.where(top == float("-inf"), tl.load(base), xv)
        tl.store(out + 2, top)
        tl.store(out + 3, idx.to(tl.float32))
        tl.store(out + 4, xv)
        if TARGETS:
            tgt = tl.load(tgt_ptr + row) - id0
            hit = (tgt >= 0) & (tgt < seg_len)
            tv = tl.load(base + tl.where(hit, tgt, 0))
            tl.store(out + 5, tl.where(hit, tv, 0.0))
        else:
            tl.store(out + 5, 0.0)
    else:
        tl.store(out + 2, 0.0)
        tl.store(out + 3, 0.0)
        tl.store(out + 4, 0.0)
        tl.store(out + 5, 0.0)


def launch_vocab_partials(x: torch.Tensor, v0: int, seg: int, sampling) -> torch.Tensor:
    """`x: f32 [S, Vl]` contiguous, whole segments of `seg` ids starting at id `v0` ->
    f32 `[S, Vl / seg, 6]` partials (`ops.vocab.segment_partials`)."""
    s, vl = x.shape
    nseg = vl // seg
    out = torch.empty((s, nseg, _N_FIELDS), dtype=torch.float32, device=x.device)
    block = min(VOCAB_BLOCK, triton.next_power_of_2(seg))
    sample = sampling is not None
    targets = sample and sampling.targets is not None
    dummy = x
    vocab_partials_kernel[(s, nseg)](
        x, out,
        sampling.seeds if sample else dummy,
        sampling.positions if sample else dummy,
        sampling.temperature if sample else dummy,
        sampling.targets if targets else dummy,
        x.stride(0), v0, seg, nseg,
        BLOCK=block, TILES=triton.cdiv(seg, block), SAMPLE=sample, TARGETS=targets,
    )  # fmt: skip
    return out
