"""Scheduler, prefix cache and engine logic against a small fake model (fast, no kernels).

The fake keeps a real paged window cache (page accounting, refcounts, trimming, prefix
export/import) holding token ids, and its log-probs depend on the window it reads back from the
pages, so a scheduling bug (a missing reservation, a wrong position, a stale page) changes or
breaks the output. The real model is exercised in test_engine_model.py.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import pytest
import torch

from ds41_cache.allocator import CacheFullError
from ds41_runner.engine import (
    Engine,
    PrefixCache,
    Request,
    SamplingParams,
    Scheduler,
    StepRunner,
    chain_hashes,
    default_buckets,
)
from ds41_runner.engine.step_io import StepLayout

VOCAB = 50
WINDOW = 5


@dataclass
class FakePrefix:
    num_tokens: int
    pages: list[int]
    released: bool = False


class FakeKV:
    def __init__(self, num_pages: int, page_size: int, max_requests: int) -> None:
        self.num_pages = num_pages
        self.page_size = page_size
        self.max_requests = max_requests
        self.max_tokens_per_request = 64
        self.device = torch.device("cpu")
        self.refs = [0] * num_pages
        self.data: list[list[int | None]] = [[None] * page_size for _ in range(num_pages)]
        self.table: list[list[int]] = [[] for _ in range(max_requests)]
        self.reserve_log: list[tuple[int, int]] = []

    def _alloc(self) -> int:
        page = self.refs.index(0)
        self.refs[page] = 1
        self.data[page] = [None] * self.page_size
        return page

    def num_free_pages(self) -> int:
        return self.refs.count(0)

    def reserve(self, req: int, num_tokens: int) -> None:
        need = -(-num_tokens // self.page_size) - len(self.table[req])
        if need > self.num_free_pages():
            raise CacheFullError(req, need, self.num_free_pages(), self.page_size)
        for _ in range(max(0, need)):
            self.table[req].append(self._alloc())
        self.reserve_log.append((req, num_tokens))

    def trim(self, req: int, next_pos: int) -> None:
        lo = next_pos - WINDOW + 1
        for i in range(max(0, lo) // self.page_size):
            if self.table[req][i] >= 0:
                self.refs[self.table[req][i]] -= 1
                self.table[req][i] = -1

    def free(self, req: int) -> None:
        for p in self.table[req]:
            if p >= 0:
                self.refs[p] -= 1
        self.table[req] = []

    def export_prefix(self, req: int, num_tokens: int) -> FakePrefix:
        # Like KVState: only the pages of the last window are needed (and must be held).
        assert num_tokens % self.page_size == 0
        n = num_tokens // self.page_size
        first = max(0, num_tokens - WINDOW + 1) // self.page_size
        pages = self.table[req][:n]
        assert len(pages) == n and all(p >= 0 for p in pages[first:]), "window pages missing"
        held = [-1] * first + pages[first:]
        for p in held[first:]:
            self.refs[p] += 1
        return FakePrefix(num_tokens, held)

    def export_prefixes(self, req: int, counts: list[int]) -> list[FakePrefix]:
        return [self.export_prefix(req, n) for n in counts]

    def import_prefix(self, handle: FakePrefix, dst_req: int) -> None:
        assert not handle.released and not self.table[dst_req]
        for p in handle.pages:
            if p >= 0:
                self.refs[p] += 1
        self.table[dst_req] = list(handle.pages)

    def release_prefix(self, handle: FakePrefix) -> None:
        assert not handle.released
        for p in handle.pages:
            if p >= 0:
                self.refs[p] -= 1
        handle.released = True

    def bytes_per_token(self, context_len: int) -> float:
        return 1.0

    def flush(self) -> None:  # the fake's block table is host-side only
        pass

    # cache access for the fake model
    def write(self, req: int, pos: int, token: int) -> None:
        page = self.table[req][pos // self.page_size]
        assert page >= 0 and self.refs[page] >= 1, f"write to a missing page: req {req} pos {pos}"
        self.data[page][pos % self.page_size] = token

    def read(self, req: int, pos: int) -> int:
        page = self.table[req][pos // self.page_size]
        assert page >= 0, f"read of a trimmed page: req {req} pos {pos}"
        value = self.data[page][pos % self.page_size]
        assert value is not None, f"read of an unwritten slot: req {req} pos {pos}"
        return value


class FakeModel:
    """Log-probs of row (r, p) = f(tokens at window positions p-W+1..p read from the cache)."""

    def __init__(self) -> None:
        self.calls: list[int] = []

    def forward(
        self, tokens: torch.Tensor, req_idx: torch.Tensor, pos: torch.Tensor, kv: FakeKV,
        *, validate: bool = True, logit_rows: torch.Tensor | None = None,
        nonfinite_stage: torch.Tensor | None = None,
    ) -> torch.Tensor:  # fmt: skip
        self.calls.append(len(tokens))
        if nonfinite_stage is not None:
            nonfinite_stage.fill_(-1)
        out = torch.empty(len(tokens), VOCAB, dtype=torch.float32)
        last: dict[int, int] = {}
        for t, (tok, r, p) in enumerate(
            zip(tokens.tolist(), req_idx.tolist(), pos.tolist(), strict=True)
        ):
            if r < 0:
                out[t] = 0
                continue
            assert last.get(r, p - 1) == p - 1, "a request's rows must be consecutive"
            last[r] = p
            kv.write(r, p, tok)
            window = [kv.read(r, q) for q in range(max(0, p - WINDOW + 1), p + 1)]
            digest = hashlib.sha256(repr((p, window)).encode()).digest()
            g = torch.Generator().manual_seed(int.from_bytes(digest[:8], "little"))
            out[t] = torch.log_softmax(torch.randn(VOCAB, generator=g) * 3, dim=0)
        return out if logit_rows is None else out[logit_rows]


def make_engine(num_pages: int = 64, page_size: int = 4, chunk_size: int = 8, **kw) -> Engine:
    kv = FakeKV(num_pages, page_size, max_requests=kw.pop("max_requests", 4))
    return Engine(FakeModel(), kv, vocab_size=VOCAB, max_tokens=64, chunk_size=chunk_size, **kw)


def prompts_for(seed: int, lens: list[int]) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, VOCAB, (n,), generator=g).tolist() for n in lens]


PROMPTS = prompts_for(0, [7, 3, 12, 5])
SEEDS = [11, 12, 13, 14]
TEMPS = [0.0, 0.9, 0.0, 1.3]


def alone(prompts=PROMPTS, max_new=6):
    out = []
    for i, p in enumerate(prompts):
        eng = make_engine(prefix_cache=False)
        (r,) = eng.generate([p], max_new, seeds=[SEEDS[i]], temperature=TEMPS[i])
        out.append(r)
    return out


def same(a, b) -> None:
    assert [r.tokens for r in a] == [r.tokens for r in b]
    assert [r.logprobs for r in a] == [r.logprobs for r in b]


@pytest.mark.parametrize("chunk_size", [1, 3, 8, 64])
@pytest.mark.parametrize("prefix", [False, True])
def test_batched_equals_alone(chunk_size: int, prefix: bool) -> None:
    ref = alone()
    eng = make_engine(chunk_size=chunk_size, prefix_cache=prefix)
    res = eng.generate(PROMPTS, 6, seeds=SEEDS, arrivals=[0, 1, 1, 5], temperature=TEMPS)
    same(res, ref)
    assert all(len(r.tokens) == 6 and r.ok for r in res)
    assert eng.kv.num_free_pages() + sum(1 for x in eng.kv.refs if x) == eng.kv.num_pages
    eng.clear_prefix_cache()
    assert eng.kv.num_free_pages() == eng.kv.num_pages, "pages leaked"


def test_steps_mix_prefill_and_decode_in_one_forward() -> None:
    eng = make_engine(chunk_size=6)
    eng.generate(PROMPTS, 4, seeds=SEEDS, arrivals=[0, 0, 2, 3])
    assert max(eng.model.calls) <= 6
    assert len(eng.model.calls) == eng.stats.steps
    assert any(not r.decode_only and r.requests > 1 for r in eng.stats.records)


@pytest.mark.parametrize(("num_pages", "chunk_size"), [(3, 4), (3, 8), (4, 4)])
def test_preemption_keeps_results(num_pages: int, chunk_size: int) -> None:
    ref = alone()
    # A handful of 4-token pages: the four requests cannot all hold their windows at once.
    eng = make_engine(num_pages=num_pages, chunk_size=chunk_size, prefix_cache=False)
    res = eng.generate(PROMPTS, 6, seeds=SEEDS, temperature=TEMPS)
    assert eng.stats.preemptions > 0
    assert sum(r.preemptions for r in res) == eng.stats.preemptions
    same(res, ref)
    assert eng.kv.num_free_pages() == num_pages


def test_request_too_big_for_cache_fails_alone() -> None:
    # One page of 4 tokens: a window of 5 positions never fits, a 3-token request does.
    eng = make_engine(num_pages=1, chunk_size=64, prefix_cache=False)
    long, short = prompts_for(3, [20, 2])
    res = eng.generate([long, short], [4, 2], seeds=[1, 2])
    assert res[0].error is not None and "request 0" in res[0].error
    assert "too small" in res[0].error
    ref = make_engine(prefix_cache=False).generate([short], 2, seeds=[2])[0]
    assert res[1].ok and res[1].tokens == ref.tokens and res[1].logprobs == ref.logprobs


def test_bad_requests_are_rejected_by_name() -> None:
    eng = make_engine()
    good = PROMPTS[0]
    res = eng.generate(
        [[], [1, VOCAB], good, [-1], good, [1] * 70], [3, 3, 3, 3, 0, 3], seeds=[0] * 6
    )
    assert "request 0" in res[0].error and "empty" in res[0].error
    assert "request 1" in res[1].error and "vocabulary" in res[1].error
    assert res[2].ok and len(res[2].tokens) == 3
    assert "request 3" in res[3].error
    assert "request 4" in res[4].error and "max_new_tokens" in res[4].error
    assert "request 5" in res[5].error and "maximum" in res[5].error
    with pytest.raises(ValueError, match="seeds"):
        eng.generate([good], 3, seeds=[1, 2])
    with pytest.raises(ValueError, match="arrivals"):
        eng.generate([good], 3, arrivals=[-1])


def test_prefix_cache_hit_matches_cold() -> None:
    shared = prompts_for(5, [9])[0]
    a, b = (shared + s for s in prompts_for(6, [3, 5]))
    cold = make_engine(prefix_cache=False).generate([b], 5, seeds=[3])[0]
    eng = make_engine(page_size=4)
    eng.generate([a], 5, seeds=[1])
    hit = eng.generate([b], 5, seeds=[3])[0]
    assert hit.prefix_hit_tokens == 8  # two full pages of the shared 9 tokens
    assert hit.tokens == cold.tokens and hit.logprobs == cold.logprobs


def test_score_equals_generate() -> None:
    eng = make_engine()
    res = eng.generate(PROMPTS, 5, seeds=SEEDS, temperature=TEMPS)
    scored = eng.score(
        [p + r.tokens for p, r in zip(PROMPTS, res, strict=True)], [len(p) for p in PROMPTS]
    )
    assert scored == [r.logprobs for r in res]
    with pytest.raises(ValueError, match="sequence 1"):
        eng.score([PROMPTS[0], [VOCAB]], [1, 1])
    with pytest.raises(ValueError, match="sequence 0"):
        eng.score([PROMPTS[0]], [0])


def test_chain_hashes_and_lru() -> None:
    t = list(range(12))
    h = chain_hashes(t, 4, 3)
    assert len(set(h)) == 3
    assert chain_hashes([0, 1, 2, 3, 9, 9, 9, 9], 4, 2)[0] == h[0]
    assert chain_hashes([0, 1, 2, 3, 9, 9, 9, 9], 4, 2)[1] != h[1]
    kv = FakeKV(16, 4, 2)
    kv.reserve(0, 12)
    pc = PrefixCache(kv, 4, max_entries=2)
    pc.offer(0, t, 0, 3)
    # The entry ending at page 0 was evicted; those ending at pages 1 and 2 hold the pages of
    # their last window (page 1, resp. page 2) besides the request's own reference.
    assert len(pc) == 2 and [kv.refs[p] for p in kv.table[0]] == [1, 2, 2]
    assert pc.lookup(t, 11).num_tokens == 8
    assert pc.lookup(t, 7) is None
    pc.clear()
    kv.free(0)
    assert kv.num_free_pages() == 16


def test_scheduler_budget_and_order() -> None:
    kv = FakeKV(64, 4, 4)
    s = Scheduler(kv, chunk_size=5, max_requests=4, page_size=4)
    r0, r1, r2 = (Request(i, [1] * n, SamplingParams(2)) for i, n in enumerate([7, 2, 3]))
    s.add([r0, r1])
    plan = s.schedule(0)
    assert [(r.index, n) for r, n in plan.entries] == [(0, 5)]
    s.complete(plan)
    s.add([r2])  # arrives now: after the running requests and the earlier arrival
    plan = s.schedule(1)
    assert [(r.index, n) for r, n in plan.entries] == [(0, 2), (1, 2), (2, 1)]


def test_graph_buckets_and_layouts() -> None:
    assert default_buckets(1024) == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 768, 1024]
    assert default_buckets(6) == [1, 2, 4, 6]
    assert default_buckets(10_000)[-1] == 2048
    with pytest.raises(ValueError, match="CUDA"):
        StepRunner(FakeModel(), FakeKV(4, 4, 2), torch.device("cpu"), 2, [1, 2])  # type: ignore[arg-type]
    r = StepRunner(FakeModel(), FakeKV(4, 4, 2), torch.device("cpu"), 2, [1, 4, 8],  # type: ignore[arg-type]
                   emulate_graphs=True)  # fmt: skip
    # A step takes the smallest bucket that holds its rows and (<= one per request) logit
    # rows; more logit rows (score requests) or more rows than the largest bucket: eager.
    assert r.plan_layout(3, 2) == (StepLayout(4, 2), 4)
    assert r.plan_layout(3, 3) == (StepLayout(3, 3), None)
    assert r.plan_layout(9, 1) == (StepLayout(9, 1), None)
    eng = make_engine(graph="cuda_graph")  # CPU caches: every step runs eagerly
    assert eng.graphs is None
    res = eng.generate(PROMPTS[:2], 3, seeds=SEEDS[:2])
    assert all(r.ok for r in res) and eng.stats.graph_replays == 0


@pytest.mark.parametrize("overlap", [False, True])
def test_emulated_step_graphs_with_padding_equal_alone(overlap: bool) -> None:
    # Whole-step "graphs" on the CPU: static padded buffers, padding rows and padding logit
    # rows, replayed eagerly. Mixed prefill + decode steps must reproduce the alone runs.
    ref = alone()
    eng = make_engine(chunk_size=8, graph="cuda_graph", graph_batch_sizes=[2, 4, 8],
                      emulate_graphs=True, overlap=overlap)  # fmt: skip
    res = eng.generate(PROMPTS, 6, seeds=SEEDS, arrivals=[0, 1, 1, 5], temperature=TEMPS)
    same(res, ref)
    assert eng.stats.graph_replays == eng.stats.steps
    assert any(not r.decode_only for r in eng.stats.records if r.graph)


def test_prefix_cache_needs_pages_aligned_to_compressor_groups() -> None:
    with pytest.raises(ValueError, match="page_size must be a multiple"):
        make_engine(page_size=3, compress_ratios=(0, 2, 1))
    make_engine(page_size=3, compress_ratios=(0, 2, 1), prefix_cache=False)


@pytest.mark.parametrize("seed", range(6))
def test_random_workloads_match_alone(seed: int) -> None:
    # Random prompts (some sharing prefixes), arrivals, budgets and cache sizes: every
    # combination of chunking, preemption and prefix hits must reproduce the alone runs.
    g = torch.Generator().manual_seed(100 + seed)
    n = 5
    shared = torch.randint(0, VOCAB, (9,), generator=g).tolist()
    prompts = []
    for i in range(n):
        tail = torch.randint(0, VOCAB, (int(torch.randint(1, 14, (1,), generator=g)),), generator=g)
        prompts.append((shared if i % 2 else []) + tail.tolist())
    new = [int(x) for x in torch.randint(1, 7, (n,), generator=g)]
    arrivals = [int(x) for x in torch.randint(0, 8, (n,), generator=g)]
    seeds = list(range(n))
    temps = [0.0, 0.7, 1.1, 0.0, 0.4]
    ref = []
    for i in range(n):
        eng = make_engine(prefix_cache=False)
        ref.append(eng.generate([prompts[i]], new[i], seeds=[i], temperature=temps[i])[0])
    eng = make_engine(
        num_pages=int(torch.randint(4, 12, (1,), generator=g)),
        chunk_size=int(torch.randint(1, 12, (1,), generator=g)),
        prefix_cache=bool(seed % 2),
    )
    res = eng.generate(prompts, new, seeds=seeds, arrivals=arrivals, temperature=temps)
    same(res, ref)
    eng.clear_prefix_cache()
    assert eng.kv.num_free_pages() == eng.kv.num_pages
