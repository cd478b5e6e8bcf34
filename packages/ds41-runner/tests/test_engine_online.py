"""The online API (`add_request` / `step` / `abort`) against the fake model of
test_engine_scheduler.py: any interleaving of adds, steps and aborts, overlapped or not,
streamed or not, reproduces each request run alone, bitwise; bad input is named and changes
nothing; no page or slot leaks."""

from __future__ import annotations

import random

import pytest
import torch
from test_engine_scheduler import VOCAB, make_engine, prompts_for

from ds41_runner.engine import Engine, RequestOutput


def run_alone(prompt: list[int], **params: object) -> tuple[list[int], list[float], str]:
    eng = make_engine(prefix_cache=False, overlap=False)
    rid = eng.add_request(prompt, **params)  # type: ignore[arg-type]
    toks: list[int] = []
    lps: list[float] = []
    reason = ""
    while eng.has_unfinished():
        for out in eng.step():
            assert out.request_id == rid
            toks += out.new_token_ids
            lps += out.new_logprobs
            if out.finished:
                reason = str(out.finish_reason)
    return toks, lps, reason


def drain(eng: Engine, sink: dict[int, list[RequestOutput]]) -> None:
    for out in eng.step():
        sink.setdefault(out.request_id, []).append(out)


def assert_no_leak(eng: Engine) -> None:
    assert not eng.has_unfinished()
    eng.clear_prefix_cache()
    assert eng.kv.num_free_pages() == eng.kv.num_pages, "pages leaked"
    assert sorted(eng.sched._free_slots) == list(range(eng.max_requests)), "slots leaked"


@pytest.mark.parametrize("seed", range(8))
def test_random_add_step_abort_interleavings_equal_alone(seed: int) -> None:
    rng = random.Random(seed)
    eng = make_engine(
        num_pages=rng.randint(5, 14),
        chunk_size=rng.randint(1, 10),
        prefix_cache=bool(seed % 2),
        overlap=bool(seed % 3),
    )
    shared = prompts_for(50 + seed, [8])[0]
    params: dict[int, dict[str, object]] = {}
    prompts: dict[int, list[int]] = {}
    aborted: set[int] = set()
    sink: dict[int, list[RequestOutput]] = {}
    for k in range(10):
        for _ in range(rng.randint(0, 2)):
            prompt = (shared if rng.random() < 0.5 else []) + prompts_for(
                1000 * seed + k * 7 + len(prompts), [rng.randint(1, 9)]
            )[0]
            p: dict[str, object] = dict(
                max_new_tokens=rng.randint(1, 6),
                seed=rng.randint(0, 2**40),
                temperature=rng.choice([0.0, 0.7, 1.3]),
                top_k=rng.choice([0, 3]),
                top_p=rng.choice([1.0, 0.8]),
                stop_token_ids=rng.choice([(), (rng.randrange(VOCAB),)]),
            )
            rid = eng.add_request(prompt, **p)  # type: ignore[arg-type]
            params[rid], prompts[rid] = p, prompt
        for _ in range(rng.randint(0, 3)):
            drain(eng, sink)
        live = [
            r for r in prompts if r not in aborted and not any(o.finished for o in sink.get(r, []))
        ]
        if live and rng.random() < 0.15:
            victim = rng.choice(live)
            eng.abort(victim)
            aborted.add(victim)
    while eng.has_unfinished():
        drain(eng, sink)
    for rid, prompt in prompts.items():
        outs = sink[rid]
        assert outs[-1].finished and sum(o.finished for o in outs) == 1
        toks = [t for o in outs for t in o.new_token_ids]
        lps = [x for o in outs for x in o.new_logprobs]
        ref_toks, ref_lps, ref_reason = run_alone(prompt, **params[rid])
        if rid in aborted:
            assert outs[-1].finish_reason == "abort"
            assert toks == ref_toks[: len(toks)] and lps == ref_lps[: len(lps)]
        else:
            assert (toks, lps, outs[-1].finish_reason) == (ref_toks, ref_lps, ref_reason)
    assert_no_leak(eng)


@pytest.mark.parametrize("chunk_size", [1, 4, 16])
def test_overlapped_equals_non_overlapped(chunk_size: int) -> None:
    prompts = prompts_for(7, [9, 2, 14, 5, 6])
    kw = dict(seeds=[1, 2, 3, 4, 5], arrivals=[0, 0, 1, 3, 3], temperature=[0, 1, 0.5, 0, 2.0])
    a = make_engine(chunk_size=chunk_size, overlap=False).generate(prompts, 5, **kw)  # type: ignore[arg-type]
    b = make_engine(chunk_size=chunk_size, overlap=True).generate(prompts, 5, **kw)  # type: ignore[arg-type]
    assert [(r.tokens, r.logprobs) for r in a] == [(r.tokens, r.logprobs) for r in b]
    assert all(r.ok and len(r.tokens) == 5 for r in a)


