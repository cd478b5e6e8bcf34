"""Cross-package integration: batch invariance through the public API of all four packages.

1. One attention layer assembled by hand from `ds41_cache` (allocator, insert, indices),
   `ds41_indexer` (index keys, paged top-k) and `ds41_attention` (sparse attention with sink):
   a step holding a real prefill chunk (its KV written in the step, before attention), a
   decode row and a padding row gives every row, and every cache byte, bitwise equal to the
   same rows run one per step, and in reversed batch order. On the CPU the torch backend is
   row-wise by construction, so this proves the harness and the references; the interpreter
   variant runs the Triton kernels' code, and the `gpu` tests are the real check of kernels.
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
CONTEXTS = (18, 13)  # tokens already cached per request before the step
# The step: request 0 prefills positions 18..20 (a chunk: its rows attend to each other, so
# their window KV is written in this step, before attention), request 1 decodes position 13,
# and a padding row. Positions 19 and 13 close compressed entries 9 and 6 (ratio 2).
STEP_REQ = (0, 0, 1, -1, 0)
STEP_POS = (18, 19, 13, 0, 20)


def _layer(device: torch.device, backend: str):  # type: ignore[no-untyped-def]
    """The cached context, and the step's data (generated up front, fixed by the seed)."""
    g = torch.Generator().manual_seed(7)
    freqs = rope_freqs(RopeConfig(R, 10000.0)).to(device)
    win_alloc = PageAllocator(32, PAGE, 2, 16, device)
    comp_alloc = PageAllocator(32, PAGE, 2, 16, device)
    window = PagedCache.allocate("mxfp8", D, PAGE, 32, page_stride=1024, device=device)
    comp = PagedCache.allocate("nvfp4", D, PAGE, 32, device=device)
    keys = PagedCache.allocate("mxfp4", DI, PAGE, 32, device=device)
    state = dict(window=window, comp=comp, keys=keys, win_alloc=win_alloc,
                 comp_alloc=comp_alloc, freqs=freqs)  # fmt: skip
    for r, n in enumerate(CONTEXTS):
        win_alloc.ensure(r, n + 4)
        comp_alloc.ensure(r, (n + 4) // RATIO)
        pos = torch.arange(n, device=device)
        kv = (torch.randn(n, D, generator=g) * 2).to(device, torch.bfloat16)
        ne = n // RATIO
        lat = torch.randn(ne, D, generator=g).to(device, torch.bfloat16)
        kproj = torch.randn(ne, DI, generator=g).to(device, torch.bfloat16)
        _write(state, [r] * n, pos.tolist(), kv, lat, kproj, backend)
    t = len(STEP_REQ)
    req = torch.tensor(STEP_REQ, dtype=torch.int32, device=device)
    pos = torch.tensor(STEP_POS, dtype=torch.int32, device=device)
    kv = (torch.randn(t, D, generator=g) * 2).to(device, torch.bfloat16)
    # One compressed latent and index-key projection per row; used by the rows that close a
    # group (odd positions), as the compressor would emit them.
    lat = torch.randn(t, D, generator=g).to(device, torch.bfloat16)
    kproj = torch.randn(t, DI, generator=g).to(device, torch.bfloat16)
    q = (torch.randn(t, H, D, generator=g)).to(device, torch.bfloat16)
    qi = (torch.randn(t, HI, DI, generator=g)).to(device, torch.bfloat16)
    w = torch.rand(t, HI, generator=g).to(device)
    sink = torch.randn(H, generator=g).to(device)
    return state, (req, pos, kv, lat, kproj, q, qi, w), sink


def _write(state, reqs, positions, kv, lat, kproj, backend):  # type: ignore[no-untyped-def]
    """Write rows' window KV, and the compressed entry + index key of each row that closes a
    group (a whole cached context passes one latent per entry instead)."""
    device = kv.device
    keep = [i for i, r in enumerate(reqs) if r >= 0]
    if not keep:
        return
    freqs = state["freqs"]
    for r in sorted({reqs[i] for i in keep}):
        rows = [i for i in keep if reqs[i] == r]
        pos = torch.tensor([positions[i] for i in rows], device=device)
        idx = torch.tensor(rows, device=device)
        insert(state["window"], kv[idx], state["win_alloc"].slots(r, pos), positions=pos,
               freqs=freqs, backend=backend)  # fmt: skip
        if len(lat) == len(kv):  # the step: entries closed by odd positions
            close = [i for i in rows if positions[i] % RATIO == RATIO - 1]
            ent = torch.tensor([(positions[i] + 1) // RATIO - 1 for i in close], device=device)
            sel = torch.tensor(close, dtype=torch.int64, device=device)
        else:  # a cached context: entries 0 .. n // RATIO - 1
            ent = torch.arange(len(lat), device=device)
            sel = ent
        if len(ent) == 0:
            continue
        slots = state["comp_alloc"].slots(r, ent)
        insert(state["comp"], lat[sel], slots, positions=ent * RATIO, freqs=freqs,
               backend=backend)  # fmt: skip
        write_index_keys(kproj[sel], torch.ones(DI, device=device), 1e-6, ent * RATIO, freqs,
                         state["keys"], slots, backend=backend)  # fmt: skip


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


def _step(state, step, sink, order, backend):  # type: ignore[no-untyped-def]
    """The step's rows `order` (in that order): write their KV, one call per cache, then
    compute them; results in `order`'s order."""
    req, pos, kv, lat, kproj, q, qi, w = (x[order] for x in step)
    _write(state, req.tolist(), pos.tolist(), kv, lat, kproj, backend)
    return _run(state, req, pos, q, qi, w, sink, backend)


def _cache_bytes(state):  # type: ignore[no-untyped-def]
    return [state[k].storage.clone() for k in ("window", "comp", "keys")]


def _check_rows_alone(device: torch.device, backend: str) -> None:
    # Batched: the prefill chunk, the decode row and a padding row in one step.
    state, step, sink = _layer(device, backend)
    req = step[0]
    t = len(req)
    topk, out, lse = _step(state, step, sink, torch.arange(t, device=device), backend)
    valid = req >= 0
    assert (topk[valid] >= 0).any(), "some compressed entries must be selected"
    assert torch.isfinite(out[valid].float()).all() and out[valid].abs().sum() > 0
    # The chunk's later rows see the KV written in this very step (a real prefill).
    assert not torch.equal(out[0], out[1]) and not torch.equal(out[1], out[4])
    batched_bytes = _cache_bytes(state)

    # Alone: a fresh cache, every row its own step in position order (the chunk as decode rows).
    state1, step1, sink1 = _layer(device, backend)
    order = sorted((int(p), i) for i, p in enumerate(step1[1].tolist()) if req[i] >= 0)
    for _, i in order:
        sl = torch.tensor([i], device=device)
        t1, o1, l1 = _step(state1, step1, sink1, sl, backend)
        assert torch.equal(t1, topk[i : i + 1]), f"row {i}: top-k depends on the batch"
        assert torch.equal(o1, out[i : i + 1]), f"row {i}: attention output depends on the batch"
        assert torch.equal(l1, lse[i : i + 1]), f"row {i}: lse depends on the batch"
    for name, a, b in zip(("window", "comp", "keys"), batched_bytes, _cache_bytes(state1),
                          strict=True):  # fmt: skip
        assert torch.equal(a, b), f"{name} cache bytes depend on how the step was batched"

    # Reversed batch order: same rows, same bytes.
    state2, step2, sink2 = _layer(device, backend)
    rev = torch.arange(t - 1, -1, -1, device=device)
    t2, o2, l2 = _step(state2, step2, sink2, rev, backend)
    assert torch.equal(t2[rev], topk) and torch.equal(o2[rev][valid], out[valid])
    assert torch.equal(l2[rev][valid], lse[valid])
    for a, b in zip(batched_bytes, _cache_bytes(state2), strict=True):
        assert torch.equal(a, b)


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
