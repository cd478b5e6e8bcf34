"""Lab copy of `ds41_indexer.paged` at main a3217eb (before the segment overlap): one scratch
buffer, every segment selection on the caller's stream. `overlap_lab.py` times it as "main".

The module docstring at a3217eb: `paged_index_topk`: fused paged logits + exact top-k.

Rows are scored in segments of entries (sized so the fp32 scratch `[T, segment]` stays under
`SCRATCH_BYTES`); the logits kernel also writes each 64 entries' largest key. When a row is one
segment, the split selector picks its winners with several programs per row (slices, the last
one of each row merging); otherwise the group selector (one program per row) picks each
segment's winners from those groups, starting from the running top-k of the entries before it,
so no `[T, N]` tensor exists for long rows.
The result equals `index_topk(index_logits(...))` of the same backend bitwise: every logit is
computed by the same tile code, and the selection is exact under one total order.
"""

from __future__ import annotations

import torch

from ds41_cache.backend import interpreter_active, resolve_backend
from ds41_cache.outputs import empty
from ds41_cache.paged import PagedCache
from ds41_indexer._checks import check_positive_int
from ds41_indexer.logits import check_paged_inputs
from ds41_indexer.ops.logits.naive import paged_logits_torch, visible_entries
from ds41_indexer.ops.topk.naive import composite_keys, select_from_keys

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
    `chunk` tune the Triton path (powers of two, chunk >= max(2 * next_pow2(k), 64)); results never
    depend on them. `validate=False` skips host-syncing range checks (CUDA-graph capturable).
    """
    check_paged_inputs(
        q, weights, key_cache, block_table, req_idx, pos, ratio, candidates, validate
    )
    check_positive_int(k, "k")
    t = q.shape[0]
    n_total = block_table.shape[1] * key_cache.page_size
    which = resolve_backend(backend, q.device)
    if which == "torch":
        n_vis = visible_entries(req_idx, pos, ratio)
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

    from ds41_indexer.ops.logits.gluon_launch import paged_logits_gpu
    from ds41_indexer.ops.logits.triton_kernels import TILE
    from ds41_indexer.ops.topk import triton_kernels as tk

    out = empty((t, k), torch.int32, q.device)
    if t == 0:
        return out
    n_vis = tk.visible_counts(req_idx, pos, ratio, empty)
    k_pad = tk.k_pad_of(k)
    ch = tk.default_chunk(k_pad) if chunk is None else chunk
    tk.check_chunk(ch, k_pad)
    seg = segment_for(t, n_total, ch) if segment is None else segment
    if seg < ch or seg % ch:
        raise ValueError(f"segment must be a positive multiple of chunk = {ch}, got {seg}")
    qc, wc, btc = q.contiguous(), weights.contiguous(), block_table.contiguous()
    cand = candidates.contiguous() if candidates is not None else None
    n_total = max(n_total, 1)
    width = min(seg, n_total)
    buf = empty((t, width), torch.float32, q.device)
    # One segment of a long row: the split selector (slices of a row in parallel) when the
    # shape asks for it, else the group selector (one program per row, running merges).
    sp, scratch, gmax = tk.selection_scratch(t, n_total, seg, k_pad, ch, empty, q.device)
    # The logits kernel writes the group maxima itself when its tile is a multiple of GROUP.
    fused_gmax = TILE[0] % tk.GROUP.value == 0

    def score(base: int) -> torch.Tensor:
        view = buf[:, : min(seg, n_total - base)]
        paged_logits_gpu(
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
            gmax=gmax if fused_gmax else None,
        )
        if gmax is not None and not fused_gmax:
            tk.group_max(view, (n_vis - base).clamp(min=0).to(torch.int32), gmax)
        return view

    if n_total <= ch:  # one chunk: one program per row
        tk.select_rows(score(0), n_vis, k, k_pad, ch, out)
        return out
    if sp is not None:
        tk.split_select(score(0), n_vis, k, k_pad, ch, sp, out)
        return out
    assert scratch is not None
    # Segments in entry order: each one's group selection merges with the running top-k of the
    # entries before it (kept in the first k_pad slots of the candidate region).
    for base in range(0, n_total, seg):
        view = score(base)
        last = base + seg >= n_total
        tk.group_select(
            view, n_vis, k, k_pad, ch, scratch, out, entry_base=base, has_run=base > 0, final=last
        )
    return out


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
