# mypy: allow-untyped-defs, allow-incomplete-defs, allow-untyped-calls
"""The candidate-block mask (SPEC section 6) in two launches around the top-k.

`block_scores_kernel`: each block's score is the max of its visible entries (-inf when none),
the block holding the row's newest entry pinned to +inf; one program per (row, run of
blocks). The top-k of those scores is `index_topk`'s (ties to the lower block). `mask_kernel`:
a block is kept when the top-k chose it (a binary search of the row's ascending list) and its
score is > -inf; its entries get the flag. Integer and comparison work only (a max is exact),
so the mask is the torch path's on every device, and a row's mask depends on that row alone.
"""

import torch
import triton
import triton.language as tl

from ds41_cache.ops.codec.triton_jit import bf16_bits_to_f32
from ds41_cache.ops.launch import dependent_launch, enter_dependent

from ..topk.triton_kernels import EmptyFn, index_topk_triton

BLOCKS_PER_PROGRAM = 64
"""Blocks one program of either kernel covers (more on rows of over 4M blocks)."""
MAX_GRID_Y = 65535
"""CUDA's limit on a grid's second dimension."""


@triton.jit
def block_scores_kernel(
    logits_ptr, stride_t, nv_ptr, scores_ptr, N, NB,
    BS: tl.constexpr, BS_P2: tl.constexpr, BLOCK_B: tl.constexpr, L_BF16: tl.constexpr,
    GDC: tl.constexpr = False,
):  # fmt: skip
    enter_dependent(GDC)
    t = tl.program_id(0).to(tl.int64)
    b = tl.program_id(1).to(tl.int64) * BLOCK_B + tl.arange(0, BLOCK_B)
    j = tl.arange(0, BS_P2)
    e = b[:, None] * BS + j[None, :]
    nv = tl.load(nv_ptr + t).to(tl.int64)
    seen = (j < BS)[None, :] & (e < N) & (e < nv)
    if L_BF16:  # the bf16 bits widened exactly (also under the interpreter)
        x = bf16_bits_to_f32(tl.load(logits_ptr + t * stride_t + e, mask=seen, other=0))
    else:
        x = tl.load(logits_ptr + t * stride_t + e, mask=seen, other=0.0)
    score = tl.max(tl.where(seen, x, float("-inf")), axis=1)
    newest = tl.maximum(nv - 1, 0) // BS
    score = tl.where((b == newest) & (nv > 0), float("inf"), score)
    tl.store(scores_ptr + t * NB + b, score, mask=b < NB)


@triton.jit
def mask_kernel(
    chosen_ptr, K, scores_ptr, out_ptr, N, NB,
    BS: tl.constexpr, BS_P2: tl.constexpr, BLOCK_B: tl.constexpr, LOG2_K: tl.constexpr,
    GDC: tl.constexpr = False,
):  # fmt: skip
    enter_dependent(GDC)
    t = tl.program_id(0).to(tl.int64)
    b = tl.program_id(1).to(tl.int64) * BLOCK_B + tl.arange(0, BLOCK_B)
    row = chosen_ptr + t * K
    # The row's chosen blocks ascend, then -1 pads: read a pad as +inf. `idx` = how many
    # chosen blocks are < b (the largest prefix, found bit by bit from the top).
    idx = tl.zeros((BLOCK_B,), tl.int64)
    for level in tl.static_range(LOG2_K):
        step = 1 << (LOG2_K - 1 - level)
        cand = idx + step
        inside = cand <= K
        v = tl.load(row + cand - 1, mask=inside, other=-1).to(tl.int64)
        below = inside & (v >= 0) & (v < b)
        idx = tl.where(below, cand, idx)
    at = tl.load(row + idx, mask=idx < K, other=-1).to(tl.int64)
    score = tl.load(scores_ptr + t * NB + b, mask=b < NB, other=float("-inf"))
    keep = (at == b) & (score > float("-inf"))
    j = tl.arange(0, BS_P2)
    e = b[:, None] * BS + j[None, :]
    flag = tl.broadcast_to(keep[:, None], (BLOCK_B, BS_P2)).to(tl.uint8)
    tl.store(out_ptr + t * N + e, flag, mask=(j < BS)[None, :] & (e < N))


def candidate_blocks_triton(
    logits: torch.Tensor,
    n_visible: torch.Tensor,
    topk_blocks: int,
    block_size: int,
    out: torch.Tensor,
    empty: EmptyFn,
) -> torch.Tensor:
    """logits f32|bf16 `[T, N]` (unit column stride), n_visible int32 `[T]` -> `out`, bool
    `[T, N]` contiguous, filled with the mask (scratch allocated through `empty`); T, N > 0."""
    t, n = logits.shape
    dev = logits.device
    nb = -(-n // block_size)
    bs_p2 = triton.next_power_of_2(block_size)
    block_b = max(1, min(BLOCKS_PER_PROGRAM, 4096 // bs_p2))
    while triton.cdiv(nb, block_b) > MAX_GRID_Y:  # very long rows: more blocks per program
        block_b *= 2
    grid = (t, triton.cdiv(nb, block_b))
    nv = n_visible.contiguous()
    scores = empty((t, nb), torch.float32, dev)
    is_bf16 = logits.dtype == torch.bfloat16
    block_scores_kernel[grid](
        logits.view(torch.int16) if is_bf16 else logits, logits.stride(0), nv, scores, n, nb,
        BS=block_size, BS_P2=bs_p2, BLOCK_B=block_b, L_BF16=is_bf16, num_warps=4,
        **dependent_launch(logits.device),
    )  # fmt: skip
    k = min(topk_blocks, nb)
    all_blocks = torch.full((t,), nb, dtype=torch.int32, device=dev)
    chosen = index_topk_triton(scores, all_blocks, k, empty)
    mask_kernel[grid](
        chosen, k, scores, out.view(torch.uint8), n, nb,
        BS=block_size, BS_P2=bs_p2, BLOCK_B=block_b, LOG2_K=max(1, k.bit_length()),
        num_warps=4,
        **dependent_launch(out.device),
    )  # fmt: skip
    return out
