"""Engine features with the real tiny model (CPU, torch backend): prefix cache, preemption,
every kv_dtype, bad input. Results are compared bitwise (full log-prob rows) with cold, alone
runs."""

from __future__ import annotations

import pytest
import torch

import ds41_runner
from ds41_runner import Engine, Result

BASE = [
    "device=cpu",
    "backend=torch",
    "workload=tiny",
    "page_size=4",
    "num_pages=96",
    "max_requests=4",
    "max_tokens_per_request=32",
]
NEW = 3


def make(*overrides: str, **kw: object) -> Engine:
    return Engine.from_config(ds41_runner.compose(BASE + list(overrides)), keep_rows=True, **kw)


def rand_tokens(seed: int, n: int, vocab: int = 512) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (n,), generator=g).tolist()


def assert_same(a: Result, b: Result) -> None:
    assert a.ok and b.ok, (a.error, b.error)
    assert a.tokens == b.tokens and a.logprobs == b.logprobs
    assert a.rows is not None and b.rows is not None and torch.equal(a.rows, b.rows)


@pytest.fixture(scope="module")
def cold() -> Engine:
    return make("prefix_cache=false")


def test_prefix_cache_hit_equals_cold(cold: Engine) -> None:
    shared = rand_tokens(1, 10)
    a = shared + rand_tokens(2, 3)
    b = shared + rand_tokens(3, 5)
    ref_b = cold.generate([b], NEW, seeds=[9], temperature=0.9)[0]
    eng = make("prefix_cache=true", "chunk_size=5")
    # b arrives after a's prompt pages are cached; 8 tokens (2 pages of 4) are shared.
    res = eng.generate([a, b], NEW, seeds=[8, 9], arrivals=[0, 4], temperature=[0.0, 0.9])
    assert res[1].prefix_hit_tokens == 8
    assert_same(res[1], ref_b)
    # A later call hits too (the cache persists across calls) and still matches.
    again = eng.generate([b], NEW, seeds=[9], temperature=0.9)[0]
    assert again.prefix_hit_tokens >= 8
    assert_same(again, ref_b)
    eng.clear_prefix_cache()
    assert eng.kv.num_free_pages() == eng.kv.num_pages


def test_preemption_recomputes_identically(cold: Engine) -> None:
    prompts = [rand_tokens(10 + i, n) for i, n in enumerate((9, 4, 13))]
    seeds, temps = [5, 6, 7], [0.0, 1.0, 0.7]
    ref = [cold.generate([p], 4, seeds=[s], temperature=t)[0]
           for p, s, t in zip(prompts, seeds, temps, strict=True)]  # fmt: skip
    eng = make("num_pages=6", "chunk_size=8", "prefix_cache=false")
    res = eng.generate(prompts, 4, seeds=seeds, temperature=temps)
    assert eng.stats.preemptions >= 1
    for r, a in zip(res, ref, strict=True):
        assert_same(r, a)
    assert eng.kv.num_free_pages() == 6


@pytest.mark.parametrize("kv_dtype", ["bf16", "fp8_ds_mla", "nvfp4_ds_mla"])
def test_every_kv_dtype_batched_equals_alone_and_score(kv_dtype: str) -> None:
    eng = make(f"kv_dtype={kv_dtype}", "chunk_size=3", "prefix_cache=false")
    prompts = [rand_tokens(20, 7), rand_tokens(21, 5)]
    res = eng.generate(prompts, NEW, seeds=[1, 2], arrivals=[0, 1], temperature=[0.0, 0.8])
    eng.chunk_size = 64
    for i, p in enumerate(prompts):
        (a,) = eng.generate([p], NEW, seeds=[i + 1], temperature=[0.0, 0.8][i])
        assert_same(res[i], a)
    assert eng.score([p + r.tokens for p, r in zip(prompts, res, strict=True)], [7, 5]) == [
        r.logprobs for r in res
    ]
    # The cache format matters: rows differ from the bf16 run (guards against a no-op dtype).
    if kv_dtype != "bf16":
        ref = make("kv_dtype=bf16", "prefix_cache=false")
        (b,) = ref.generate([prompts[0]], NEW, seeds=[1])
        assert not torch.equal(b.rows, res[0].rows)


def test_bad_input_names_the_request(cold: Engine) -> None:
    good = rand_tokens(30, 5)
    ref = cold.generate([good], NEW, seeds=[4])[0]
    res = cold.generate(
        [[], good, [3, 512], [1] * 40, good], [NEW, NEW, NEW, NEW, 0], seeds=[0, 4, 0, 0, 0]
    )
    assert "request 0" in res[0].error and "empty" in res[0].error
    assert_same(res[1], ref)
    assert "request 2" in res[2].error and "vocabulary" in res[2].error
    assert "request 3" in res[3].error and "longer than the model maximum" in res[3].error
    assert "request 4" in res[4].error and "max_new_tokens" in res[4].error
    with pytest.raises(ValueError, match="sequence 0"):
        cold.score([[1, 600]], [1])