def test_streamed_outputs_equal_generate_and_stop_tokens() -> None:
    prompt = prompts_for(8, [6])[0]
    toks, _, reason = run_alone(prompt, max_new_tokens=8, seed=3, temperature=1.0)
    assert reason == "length" and len(toks) == 8
    stop = toks[3]
    first = toks.index(stop)
    stopped, _, reason = run_alone(
        prompt, max_new_tokens=8, seed=3, temperature=1.0, stop_token_ids=[stop]
    )
    assert reason == "stop" and stopped == toks[: first + 1]
    # Overlapped: the engine ran one row past the stop; that row's token is never returned.
    eng = make_engine(overlap=True)
    rid = eng.add_request(prompt, max_new_tokens=8, seed=3, temperature=1.0, stop_token_ids=[stop])
    got: list[int] = []
    while eng.has_unfinished():
        for out in eng.step():
            assert out.request_id == rid
            got += out.new_token_ids
    assert got == stopped
    assert_no_leak(eng)
    (res,) = make_engine().generate([prompt], 8, seeds=[3], temperature=1.0, stop_token_ids=[stop])
    assert res.tokens == stopped and res.finish_reason == "stop"


def test_top_k_one_is_greedy_and_filters_depend_on_the_row_only() -> None:
    prompt = prompts_for(9, [7])[0]
    greedy, _, _ = run_alone(prompt, max_new_tokens=6)
    top1, _, _ = run_alone(prompt, max_new_tokens=6, seed=5, temperature=2.0, top_k=1)
    assert top1 == greedy
    tiny_p, _, _ = run_alone(prompt, max_new_tokens=6, seed=5, temperature=2.0, top_p=1e-6)
    assert tiny_p == greedy  # top_p keeps at least the most likely token
    wide, _, _ = run_alone(prompt, max_new_tokens=6, seed=5, temperature=2.0)
    assert wide != greedy  # sampling at temperature 2 does leave the argmax here


def test_bad_input_is_named_and_changes_nothing() -> None:
    eng = make_engine(num_pages=1, chunk_size=64, prefix_cache=False)
    good = prompts_for(10, [3])[0]
    bad: list[tuple[dict[str, object], str]] = [
        (dict(prompt=[], max_new_tokens=2), "prompt is empty"),
        (dict(prompt=[1, VOCAB], max_new_tokens=2), "vocabulary"),
        (dict(prompt=good, max_new_tokens=0), "max_new_tokens"),
        (dict(prompt=good, max_new_tokens=2.0), "max_new_tokens"),
        (dict(prompt=good, max_new_tokens=2, top_p=0.0), "top_p"),
        (dict(prompt=good, max_new_tokens=2, top_p=1.5), "top_p"),
        (dict(prompt=good, max_new_tokens=2, top_k=-1), "top_k"),
        (dict(prompt=good, max_new_tokens=2, stop_token_ids=[VOCAB]), "stop_token_ids"),
        (dict(prompt=good, max_new_tokens=2, temperature=1e-40), "temperature"),
        (dict(prompt=good, max_new_tokens=2, temperature=float("nan")), "temperature"),
        (dict(prompt=good, max_new_tokens=2, temperature="hot"), "temperature"),
        (dict(prompt=good, max_new_tokens=2, seed=2**63), "seed"),
        (dict(prompt=good * 30, max_new_tokens=2), "maximum"),
    ]
    for kw, field in bad:
        with pytest.raises(ValueError, match=field):
            eng.add_request(**kw)  # type: ignore[arg-type]
    assert not eng.has_unfinished() and eng._next_id == 0
    with pytest.raises(KeyError):
        eng.abort(0)
    # A prompt that can never fit (one 4-token page, a 5-position window): that request only.
    long = eng.add_request(prompts_for(11, [20])[0], max_new_tokens=2)
    short = eng.add_request(good, max_new_tokens=2)
    outs: dict[int, list[RequestOutput]] = {}
    while eng.has_unfinished():
        drain(eng, outs)
    assert outs[long][-1].finish_reason == "error" and "too small" in str(outs[long][-1].error)
    assert outs[short][-1].finish_reason == "length"
    assert sum(len(o.new_token_ids) for o in outs[short]) == 2
    with pytest.raises(ValueError, match="already finished"):
        eng.abort(short)
    assert_no_leak(eng)


