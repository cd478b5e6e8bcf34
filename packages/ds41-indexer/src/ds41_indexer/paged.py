"""`paged_index_topk`: fused paged logits + exact top-k (SPEC section 6).

Rows are scored in segments of entries (sized so the fp32 scratch `[T, segment]` stays under
`SCRATCH_BYTES`); each segment's logits feed the chunk selector at once and are merged with the
running top-k of the entries before it, so no `[T, N]` tensor exists for long rows.
The result equals `index_topk(index_logits(...))` of the same backend bitwise: every logit is
computed by the same tile code, and the selection is exact under one total order.
"""

from __future__ import annotations

import torch

from ds41_cache.backend import interpreter_active, resolve_backend
from ds41_cache.outputs import empty
from ds41_cache.paged import PagedCache

from ._checks import check_positive_int
from .logits import check_paged_inputs
from .ops.logits.naive import paged_logits_torch, visible_entries
from .ops.topk.naive import composite_keys, select_from_keys

SEGMENT_TORCH = 1 << 11
"""Entries scored per step on the torch path."""


def paged_index_topk(
    q: torch.Tensor,
    weights: torch.Tensor,
    key_cache: PagedCache,
    block_table: torch.Tensor,
    req_idx: torch.Tensor,
    pos: torch.Tensor,
    ratio: int,
    k: int,
    *,
    candidates: torch.Tensor | None = None,
    backend: str = "auto",
    validate: bool = True,
    segment: int | None = None,
    chunk: int | None = None,
) -> torch.Tensor:
    """Top-k index entries per row -> int32 [T, k] (ascending entries, then -1).

    q: bf16 [T, Hi, Di]; weights: f32 [T, Hi]; key_cache: index keys paged by
    block_table: int32 [R, P]; req_idx, pos: int32 [T]; entries `e < n(p) = (p+1)//ratio` are
    visible; candidates: bool [T, Nc] | None (entries outside it score -inf). `segment` and
    `chunk` tune the Triton path (powers of two, chunk >= 2 * next_pow2(k)); results never
    depend on them. `validate=False` skips host-syncing range checks (CUDA-graph capturable).
    """
    check_paged_inputs(
        q, weights, key_cache, block_table, req_idx, pos, ratio, candidates, validate
    )
    check_positive_int(k, "k")
    t = q.shape[0]
    n_total = block_table.shape[1] * key_cache.page_size
    n_vis = visible_entries(req_idx, pos, ratio)
    which = resolve_backend(backend, q.device)
    if which == "torch":
        seg = SEGMENT_TORCH if segment is None else segment
        # Entries no row can see are never chosen: stop at the largest n(p) (a host read).
        n_used = min(n_total, int(n_vis.max())) if t else 0
        picks = []
        for base in range(0, n_used, seg):
            width = min(seg, n_used - base)
            logits = paged_logits_torch(
                q,
                weights,
                key_cache,
                block_table,
                req_idx,
                pos,
                ratio,
                width,
                candidates,
                entry_base=base,
            )
            cols = base + torch.arange(width, device=q.device)
            ck = composite_keys(logits, cols[None, :] < n_vis[:, None], entry_base=base)
            picks.append(torch.topk(ck, min(k, width), dim=1, largest=False).values)
        if not picks:
            picks.append(torch.full((t, 1), torch.iinfo(torch.int64).max, device=q.device))
        return select_from_keys(torch.cat(picks, dim=1), k)

    from .ops.logits.triton_kernels import paged_logits_triton
    from .ops.topk import triton_kernels as tk

    out = empty((t, k), torch.int32, q.device)
    if t == 0:
        return out
    k_pad = tk.k_pad_of(k)
    ch = tk.default_chunk(k_pad) if chunk is None else chunk
    tk.check_chunk(ch, k_pad)
    seg = segment_for(t, n_total, ch) if segment is None else segment
    if seg < ch or seg % ch:
        raise ValueError(f"segment must be a positive multiple of chunk = {ch}, got {seg}")
    qc, wc, btc = q.contiguous(), weights.contiguous(), block_table.contiguous()
    cand = candidates.contiguous() if candidates is not None else None
    n_total = max(n_total, 1)
    buf = empty((t, min(seg, n_total)), torch.float32, q.device)

    def score(base: int) -> torch.Tensor:
        view = buf[:, : min(seg, n_total - base)]
        paged_logits_triton(
            qc,
            wc,
            key_cache,
            btc,
            req_idx,
            pos,
            ratio,
            view,
            cand,
            entry_base=base,
            upcast=interpreter_active(),
        )
        return view

    if n_total <= seg:  # one segment: chunk lists, then merge levels
        n_chunks = -(-n_total // ch)
        view = score(0)
        if n_chunks == 1:
            tk.stage1(view, n_vis, k, k_pad, ch, None, out, final=True)
            return out
        keys = empty((t, n_chunks * k_pad), torch.int32, q.device)
        idx = empty((t, n_chunks * k_pad), torch.int32, q.device)
        tk.stage1(view, n_vis, k, k_pad, ch, keys, idx)
        return tk.merge_levels(keys, idx, k, k_pad, ch, out, empty)
    # Several segments: list 0 holds the running top-k of the entries scored so far (ascending
    # entries, all below the current segment), lists 1.. the current segment's chunk lists; each
    # segment merges them back into list 0, and the last one into `out`.
    lists = 1 + seg // ch
    keys = empty((t, lists * k_pad), torch.int32, q.device)
    idx = empty((t, lists * k_pad), torch.int32, q.device)
    idx[:, :k_pad].fill_(-1)
    for base in range(0, n_total, seg):
        view = score(base)
        tk.stage1(view, n_vis, k, k_pad, ch, keys, idx, entry_base=base, chunk_base=1)
        n_in = (1 + -(-view.shape[1] // ch)) * k_pad
        if base + seg >= n_total:
            return tk.merge_levels(keys, idx, k, k_pad, ch, out, empty, n_in=n_in)
        tk.merge_levels(
            keys, idx, k, k_pad, ch, idx[:, :k_pad], empty, n_in=n_in, out_keys=keys[:, :k_pad]
        )
    raise AssertionError("unreachable")


SCRATCH_BYTES = 1 << 28
"""Upper bound of the fp32 logits scratch `[T, segment]` on the Triton path."""


def segment_for(rows: int, n_total: int, chunk: int) -> int:
    """Entries scored per segment: a power of two >= chunk, the whole row when few rows run.

    Only speed depends on it (selection is exact), so it may depend on the row count.
    """
    cap = max(chunk, SCRATCH_BYTES // (4 * max(rows, 1)))
    seg = chunk
    while seg * 2 <= cap and seg < n_total:
        seg *= 2
    return seg
