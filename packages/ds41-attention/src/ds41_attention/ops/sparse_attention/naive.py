"""Torch implementations of SPEC section 8: the float64 reference and the bf16-faithful path.

`reference_sparse_attention` is the independent oracle of the tests: every entry is decoded
with the cache package's torch gather, the softmax runs in float64 over all rows at once.
`torch_sparse_attention` is what the runner uses on CPU: entries decoded to bf16, fp32 scores
and softmax, one row at a time so that a row's bits never depend on the other rows.
"""

from __future__ import annotations

import math

import torch

from ds41_cache import PagedCache, empty

from .records import gather_decode


def _entries(
    cache: PagedCache, slots: torch.Tensor, lens: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Decoded entries f64 [T, N, D] and their validity bool [T, N] (0 <= slot < num_slots,
    j < len; an out-of-range slot counts as -1, as in the kernels)."""
    t, n = slots.shape
    ok = (slots >= 0) & (slots < cache.num_slots)
    kv = gather_decode(cache, torch.where(ok, slots, -1)).to(torch.float64)
    kv = kv.reshape(t, n, cache.dim)
    j = torch.arange(n, device=slots.device)
    valid = ok & (j[None, :] < lens[:, None].long())
    return kv, valid


def reference_sparse_attention(
    q: torch.Tensor,
    window_cache: PagedCache,
    swa_slots: torch.Tensor,
    swa_lens: torch.Tensor,
    comp_cache: PagedCache | None,
    comp_slots: torch.Tensor | None,
    comp_lens: torch.Tensor | None,
    sink: torch.Tensor,
    scale: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Float64 oracle of SPEC section 8.

    q: [T, H, D] bf16; slots int32 [T, W] / [T, K]; lens int32 [T]; sink: [H] f32.
    Returns (out f64 [T, H, D], lse f64 [T, H]); rows without a valid entry give 0 / -inf.
    No input validation: call it with inputs `sparse_attention` accepts.
    """
    kv, valid = _entries(window_cache, swa_slots, swa_lens)
    if comp_cache is not None and comp_slots is not None and comp_lens is not None:
        ckv, cvalid = _entries(comp_cache, comp_slots, comp_lens)
        kv = torch.cat([kv, ckv], dim=1)
        valid = torch.cat([valid, cvalid], dim=1)
    s = torch.einsum("thd,tnd->thn", q.to(torch.float64), kv) * scale
    s = s.masked_fill(~valid[:, None, :], -math.inf)
    m = s.amax(dim=-1)
    any_valid = valid.any(dim=-1)[:, None]
    m_safe = torch.where(any_valid, m, torch.zeros_like(m))
    p = torch.exp(s - m_safe[..., None])
    l = p.sum(dim=-1)
    sink64 = sink.to(torch.float64)[None, :]
    denom = l + torch.exp(sink64 - m_safe)
    out = torch.einsum("thn,tnd->thd", p, kv) / denom[..., None]
    out = torch.where(any_valid[..., None], out, torch.zeros_like(out))
    lse = torch.where(any_valid, m_safe + torch.log(l), torch.full_like(m, -math.inf))
    return out, lse


def _decoded(
    cache: PagedCache, slots: torch.Tensor, lens: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """bf16 [T, N, D] entries of every slot (decoding is elementwise and exact, so doing it
    for all rows at once changes no row's bits) and their validity bool [T, N]; a slot
    outside [0, num_slots) counts as -1 (skipped), as in the kernels."""
    t, n = slots.shape
    ok = (slots >= 0) & (slots < cache.num_slots)
    kv = gather_decode(cache, torch.where(ok, slots, -1).reshape(-1)).view(t, n, cache.dim)
    j = torch.arange(n, device=slots.device)
    return kv, ok & (j[None, :] < lens[:, None].long())


def torch_sparse_attention(
    q: torch.Tensor,
    window_cache: PagedCache,
    swa_slots: torch.Tensor,
    swa_lens: torch.Tensor,
    comp_cache: PagedCache | None,
    comp_slots: torch.Tensor | None,
    comp_lens: torch.Tensor | None,
    sink: torch.Tensor,
    scale: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Batch-invariant torch path: bf16 entries, fp32 scores/softmax, one row at a time.

    Same arguments and results as `sparse_attention` (out bf16 [T, H, D], lse f32 [T, H]).
    Every op of a row has shapes that depend on that row alone (its valid entry count).
    """
    t_rows, h, d = q.shape
    out = empty((t_rows, h, d), torch.bfloat16, q.device)
    lse = empty((t_rows, h), torch.float32, q.device)
    sink32 = sink.to(torch.float32)
    kv_w, ok_w = _decoded(window_cache, swa_slots, swa_lens)
    comp = None
    if comp_cache is not None and comp_slots is not None and comp_lens is not None:
        comp = _decoded(comp_cache, comp_slots, comp_lens)
    for t in range(t_rows):
        parts = [kv_w[t][ok_w[t]]]
        if comp is not None:
            parts.append(comp[0][t][comp[1][t]])
        kv = torch.cat(parts, dim=0).to(torch.float32)
        if kv.shape[0] == 0:
            out[t].zero_()
            lse[t].fill_(-math.inf)
            continue
        s = torch.matmul(q[t].to(torch.float32), kv.T) * scale
        m = s.amax(dim=-1)
        p = torch.exp(s - m[:, None])
        l = p.sum(dim=-1)
        o = torch.matmul(p, kv) / (l + torch.exp(sink32 - m))[:, None]
        out[t] = o.to(torch.bfloat16)
        lse[t] = m + torch.log(l)
    return out, lse
