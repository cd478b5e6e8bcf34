"""Lab copy (twelfth session, helper idx12; production at commit 31533a3, then withdrawn): the
fused call with each segment's group selection overlapped with the next segment's scoring.
`overlap_lab.py` times it as "overlap" / "both" / "ovl_half" / "ovl_prio" against main
(`paged_main.py`) and the package (2 segments at 256 x 1M); indexer README, twelfth session.
Its CPU tests (buffer plan, a deferred side lane) and GPU test (serial, delayed side stream,
graph replay) are at 31533a3 (`tests/test_paged_topk.py`, `tests/test_gpu.py`).

The module docstring as it was in production:

Rows are scored in segments of entries (sized so the fp32 scratch `[T, segment]` stays under
`SCRATCH_BYTES`); the logits kernel also writes each 64 entries' largest key. When a row is one
segment, the split selector picks its winners with several programs per row (slices, the last
one of each row merging); otherwise the group selector (one program per row) picks each
segment's winners from those groups, starting from the running top-k of the entries before it,
so no `[T, N]` tensor exists for long rows. With several segments the scratch is doubled (two
segment buffers and their group maxima, alternating) and the selection of every segment but the
last runs on a side CUDA stream (`StreamLanes`: event fork and join, so a CUDA graph captures
it), beside the scoring of the next segment; a buffer is scored again only after the selection
that read it, and the last selection runs on the caller's stream after the side's, so the call
ends joined. Only scheduling differs from scoring and selecting in line: the same launches on
the same data, hence the same bits.
The result equals `index_topk(index_logits(...))` of the same backend bitwise: every logit is
computed by the same tile code, and the selection is exact under one total order.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

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

    def score(
        base: int, into: torch.Tensor = buf, gmax: torch.Tensor | None = gmax
    ) -> torch.Tensor:
        view = into[:, : min(seg, n_total - base)]
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
    # entries before it (kept in the first k_pad slots of the candidate region), so selections
    # run one after another; the scoring of segment s + 1 (into the other of two buffers) runs
    # beside the selection of segment s (on the side lane), and only the last selection, on
    # the caller's stream, is exposed.
    plan = segment_plan(n_total, seg)
    bufs = [buf] + [empty((t, width), torch.float32, q.device) for _ in plan[1:2]]
    gmaxes = [scratch[0]] + [empty(scratch[0].shape, torch.int32, q.device) for _ in plan[1:2]]
    lanes = lanes_for(q.device)
    done: list[object] = []
    for i, (base, b, reuse) in enumerate(plan):
        if reuse is not None:
            lanes.join(done[reuse])  # the selection that read this buffer has finished
        view = score(base, bufs[b], gmaxes[b])
        select = partial(
            tk.group_select,
            view,
            n_vis,
            k,
            k_pad,
            ch,
            (gmaxes[b], *scratch[1:]),
            out,
            entry_base=base,
            has_run=i > 0,
            final=i == len(plan) - 1,
        )
        if i < len(plan) - 1:
            done.append(lanes.on_side(select))
        else:
            if done:
                lanes.join(done[-1])  # the running list, and every side launch, before `out`
            select()
    return out


def segment_plan(n_total: int, seg: int) -> list[tuple[int, int, int | None]]:
    """(entry base, buffer, reuse) of each segment of `seg` entries, in entry order: segment i
    is scored into buffer i % 2 once the selection of segment `reuse` = i - 2 (the last one that
    read that buffer) has finished (None: the buffer's first use)."""
    return [
        (base, i % 2, i - 2 if i >= 2 else None) for i, base in enumerate(range(0, n_total, seg))
    ]


class SerialLanes:
    """Selections in program order on the caller's stream (CPU tensors, the interpreter)."""

    def on_side(self, fn: Callable[[], None]) -> object:
        """Run `fn` after everything launched so far; returns its completion token."""
        fn()
        return None

    def join(self, token: object) -> None:
        """Order what the caller launches next after the launch that returned `token`."""


class StreamLanes(SerialLanes):
    """The caller's current CUDA stream and a side stream of the device, ordered by events
    (recorded and waited on the streams, so a CUDA graph captures them as edges)."""

    def __init__(self, device: torch.device) -> None:
        self.main = torch.cuda.current_stream(device)
        self.side = side_stream(device)

    def on_side(self, fn: Callable[[], None]) -> object:
        fork = torch.cuda.Event()  # type: ignore[no-untyped-call]
        fork.record(self.main)
        self.side.wait_event(fork)
        with torch.cuda.stream(self.side):
            fn()
        finished = torch.cuda.Event()  # type: ignore[no-untyped-call]
        finished.record(self.side)
        return finished

    def join(self, token: object) -> None:
        assert isinstance(token, torch.cuda.Event)
        self.main.wait_event(token)


_SIDE: dict[torch.device, torch.cuda.Stream] = {}
"""Per device, the side stream of the segment selections (default priority)."""


def side_stream(device: torch.device) -> torch.cuda.Stream:
    """The device's side stream for segment selections (made once, then reused)."""
    dev = torch.device(
        "cuda", torch.cuda.current_device() if device.index is None else device.index
    )
    stream = _SIDE.get(dev)
    if stream is None:
        stream = _SIDE[dev] = torch.cuda.Stream(device=dev)  # type: ignore[no-untyped-call]
    return stream


def lanes_for(device: torch.device) -> SerialLanes:
    """Stream lanes on CUDA tensors outside the interpreter, serial lanes otherwise."""
    if device.type == "cuda" and not interpreter_active():
        return StreamLanes(device)
    return SerialLanes()


SCRATCH_BYTES = 1 << 28
"""Upper bound of one fp32 logits scratch buffer `[T, segment]` on the Triton path (two such
buffers when a row takes several segments)."""


def segment_for(rows: int, n_total: int, chunk: int) -> int:
    """Entries scored per segment: a power of two >= chunk, the whole row when few rows run.

    Only speed depends on it (selection is exact), so it may depend on the row count.
    """
    cap = max(chunk, SCRATCH_BYTES // (4 * max(rows, 1)))
    seg = chunk
    while seg * 2 <= cap and seg < n_total:
        seg *= 2
    return seg
