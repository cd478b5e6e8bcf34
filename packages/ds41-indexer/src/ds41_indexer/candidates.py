"""`candidate_blocks`: the candidate-source block mask (SPEC section 6)."""

from __future__ import annotations

import torch

from ds41_cache.backend import resolve_backend
from ds41_cache.outputs import empty

from ._checks import check_positive_int
from .topk import check_topk_inputs, index_topk


def candidate_blocks(
    logits: torch.Tensor,
    n_visible: torch.Tensor,
    topk_blocks: int,
    block_size: int,
    *,
    backend: str = "auto",
    validate: bool = True,
) -> torch.Tensor:
    """Entry mask of the kept candidate blocks -> bool [T, N].

    logits: f32|bf16 [T, N]; n_visible: int32 [T]. The row is padded to a multiple of
    `block_size` with -inf, entries `>= n_visible` count as -inf, a block scores its max, the
    block of entry `n_visible - 1` is pinned to +inf (when `n_visible > 0`); the top
    `min(topk_blocks, nblocks)` blocks (ties to the lower block index) whose score is > -inf
    are kept, and the mask covers whole kept blocks (clipped to N).

    `backend`: "auto" (Triton on CUDA tensors), "triton" or "torch". The Triton path
    (`ops/candidates/`) is two launches around the indexer's top-k, no `[T, N]` float scratch;
    the same mask as the torch path (integer and comparison work only).
    """
    check_topk_inputs(logits, n_visible, 1, validate)
    check_positive_int(topk_blocks, "topk_blocks")
    check_positive_int(block_size, "block_size")
    t, n = logits.shape
    dev = logits.device
    nb = -(-n // block_size)
    out = empty((t, n), torch.bool, dev)
    if t == 0 or n == 0:
        return out
    if resolve_backend(backend, dev) == "triton" and logits.stride(1) == 1:
        from .ops.candidates.triton_kernels import candidate_blocks_triton

        return candidate_blocks_triton(logits, n_visible, topk_blocks, block_size, out, empty)
    nv = n_visible.to(torch.int64)
    cols = torch.arange(nb * block_size, device=dev)
    padded = torch.full((t, nb * block_size), float("-inf"), dtype=torch.float32, device=dev)
    padded[:, :n] = logits.float()
    padded = torch.where(cols[None, :] < nv[:, None], padded, float("-inf"))
    scores = padded.view(t, nb, block_size).amax(dim=2)
    newest = torch.clamp(nv - 1, min=0) // block_size
    pin = (torch.arange(nb, device=dev)[None, :] == newest[:, None]) & (nv[:, None] > 0)
    scores = torch.where(pin, float("inf"), scores)
    all_blocks = torch.full((t,), nb, dtype=torch.int32, device=dev)
    chosen = index_topk(
        scores, all_blocks, min(topk_blocks, nb), backend=backend, validate=False
    ).to(torch.int64)
    live = chosen >= 0
    safe = torch.where(live, chosen, torch.zeros_like(chosen))
    live = live & (torch.gather(scores, 1, safe) > float("-inf"))
    keep = torch.zeros((t, nb + 1), dtype=torch.bool, device=dev)
    keep.scatter_(1, torch.where(live, chosen, torch.full_like(chosen, nb)), True)
    out.copy_(keep[:, :nb].repeat_interleave(block_size, dim=1)[:, :n])
    return out
