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


MIXED = CUDA + ["model=flash_mini", "chunk_size=64", "max_tokens_per_request=512",
                "num_pages=512", "prefix_cache=true"]  # fmt: skip


def _online(engine: Engine, prompts: list[list[int]], adds: list[int], new: int,
            abort_at: dict[int, int] | None = None, first: int = 0,
            ) -> dict[int, tuple[list[int], list[float]]]:  # fmt: skip
    """Add request i before step adds[i] (its sampling parameters are those of request
    `first + i`); abort request j before step abort_at[j]."""
    out: dict[int, tuple[list[int], list[float]]] = {}
    ids: dict[int, int] = {}
    step = 0
    while len(ids) < len(prompts) or engine.has_unfinished():
        for i, a in enumerate(adds):
            if a == step:
                k = first + i
                ids[engine.add_request(prompts[i], max_new_tokens=new, seed=k,
                                       temperature=[0.0, 0.9][k % 2], top_p=0.9)] = i  # fmt: skip
        for j, a in (abort_at or {}).items():
            if a == step and j in ids.values():
                rid = next(r for r, i in ids.items() if i == j)
                if rid in engine._live:
                    engine.abort(rid)
        for o in engine.step():
            toks, lps = out.setdefault(ids[o.request_id], ([], []))
            toks += o.new_token_ids
            lps += o.new_logprobs
        step += 1
    return out


def test_mixed_step_graphs_overlap_and_online_api_equal_eager_alone() -> None:
    # Whole-step graphs replay steps that mix prefill chunks and decode rows; overlapped and
    # plain engines, streamed through add_request/step with an abort in the middle, must give
    # each request exactly what it gets alone in an eager, non-overlapped engine.
    eager = Engine.from_config(ds41_runner.compose(MIXED + ["graph=eager"]), overlap=False)
    graph = Engine.from_config(ds41_runner.compose(MIXED + ["graph=cuda_graph"]), overlap=True)
    plain = Engine.from_config(ds41_runner.compose(MIXED + ["graph=cuda_graph"]), overlap=False)
    prompts = _prompts(6, 20, 150, eager.vocab_size, seed=7)
    adds = [0, 0, 1, 3, 4, 9]
    g = _online(graph, prompts, adds, 10, abort_at={2: 6})
    p = _online(plain, prompts, adds, 10)
    alone = {i: _online(eager, [prompts[i]], [0], 10, first=i)[0] for i in range(6)}
    mixed = [r for r in graph.stats.records if r.graph and not r.decode_only and r.requests > 1]
    assert mixed, "no mixed prefill+decode step was replayed from a graph"
    for i in range(6):
        assert p[i] == alone[i], f"request {i}: plain graph engine differs from alone"
        if i == 2:  # aborted: a prefix of its alone run
            assert g[i][0] == alone[i][0][: len(g[i][0])]
        else:
            assert g[i] == alone[i], f"request {i}: overlapped graph engine differs from alone"
    for eng in (graph, plain):
        eng.clear_prefix_cache()
        assert not eng.has_unfinished() and eng.kv.num_free_pages() == eng.kv.num_pages


def test_graph_steps_do_not_sync_the_host() -> None:
    eng = Engine.from_config(ds41_runner.compose(MIXED + ["graph=cuda_graph"]), overlap=True)
    eng.warmup()
    prompts = _prompts(4, 30, 60, eng.vocab_size, seed=9)
    for i, pr in enumerate(prompts):
        eng.add_request(pr, max_new_tokens=8, seed=i)
    for _ in range(3):  # prefill steps (first-use work: allocator pools)
        eng.step()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(4):  # decode steps, replayed; reading results due is an event wait
            eng.step()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert eng.stats.records[-1].graph and eng.stats.records[-1].decode_only
