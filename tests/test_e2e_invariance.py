"""Cross-package integration: batch invariance through the public API of all four packages.

1. One attention layer assembled by hand from `ds41_cache` (allocator, insert, indices),
   `ds41_indexer` (index keys, paged top-k) and `ds41_attention` (sparse attention with sink):
   every row computed in a mixed batch equals the same row computed alone, bitwise.
2. The whole runner (`ds41_runner.compose` / `Engine`): a batched, chunked run with a prefix
   hit equals each request run alone and `score`.
"""

from __future__ import annotations

import pytest
import torch

from ds41_attention import sparse_attention
from ds41_cache.allocator import PageAllocator
from ds41_cache.indices import sparse_paged_indices
from ds41_cache.insert import insert
from ds41_cache.paged import PagedCache
from ds41_cache.rope import RopeConfig, rope_freqs
from ds41_indexer import paged_index_topk, write_index_keys

D, DI, H, HI, R = 64, 32, 4, 2, 16
WINDOW, RATIO, PAGE, TOPK = 8, 2, 4, 4
CONTEXTS = (21, 14)  # tokens already cached per request


def _layer(device: torch.device, backend: str):  # type: ignore[no-untyped-def]
    g = torch.Generator().manual_seed(7)
    freqs = rope_freqs(RopeConfig(R, 10000.0)).to(device)
    win_alloc = PageAllocator(32, PAGE, 2, 16, device)
    comp_alloc = PageAllocator(32, PAGE, 2, 16, device)
    window = PagedCache.allocate("mxfp8", D, PAGE, 32, page_stride=1024, device=device)
    comp = PagedCache.allocate("nvfp4", D, PAGE, 32, device=device)
    keys = PagedCache.allocate("mxfp4", DI, PAGE, 32, device=device)
    for r, n in enumerate(CONTEXTS):
        win_alloc.ensure(r, n + 4)
        comp_alloc.ensure(r, (n + 4) // RATIO)
        pos = torch.arange(n, device=device)
        kv = (torch.randn(n, D, generator=g) * 2).to(device, torch.bfloat16)
        insert(window, kv, win_alloc.slots(r, pos), positions=pos, freqs=freqs, backend=backend)
        ne = n // RATIO
        ent = torch.arange(ne, device=device)
        lat = (torch.randn(ne, D, generator=g)).to(device, torch.bfloat16)
        insert(comp, lat, comp_alloc.slots(r, ent), positions=ent * RATIO, freqs=freqs,
               backend=backend)  # fmt: skip
        kproj = torch.randn(ne, DI, generator=g).to(device, torch.bfloat16)
        write_index_keys(kproj, torch.ones(DI, device=device), 1e-6, ent * RATIO, freqs, keys,
                         comp_alloc.slots(r, ent), backend=backend)  # fmt: skip
    # Query rows: request 0 at positions 18..20 (a "prefill chunk"), request 1 at 13 ("decode"),
    # one padding row.
    req = torch.tensor([0, 0, 1, -1, 0], dtype=torch.int32, device=device)
    pos = torch.tensor([18, 19, 13, 0, 20], dtype=torch.int32, device=device)
    q = (torch.randn(5, H, D, generator=g)).to(device, torch.bfloat16)
    qi = (torch.randn(5, HI, DI, generator=g)).to(device, torch.bfloat16)
    w = torch.rand(5, HI, generator=g).to(device)
    sink = torch.randn(H, generator=g).to(device)
    state = dict(window=window, comp=comp, keys=keys, win_alloc=win_alloc,
                 comp_alloc=comp_alloc)  # fmt: skip
    return state, req, pos, q, qi, w, sink


def _run(state, req, pos, q, qi, w, sink, backend):  # type: ignore[no-untyped-def]
    topk = paged_index_topk(qi, w, state["keys"], state["comp_alloc"].block_table, req, pos,
                            RATIO, TOPK, backend=backend)  # fmt: skip
    replay = torch.zeros(2, dtype=torch.int32, device=q.device)
    swa, swa_len, cs, cl = sparse_paged_indices(
        req, pos, state["win_alloc"].block_table, WINDOW, replay, topk,
        state["comp_alloc"].block_table, RATIO, swa_page_size=PAGE, comp_page_size=PAGE,
        backend=backend,
    )  # fmt: skip
    out, lse = sparse_attention(q, state["window"], swa, swa_len, state["comp"], cs, cl, sink,
                                D**-0.5, batch_invariant=True, backend=backend)  # fmt: skip
    return topk, out, lse


def _check_rows_alone(device: torch.device, backend: str) -> None:
    state, req, pos, q, qi, w, sink = _layer(device, backend)
    topk, out, lse = _run(state, req, pos, q, qi, w, sink, backend)
    valid = req >= 0
    assert (topk[valid] >= 0).any(), "some compressed entries must be selected"
    assert torch.isfinite(out[valid].float()).all() and out[valid].abs().sum() > 0
    for t in range(len(req)):
        if req[t] < 0:
            continue
        sl = slice(t, t + 1)
        t1, o1, l1 = _run(state, req[sl], pos[sl], q[sl], qi[sl], w[sl], sink, backend)
        assert torch.equal(t1, topk[sl]), f"row {t}: top-k depends on the batch"
        assert torch.equal(o1, out[sl]), f"row {t}: attention output depends on the batch"
        assert torch.equal(l1, lse[sl]), f"row {t}: lse depends on the batch"
    # Reversed batch order: same rows.
    rev = torch.arange(len(req) - 1, -1, -1, device=device)
    t2, o2, l2 = _run(state, req[rev], pos[rev], q[rev], qi[rev], w[rev], sink, backend)
    assert torch.equal(t2[rev], topk) and torch.equal(o2[rev][valid], out[valid])
    assert torch.equal(l2[rev][valid], lse[valid])


def test_layer_rows_batch_invariant_torch() -> None:
    _check_rows_alone(torch.device("cpu"), "torch")


@pytest.mark.interpreter
def test_layer_rows_batch_invariant_triton(device: torch.device) -> None:
    _check_rows_alone(device, "triton")


def test_runner_end_to_end_batched_prefix_hit_equals_alone() -> None:
    import ds41_runner

    cfg = ds41_runner.compose(
        ["device=cpu", "backend=torch", "workload=tiny", "page_size=4", "num_pages=96",
         "max_requests=4", "max_tokens_per_request=32", "chunk_size=5"]
    )  # fmt: skip
    engine = ds41_runner.Engine.from_config(cfg, keep_rows=True)
    g = torch.Generator().manual_seed(99)
    shared = torch.randint(0, 512, (8,), generator=g).tolist()
    prompts = [shared + torch.randint(0, 512, (n,), generator=g).tolist() for n in (3, 6, 1)]
    seeds, temps = [1, 2, 3], [0.0, 0.9, 0.5]
    batched = engine.generate(prompts, 3, seeds=seeds, arrivals=[0, 3, 4], temperature=temps)
    assert sum(r.prefix_hit_tokens for r in batched) >= 8
    for i, p in enumerate(prompts):
        engine.clear_prefix_cache()
        (alone,) = engine.generate([p], 3, seeds=[seeds[i]], temperature=temps[i])
        assert alone.tokens == batched[i].tokens
        assert torch.equal(alone.rows, batched[i].rows), f"request {i}"
    scored = engine.score([p + r.tokens for p, r in zip(prompts, batched, strict=True)],
                          [len(p) for p in prompts])  # fmt: skip
    assert scored == [r.logprobs for r in batched]