def test_abort_frees_pages_at_once() -> None:
    eng = make_engine(num_pages=16, chunk_size=4, prefix_cache=False)
    rid = eng.add_request(prompts_for(12, [10])[0], max_new_tokens=20)
    eng.step()
    eng.step()
    assert eng.kv.num_free_pages() < 16
    eng.abort(rid)
    assert eng.kv.num_free_pages() == 16
    outs = eng.step()
    assert [(o.request_id, o.finished, o.finish_reason) for o in outs][-1] == (rid, True, "abort")
    while eng.has_unfinished():
        eng.step()
    assert_no_leak(eng)


def test_score_through_the_online_path_equals_generate() -> None:
    prompts = prompts_for(13, [4, 9])
    eng = make_engine(chunk_size=3)
    res = eng.generate(prompts, 4, seeds=[1, 2], temperature=[0.0, 1.0])
    seqs = [p + r.tokens for p, r in zip(prompts, res, strict=True)]
    assert eng.score(seqs, [len(p) for p in prompts]) == [r.logprobs for r in res]
    assert eng.score([seqs[0]], [len(seqs[0])]) == [[]]
    assert_no_leak(eng)


def test_sampling_filters_row_independent() -> None:
    from ds41_runner.ops.sampling import sample

    g = torch.Generator().manual_seed(0)
    lp = torch.log_softmax(torch.randn(6, 40, generator=g) * 2, dim=-1)
    lp[2, 5] = lp[2, 9] = lp[2].max() + 0.5  # a tie at the top
    seeds = torch.arange(6, dtype=torch.int64) * 977
    pos = torch.arange(6, dtype=torch.int32)
    temp = torch.tensor([1.0, 0.5, 2.0, 0.0, 1.5, 1.0])
    top_k = torch.tensor([0, 3, 2, 5, 1, 0], dtype=torch.int32)
    top_p = torch.tensor([0.9, 1.0, 0.5, 0.3, 1.0, 0.2])
    full = sample(lp, seeds, pos, temp, top_k, top_p)
    for i in range(6):
        one = sample(lp[i : i + 1], seeds[i : i + 1], pos[i : i + 1], temp[i : i + 1],
                     top_k[i : i + 1], top_p[i : i + 1])  # fmt: skip
        assert one.item() == full[i].item()
    assert full[3].item() == int(lp[3].argmax())  # greedy ignores the filters
    assert full[4].item() == int((lp[4] / 1.5).argmax())  # top_k 1
    # An independent reference of the kept set (float64 mass, sorted by hand).
    for i in range(6):
        if temp[i] == 0:
            continue
        probs = torch.softmax(lp[i].double() / float(temp[i]), 0)
        order = sorted(range(40), key=lambda v: (-float(lp[i, v] / temp[i]), v))
        k = int(top_k[i]) or 40
        kept = order[:k]
        mass = probs[kept].sum()
        acc, keep = 0.0, []
        for v in kept:
            if float(top_p[i]) < 1 and acc >= float(top_p[i]) * float(mass):
                break
            keep.append(v)
            acc += float(probs[v])
        assert full[i].item() in keep


def test_non_finite_log_probs_fail_that_request_only() -> None:
    from test_engine_scheduler import FakeModel

    poison = 7  # rows whose input token is this id produce NaN log-probs

    class NaNModel(FakeModel):
        def forward(self, tokens, req_idx, pos, kv, *, validate=True, logit_rows=None,  # type: ignore[no-untyped-def]
                    nonfinite_stage=None):  # fmt: skip
            out = super().forward(tokens, req_idx, pos, kv, validate=validate,
                                  nonfinite_stage=nonfinite_stage)  # fmt: skip
            out[tokens == poison] = float("nan")
            if nonfinite_stage is not None:  # as if layer 1's attention block made the NaN
                nonfinite_stage[tokens == poison] = 3
            return out if logit_rows is None else out[logit_rows]

    good = [1, 2, 3, 4]
    for overlap in (False, True):
        eng = make_engine(overlap=overlap)
        eng.model = NaNModel()
        eng.runner.model = eng.model
        bad = eng.add_request([3, 5, poison], max_new_tokens=4)
        ok = eng.add_request(good, max_new_tokens=4)
        outs: dict[int, list[RequestOutput]] = {}
        while eng.has_unfinished():
            drain(eng, outs)
        last = outs[bad][-1]
        assert last.finish_reason == "error" and "request 0" in str(last.error)
        assert "position 2" in str(last.error) and "non-finite" in str(last.error)
        assert "layer 1's attention block" in str(last.error)
        assert [t for o in outs[ok] for t in o.new_token_ids] == run_alone(good, max_new_tokens=4)[
            0
        ]
        assert_no_leak(eng)
