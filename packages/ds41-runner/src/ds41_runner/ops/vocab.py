"""Log-softmax and sampling over the vocabulary in segments fixed by V, from per-row partials.

The vocabulary `[0, V)` is cut into `vocab_segments(V)` equal segments (fixed by V alone, so a
tensor-parallel rank holding `V/tp` contiguous ids holds whole segments). For each row and
segment `segment_partials` computes PARTIAL_FIELDS:

| field | meaning |
|---|---|
| `max` | the segment's largest logit |
| `sumexp` | `sum(exp(x - max))` over the segment, in an order fixed by the segment length |
| `score` | the segment's best sampling score: `x` (greedy) or `x / T + gumbel(seed, pos, v)` |
| `index` | the (lowest) vocabulary id of that score, as an exact fp32 integer |
| `logit` | the logit `x` of that id |
| `target` | the logit of the row's target id if it lies in the segment, else 0 |

`combine_partials` reduces them in segment order on every rank (the same operations whatever
the tensor-parallel degree): `lse = M + log(sum_j sumexp_j * exp(max_j - M))` with `M` the
largest max, the token = the best score's lowest id over all segments, and its log-prob
`logit - lse`: the bits of the full row's `x - lse` (`log_softmax`). A tensor-parallel rank
gathers these few floats per segment instead of the `[rows, V]` logits.

Top-k / top-p need the whole sorted row: `pick` takes them from the full logits (gathered at
TP > 1) only when the caller says a row of the step uses them (`filters=True`); rows without
an active filter keep the partials' token, so a request's bits never depend on its batch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from ds41_cache.backend import resolve_backend

from .rowwise.naive import row_sum
from .sampling import gumbel_noise, sample

PARTIAL_FIELDS = ("max", "sumexp", "score", "index", "logit", "target")
N_FIELDS = len(PARTIAL_FIELDS)
MAX_SEGMENTS = 64
"""At most this many segments per row (the partials a row exchanges)."""
MIN_SEGMENT = 128
"""A segment holds at least this many ids (when V allows more than one segment)."""


def vocab_segments(vocab: int) -> int:
    """The number of log-softmax segments of a vocabulary of `vocab` ids: the largest power of
    two <= MAX_SEGMENTS that divides `vocab` with segments of >= MIN_SEGMENT ids (1 if none).
    A tensor-parallel degree must divide it (`parallel.checks`)."""
    if vocab <= 0:
        raise ValueError(f"vocab must be positive, got {vocab}")
    n = MAX_SEGMENTS
    while n > 1 and (vocab % n or vocab // n < MIN_SEGMENT):
        n //= 2
    return n


@dataclass(frozen=True)
class RowSampling:
    """Per-row sampling inputs of the logit rows (all `[S]`, on the logits' device)."""

    seeds: torch.Tensor  # int64
    positions: torch.Tensor  # int32 / int64
    temperature: torch.Tensor  # f32; <= 0: greedy
    targets: torch.Tensor | None = None  # int64; >= 0: score this id instead of sampling
    top_k: torch.Tensor | None = None  # int; <= 0: off
    top_p: torch.Tensor | None = None  # f32; >= 1: off


def _segment_partials_torch(
    x: torch.Tensor, v0: int, seg: int, rs: RowSampling | None
) -> torch.Tensor:
    s, vl = x.shape
    nseg = vl // seg
    xs = x.view(s * nseg, seg)
    m = xs.amax(dim=-1, keepdim=True)
    # exp in float64 rounded to fp32: the bits do not hinge on torch's vector lane or scalar
    # tail (which depends on the tensor size, i.e. on the batch).
    e = torch.exp((xs - m).to(torch.float64)).to(torch.float32)
    sumexp = row_sum(e)
    out = torch.zeros((s, nseg, N_FIELDS), dtype=torch.float32, device=x.device)
    out[..., 0] = m.view(s, nseg)
    out[..., 1] = sumexp.view(s, nseg)
    if rs is None:
        return out
    greedy = rs.temperature <= 0
    safe_t = torch.where(greedy, torch.ones_like(rs.temperature), rs.temperature)
    noisy = x / safe_t[:, None] + gumbel_noise(rs.seeds, rs.positions, vl, v0=v0)
    scores = torch.where(greedy[:, None], x, noisy).view(s, nseg, seg)
    # torch.argmax returns the first maximal index: ties go to the lowest id.
    best = scores.argmax(dim=-1, keepdim=True)
    out[..., 2] = scores.gather(2, best)[..., 0]
    ids = best[..., 0] + v0 + seg * torch.arange(nseg, device=x.device)[None, :]
    out[..., 3] = ids.to(torch.float32)
    out[..., 4] = x.view(s, nseg, seg).gather(2, best)[..., 0]
    if rs.targets is not None:
        local = rs.targets - v0
        own = (local >= 0) & (local < vl)
        val = x.gather(1, local.clamp(0, vl - 1)[:, None])[:, 0]
        which = (local.clamp(0, vl - 1) // seg)[:, None]
        hit = own[:, None] & (torch.arange(nseg, device=x.device)[None, :] == which)
        out[..., 5] = torch.where(hit, val[:, None], torch.zeros_like(out[..., 5]))
    return out


def segment_partials(
    x: torch.Tensor,
    *,
    v0: int = 0,
    vocab: int | None = None,
    sampling: RowSampling | None = None,
    backend: str = "auto",
) -> torch.Tensor:
    """`x: f32 [S, Vl]`, the logits of vocabulary ids `[v0, v0 + Vl)` of a vocabulary of
    `vocab` ids (default `Vl`) -> f32 `[S, Vl / seg, N_FIELDS]` partials (see the module doc)
    of the whole segments `x` holds. Without `sampling` only `max` and `sumexp` are filled.
    Every row and segment is computed alone, in an order fixed by the segment length."""
    if x.dim() != 2 or x.dtype != torch.float32:
        raise TypeError(f"x must be f32 [S, Vl], got {x.dtype} {list(x.shape)}")
    v = x.shape[1] if vocab is None else vocab
    seg = v // vocab_segments(v)
    if v0 % seg or x.shape[1] % seg:
        raise ValueError(
            f"x must hold whole segments of {seg} ids (vocab {v}), got ids [{v0}, "
            f"{v0 + x.shape[1]})"
        )
    if v >= 1 << 24:
        raise ValueError(f"vocab must be < 2**24 (ids are exact fp32 partials), got {v}")
    x = x.contiguous()
    if resolve_backend(backend, x.device) == "torch" or x.shape[0] == 0:
        return _segment_partials_torch(x, v0, seg, sampling)
    from .rowwise.triton_kernels import launch_vocab_partials

    return launch_vocab_partials(x, v0, seg, sampling)


def combine_partials(
    parts: torch.Tensor, seg: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """`parts: f32 [S, nseg, N_FIELDS]` (every segment of the row, in order) and the segment
    length -> (`lse` f32 `[S, 1]`, the best token int64 `[S]`, its logit f32 `[S]`, the
    `target` field f32 `[S, nseg]` (read with `target_logit`)).

    Elementwise torch ops and fixed-order sums only (float64 exp/log rounded to fp32), so the
    result is the same on every rank and for every batch. The Triton backend runs the same
    operations in one launch (`combine_rows`)."""
    m = parts[..., 0]
    big = m.amax(dim=-1, keepdim=True)
    scale = torch.exp((m - big).to(torch.float64)).to(torch.float32)
    total = row_sum(parts[..., 1] * scale)
    lse = big + torch.log(total.to(torch.float64)).to(torch.float32)
    # The best score over the segments; ties go to the lower segment (so the lower id).
    j = parts[..., 2].argmax(dim=-1, keepdim=True)
    token = parts[..., 3].gather(1, j)[:, 0].to(torch.int64)
    logit = parts[..., 4].gather(1, j)[:, 0]
    return lse, token, logit, parts[..., 5]


def target_logit(target_parts: torch.Tensor, targets: torch.Tensor, seg: int) -> torch.Tensor:
    """The `target` field of the segment holding each row's target id (a copy): f32 `[S]`."""
    which = (targets.clamp(min=0) // seg)[:, None]
    return target_parts.gather(1, which)[:, 0]


@dataclass(frozen=True)
class Combined:
    """The row results `combine_rows` derives from every segment's partials."""

    lse: torch.Tensor
    """f32 `[S, 1]`."""
    new: torch.Tensor
    """int64 `[S]`: the best score's lowest id (the sampled or greedy token)."""
    logit: torch.Tensor
    """f32 `[S]`: the logit of `new`."""
    target_logit: torch.Tensor | None
    """f32 `[S]`: the logit of each row's target id (given targets; read where >= 0)."""
    chosen: torch.Tensor
    """int64 `[S]`: the target where one is given (>= 0), else `new`."""
    logprob: torch.Tensor
    """f32 `[S]`: the log-prob of `chosen`."""


def combine_rows(
    parts: torch.Tensor, seg: int, targets: torch.Tensor | None = None, *, backend: str = "auto"
) -> Combined:
    """`parts: f32 [S, nseg, N_FIELDS]` (every segment, in order), the segment length and
    the rows' targets (int64 `[S]`, < 0: none; or None) -> `Combined`.

    The torch backend is `combine_partials` with `target_logit`; the Triton backend does the
    same operations in one program per row (one launch instead of ~25 small kernels)."""
    if resolve_backend(backend, parts.device) == "triton" and parts.shape[0] > 0:
        from .rowwise.triton_kernels import launch_vocab_combine

        return Combined(*launch_vocab_combine(parts, seg, targets))
    lse, new, logit, tparts = combine_partials(parts, seg)
    return _finish(lse, new, logit, tparts, targets, seg)


def _finish(
    lse: torch.Tensor,
    new: torch.Tensor,
    logit: torch.Tensor,
    tparts: torch.Tensor | None,
    targets: torch.Tensor | None,
    seg: int,
    tlogit: torch.Tensor | None = None,
) -> Combined:
    """The chosen token and its log-prob from a row's token, its logit and the targets (the
    target's logit read from `tparts`, or given as `tlogit`)."""
    chosen = new
    if targets is not None:
        if tlogit is None:
            assert tparts is not None
            tlogit = target_logit(tparts, targets, seg)
        scored = targets >= 0
        chosen = torch.where(scored, targets, new)
        logit_c = torch.where(scored, tlogit, logit)
    else:
        logit_c = logit
    return Combined(lse, new, logit, tlogit, chosen, logit_c - lse[:, 0])


def _same(t: torch.Tensor) -> torch.Tensor:
    return t


@dataclass
class Pick:
    """What a step needs from its logit rows."""

    new: torch.Tensor
    """int64 `[S]`: the sampled (or greedy) token of each row."""
    chosen: torch.Tensor
    """int64 `[S]`: the target where one is given (>= 0), else `new`."""
    logprob: torch.Tensor
    """f32 `[S]`: the log-prob of `chosen` (bitwise `log_softmax(logits)[chosen]`)."""
    rows: torch.Tensor | None
    """f32 `[S, V]` full log-prob rows (only when asked for)."""


def pick(
    x: torch.Tensor,
    sampling: RowSampling,
    *,
    vocab: int,
    v0: int = 0,
    gather_partials: Callable[[torch.Tensor], torch.Tensor] | None = None,
    gather_logits: Callable[[torch.Tensor], torch.Tensor] | None = None,
    filters: bool = False,
    full_rows: bool = False,
    backend: str = "auto",
) -> Pick:
    """Sample (or score) the logit rows from `x: f32 [S, Vl]`, the logits of ids `[v0, v0 +
    Vl)` (a tensor-parallel rank's shard, or all `vocab` ids with the default gathers).

    `gather_partials` maps this shard's `[S, nseg_local, F]` partials to every segment's
    `[S, nseg, F]` (rank order); `gather_logits` maps `x` to the full `[S, V]` logits: they are
    called only for `filters` (some row has temperature > 0 and top-k or top-p on: those rows
    sample from the full row, `sampling.sample`) or `full_rows`. Rows without an active filter
    always take the partials' token, so `filters` never changes them."""
    gp = gather_partials or _same
    gl = gather_logits or _same
    seg = vocab // vocab_segments(vocab)
    local = segment_partials(x, v0=v0, vocab=vocab, sampling=sampling, backend=backend)
    c = combine_rows(gp(local), seg, sampling.targets, backend=backend)
    full: torch.Tensor | None = None
    if filters and (sampling.top_k is not None or sampling.top_p is not None):
        full = gl(x)
        t = sampling.temperature
        on = torch.zeros_like(t, dtype=torch.bool)
        if sampling.top_k is not None:
            on = on | (sampling.top_k > 0)
        if sampling.top_p is not None:
            on = on | (sampling.top_p < 1)
        active = (t > 0) & on
        filtered = sample(full, sampling.seeds, sampling.positions, t, sampling.top_k,
                          sampling.top_p)  # fmt: skip
        logit_f = full.gather(1, filtered[:, None])[:, 0]
        # Rows without an active filter keep `c`'s token and logit, hence its bits.
        c = _finish(
            c.lse, torch.where(active, filtered, c.new), torch.where(active, logit_f, c.logit),
            None, sampling.targets, seg, c.target_logit,
        )  # fmt: skip
    rows = None
    if full_rows:
        rows = (gl(x) if full is None else full) - c.lse
    return Pick(c.new, c.chosen, c.logprob, rows)


def log_softmax_segmented(
    x: torch.Tensor,
    *,
    gather_partials: Callable[[torch.Tensor], torch.Tensor] | None = None,
    vocab: int | None = None,
    v0: int = 0,
    backend: str = "auto",
) -> torch.Tensor:
    """`x: f32 [S, Vl]` -> `x - lse` f32 `[S, Vl]` with the segmented `lse` (the full row's
    when `gather_partials` collects every segment)."""
    v = x.shape[1] if vocab is None else vocab
    parts = segment_partials(x, v0=v0, vocab=v, backend=backend)
    if gather_partials is not None:
        parts = gather_partials(parts)
    return x - combine_rows(parts, v // vocab_segments(v), backend=backend).lse
