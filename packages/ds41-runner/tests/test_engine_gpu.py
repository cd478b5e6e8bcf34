"""GPU-only engine checks (run by the lead on the H200): CUDA-graph replay is bitwise equal to
eager execution, mode=bi stays invariant on the Triton kernels, and mode=fast is shown to
break invariance for some batch composition."""

from __future__ import annotations

import pytest
import torch

import ds41_runner
from ds41_runner import Engine, Result

pytestmark = pytest.mark.gpu

CUDA = ["device=cuda", "backend=auto", "workload=tiny", "page_size=16", "num_pages=256",
        "max_requests=8", "max_tokens_per_request=256"]  # fmt: skip


def _prompts(n: int, lo: int, hi: int, vocab: int, seed: int = 0) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    lens = torch.randint(lo, hi + 1, (n,), generator=g).tolist()
    return [torch.randint(0, vocab, (m,), generator=g).tolist() for m in lens]


def _equal(a: Result, b: Result) -> bool:
    assert a.ok and b.ok, (a.error, b.error)
    assert a.rows is not None and b.rows is not None
    return a.tokens == b.tokens and torch.equal(a.rows, b.rows)


@pytest.mark.parametrize("model", ["tiny", "flash_mini"])
def test_cuda_graph_replay_equals_eager(model: str) -> None:
    eager = Engine.from_config(ds41_runner.compose(CUDA + [f"model={model}", "graph=eager"]),
                               keep_rows=True)  # fmt: skip
    graph = Engine.from_config(
        ds41_runner.compose(CUDA + [f"model={model}", "graph=cuda_graph",
                                    "graph.batch_sizes=[1,2,4,8]"]),
        keep_rows=True,
    )  # fmt: skip
    prompts = _prompts(5, 3, 40, eager.vocab_size)
    seeds, temps = list(range(5)), [0.0, 0.8, 0.0, 1.0, 0.5]
    # Five decoding requests replay the batch-8 graph with three padding rows; staggered
    # arrivals give decode batches of other sizes too.
    kw = dict(seeds=seeds, arrivals=[0, 0, 1, 5, 9], temperature=temps)
    a = eager.generate(prompts, 12, **kw)
    b = graph.generate(prompts, 12, **kw)
    assert graph.stats.graph_replays > 0
    assert eager.stats.graph_replays == 0
    for i in range(5):
        assert _equal(a[i], b[i]), f"request {i}: graph replay differs from eager"
    # And equal to the request alone (eager), so padding rows changed nothing.
    for i in (0, 3):
        (alone,) = eager.generate([prompts[i]], 12, seeds=[seeds[i]], temperature=temps[i])
        assert _equal(alone, b[i])


def _compositions(engine: Engine, prompts: list[list[int]]) -> tuple[list[Result], list[Result]]:
    n = len(prompts)
    batched = engine.generate(prompts, 6, seeds=list(range(n)), arrivals=[0] * n)
    alone = [engine.generate([p], 6, seeds=[i])[0] for i, p in enumerate(prompts)]
    return batched, alone


def test_fast_mode_breaks_invariance_bi_keeps_it() -> None:
    common = CUDA + ["model=flash_mini", "chunk_size=512", "max_tokens_per_request=1024",
                     "num_pages=1024", "prefix_cache=false"]  # fmt: skip
    bi = Engine.from_config(ds41_runner.compose(common + ["mode=bi"]), keep_rows=True)
    fast = Engine.from_config(ds41_runner.compose(common + ["mode=fast"]), keep_rows=True)
    prompts = _prompts(8, 300, 700, bi.vocab_size, seed=3)
    b_batched, b_alone = _compositions(bi, prompts)
    assert all(_equal(x, y) for x, y in zip(b_batched, b_alone, strict=True))
    f_batched, f_alone = _compositions(fast, prompts)
    differs = [
        i for i, (x, y) in enumerate(zip(f_batched, f_alone, strict=True)) if not _equal(x, y)
    ]
    assert differs, "mode=fast was expected to change some request's log-probs with the batch"
