"""Batch invariance of the engine with the real tiny model (CPU, torch backend, mode=bi).

Every comparison is `torch.equal` on the full f32 log-prob rows that produced each generated
token (not just the sampled token's log-prob), against each request run alone.
"""

from __future__ import annotations

import pytest
import torch

import ds41_runner
from ds41_runner import Engine

BASE = [
    "device=cpu",
    "backend=torch",
    "workload=tiny",
    "page_size=4",
    "num_pages=96",
    "max_requests=4",
    "max_tokens_per_request=32",
    "prefix_cache=false",
]
NEW = 4
SEEDS = [5, 6, 7]
TEMPS = [0.0, 1.0, 0.7]


def _prompts(vocab: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(1234)
    return [torch.randint(0, vocab, (n,), generator=g).tolist() for n in (9, 4, 13)]


@pytest.fixture(scope="module")
def engine() -> Engine:
    return Engine.from_config(ds41_runner.compose(BASE), keep_rows=True)


@pytest.fixture(scope="module")
def prompts(engine: Engine) -> list[list[int]]:
    return _prompts(engine.vocab_size)


@pytest.fixture(scope="module")
def alone(engine: Engine, prompts: list[list[int]]) -> list[ds41_runner.Result]:
    engine.chunk_size = 64
    out = []
    for p, s, t in zip(prompts, SEEDS, TEMPS, strict=True):
        (r,) = engine.generate([p], NEW, seeds=[s], temperature=t)
        assert r.ok and len(r.tokens) == NEW and r.rows is not None
        out.append(r)
    return out


def assert_same(results: list[ds41_runner.Result], ref: list[ds41_runner.Result]) -> None:
    assert len(results) == len(ref)
    for i, (r, a) in enumerate(zip(results, ref, strict=True)):
        assert r.ok, r.error
        assert r.tokens == a.tokens, f"request {i}: tokens differ"
        assert r.logprobs == a.logprobs, f"request {i}: log-probs differ"
        assert r.rows is not None and a.rows is not None
        assert torch.equal(r.rows, a.rows), f"request {i}: log-prob rows differ"


def test_reference_is_not_degenerate(alone: list[ds41_runner.Result]) -> None:
    # The comparisons below must be able to fail: rows differ between requests and steps.
    assert not torch.equal(alone[0].rows[0], alone[2].rows[0])
    assert not torch.equal(alone[0].rows[0], alone[0].rows[1])
    assert all(torch.isfinite(a.rows).all() for a in alone)
    assert all(lp < 0 for a in alone for lp in a.logprobs)


@pytest.mark.parametrize("chunk_size", [1, 3, 16, 64])
def test_batched_equals_alone_for_chunk_sizes(
    engine: Engine, prompts: list[list[int]], alone: list[ds41_runner.Result], chunk_size: int
) -> None:
    engine.chunk_size = chunk_size
    res = engine.generate(prompts, NEW, seeds=SEEDS, arrivals=[0, 0, 1], temperature=TEMPS)
    assert_same(res, alone)
    if chunk_size < 13:
        assert engine.stats.steps > NEW + 1, "the longest prompt should be chunked"


@pytest.mark.parametrize("order", [(2, 0, 1), (1, 2, 0)])
def test_arrival_orders(
    engine: Engine, prompts: list[list[int]], alone: list[ds41_runner.Result],
    order: tuple[int, ...],
) -> None:  # fmt: skip
    engine.chunk_size = 8
    perm = list(order)
    res = engine.generate(
        [prompts[i] for i in perm], NEW, seeds=[SEEDS[i] for i in perm],
        arrivals=[0, 2, 3], temperature=[TEMPS[i] for i in perm],
    )  # fmt: skip
    assert_same(res, [alone[i] for i in perm])
    # Prefill chunks and decode rows shared steps.
    assert any(not r.decode_only and r.requests > 1 for r in engine.stats.records)


def test_score_equals_generate(
    engine: Engine, prompts: list[list[int]], alone: list[ds41_runner.Result]
) -> None:
    scored = engine.score(
        [p + a.tokens for p, a in zip(prompts, alone, strict=True)], [len(p) for p in prompts]
    )
    assert scored == [a.logprobs for a in alone]


@pytest.mark.interpreter
@pytest.mark.slow
def test_triton_backend_generate_equals_score() -> None:
    # The Triton kernels (interpreter on CPU): a chunked prefill sharing a step with another
    # request's prompt, against one whole-sequence prefill per request.
    device = "cuda" if torch.cuda.is_available() else "cpu"
    overrides = [o for o in BASE if not o.startswith(("device=", "backend="))]
    cfg = ds41_runner.compose(overrides + [f"device={device}", "backend=triton", "chunk_size=4"])
    eng = Engine.from_config(cfg)
    prompts = [[5, 6, 7, 8, 9], [10, 11, 12]]
    res = eng.generate(prompts, 1, seeds=[0, 1], arrivals=[0, 1], temperature=[0.0, 0.9])
    assert any(r.requests > 1 and not r.decode_only for r in eng.stats.records)
    scored = eng.score([p + r.tokens for p, r in zip(prompts, res, strict=True)], [5, 3])
    assert scored == [r.logprobs for r in res]
