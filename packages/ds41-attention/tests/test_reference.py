"""The float64 oracle itself, checked against hand-written formulas on tiny inputs."""

from __future__ import annotations

import math

import torch
from attn_helpers import random_cache, random_q, random_slots

from ds41_attention import reference_sparse_attention
from ds41_attention.ops.sparse_attention.records import gather_decode


def _bf16_cache(rows: torch.Tensor, page_size: int = 4):
    from ds41_cache import PagedCache

    n, d = rows.shape
    cache = PagedCache.allocate("bf16", d, page_size, -(-n // page_size), page_stride=None)
    data = cache.data_view().reshape(-1, 2 * d)
    data[:n] = rows.to(torch.bfloat16).view(torch.uint8)
    return cache


def test_two_entries_by_hand():
    kv = torch.tensor([[1.0, 2.0] + [0.0] * 30, [-1.0, 0.5] + [0.0] * 30])
    cache = _bf16_cache(kv)
    q = torch.zeros(1, 1, 32)
    q[0, 0, 0], q[0, 0, 1] = 0.5, 1.0
    slots = torch.tensor([[1, 0, 3]], dtype=torch.int32)
    lens = torch.tensor([2], dtype=torch.int32)
    sink = torch.tensor([0.25])
    out, lse = reference_sparse_attention(
        q.to(torch.bfloat16), cache, slots, lens, None, None, None, sink, 2.0
    )
    s = [2.0 * (0.5 * -1.0 + 1.0 * 0.5), 2.0 * (0.5 * 1.0 + 1.0 * 2.0)]  # slots 1, 0
    m = max(s)
    e = [math.exp(x - m) for x in s]
    den = sum(e) + math.exp(0.25 - m)
    assert math.isclose(float(lse), m + math.log(sum(e)), rel_tol=1e-12)
    for c, vals in ((0, (-1.0, 1.0)), (1, (0.5, 2.0))):
        want = (e[0] * vals[0] + e[1] * vals[1]) / den
        assert math.isclose(float(out[0, 0, c]), want, rel_tol=1e-12)
    assert float(out[0, 0, 2:].abs().max()) == 0.0


def test_empty_row_and_infinite_sinks():
    g = torch.Generator().manual_seed(1)
    cache = random_cache("mxfp8", 64, 16, 2, g)
    q = random_q(2, 2, 64, g)
    slots, _ = random_slots(2, 8, cache.num_slots, g, neg_frac=0.0)
    lens = torch.tensor([0, 8], dtype=torch.int32)
    sink = torch.tensor([math.inf, -math.inf])
    out, lse = reference_sparse_attention(q, cache, slots, lens, None, None, None, sink, 0.125)
    assert (out[0] == 0).all() and (lse[0] == -math.inf).all()
    assert (out[1, 0] == 0).all()  # sink = +inf takes all the mass
    kv = gather_decode(cache, slots[1].long()).double()
    p = torch.softmax(q[1, 1].double() @ kv.T * 0.125, 0)
    assert torch.allclose(out[1, 1], p @ kv, rtol=1e-10, atol=1e-12)