def test_cache_too_small_for_one_request() -> None:
    eng = make("num_pages=2", "chunk_size=64", "prefix_cache=false")
    big, small = rand_tokens(40, 20), rand_tokens(41, 3)
    res = eng.generate([big, small], 2, seeds=[0, 1])
    assert res[0].error is not None and "request 0" in res[0].error and "too small" in res[0].error
    assert res[1].ok and len(res[1].tokens) == 2
    assert eng.kv.num_free_pages() == 2


@pytest.mark.parametrize("overlap", [False, True])
def test_padded_step_graphs_equal_eager(cold: Engine, overlap: bool) -> None:
    # The whole-step CUDA-graph path on the CPU: static buffers sized by bucket, padding rows
    # (request -1) and padding logit rows, the step body "replayed" eagerly. Mixed prefill +
    # decode steps of the real model must equal cold, alone runs bitwise.
    eng = make("prefix_cache=false", "chunk_size=8", graph="cuda_graph", overlap=overlap,
               emulate_graphs=True, graph_batch_sizes=[4, 8])  # fmt: skip
    prompts = [rand_tokens(50 + i, n) for i, n in enumerate((5, 3, 7))]
    res = eng.generate(prompts, 4, seeds=[1, 2, 3], arrivals=[0, 0, 2], temperature=[0, 1, 0.5])
    assert eng.stats.graph_replays == eng.stats.steps
    assert any(r.graph and not r.decode_only and r.requests > 1 for r in eng.stats.records)
    for i, p in enumerate(prompts):
        (a,) = cold.generate([p], 4, seeds=[i + 1], temperature=[0, 1, 0.5][i])
        assert_same(res[i], a)


def test_top_k_top_p_steps_leave_other_rows_alone(cold: Engine) -> None:
    """Steps with a top-k/top-p row run the step graph captured for filters (the full logits
    are read); the other rows of those steps get the bits of steps without (alone runs)."""
    eng = make("prefix_cache=false", "chunk_size=8", graph="cuda_graph", emulate_graphs=True,
               graph_batch_sizes=[4, 8])  # fmt: skip
    prompts = [rand_tokens(60 + i, n) for i, n in enumerate((4, 6, 5, 3))]
    temps, top_k, top_p = [0.0, 1.0, 0.8, 1.2], [2, 0, 5, 0], [1.0, 1.0, 1.0, 0.6]
    res = eng.generate(prompts, 4, seeds=[5, 6, 7, 8], arrivals=[0, 0, 3, 3],
                       temperature=temps, top_k=top_k, top_p=top_p)  # fmt: skip
    runner = eng.graphs
    assert runner is not None and {f for _, f in runner._graphs} == {False, True}
    for i, p in enumerate(prompts):
        (a,) = cold.generate([p], 4, seeds=[5 + i], temperature=temps[i], top_k=top_k[i],
                             top_p=top_p[i])  # fmt: skip
        assert_same(res[i], a)
    # Request 2 (top-k 5) drew among the 5 best of its scaled row at every step.
    rows = res[2].rows
    assert rows is not None
    for t, lp_row in zip(res[2].tokens, rows, strict=True):
        assert t in lp_row.topk(5).indices.tolist()


def test_non_finite_activation_names_request_position_and_layer() -> None:
    """A NaN/inf born in a known block fails exactly the requests it reaches, naming the
    request, the position and the first block whose output was non-finite; the other
    requests are bitwise unchanged and nothing leaks."""
    eng = make("prefix_cache=false")
    ok, bad = rand_tokens(5, 6), rand_tokens(6, 6)
    poison = bad[-1]
    ok = [t for t in ok if t != poison]
    ref = eng.generate([ok], NEW, seeds=[1])[0]
    w = eng.model.weights
    # 1) An inf embedding row: the row of that token is non-finite from the embedding on.
    saved = w.embed[poison].clone()
    w.embed[poison] = float("inf")
    res = eng.generate([ok, bad], NEW, seeds=[1, 2])
    w.embed[poison] = saved
    assert_same(res[0], ref)
    err = str(res[1].error)
    assert not res[1].ok and "request 1" in err and f"position {len(bad) - 1}" in err, err
    assert "first in the embedding" in err, err
    assert eng.kv.num_free_pages() == eng.kv.num_pages
    # 2) A NaN weight of layer 3's MLP: every row turns NaN in that block, not before.
    w2 = w.layers[3].w2
    saved = w2[:, 0].clone()
    w2[:, 0] = float("nan")
    res = eng.generate([ok], NEW, seeds=[1])
    w2[:, 0] = saved
    assert "first in layer 3's MLP block" in str(res[0].error), res[0].error
    # The weights are restored: the same request runs again, bitwise as before.
    assert_same(eng.generate([ok], NEW, seeds=[1])[0], ref)
