"""Stateful fuzzing of the engine's online API (Hypothesis `RuleBasedStateMachine`).

Rules add generation and score requests (random prompts, some sharing prefixes, random sampling
parameters and stop ids), step, abort live requests, shrink and regrow the cache (pages taken
from the allocator behind the engine's back, so running requests get preempted) and change the
per-step token budget. Checked:

- every finished request equals its run alone in a fresh, non-overlapped engine with no prefix
  cache, bitwise (tokens, log-probs, finish reason); an aborted one is a prefix of it;
- every request finishes exactly once and says nothing after that; no request fails while
  the cache can hold one request alone;
- after every rule, every page reference is accounted for (request block tables, prefix-cache
  handles, the pages taken away) and free slots hold no pages; at the end, once
  `has_unfinished()` is False and the prefix cache is cleared, every page and slot is free.

The main machine runs the fake model of test_engine_scheduler.py (a real paged window cache
holding token ids; log-probs depend on what the cache returns), overlap on and off; a smaller
one runs the real tiny model on the CPU (torch backend: window, compressed and index caches,
compressor rings). Profiles: `ci` (derandomized, the default) and `long`; choose with the
environment variable HYPOTHESIS_PROFILE (e.g. `HYPOTHESIS_PROFILE=long pytest ...`).
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)
from test_engine_scheduler import VOCAB, WINDOW, FakeKV, FakeModel

from ds41_runner.engine import Engine, Request, RequestOutput

# ---------------------------------------------------------------------------- profiles
# Registered here (not in a conftest) so the file also runs on its own; registering again
# overwrites with the same values. The profile is applied to these test cases only.
_SUPPRESS = [HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large]
settings.register_profile(
    "ci",
    derandomize=True,
    database=None,
    max_examples=60,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=_SUPPRESS,
    print_blob=True,
)
settings.register_profile(
    "long",
    database=None,  # no .hypothesis/ folder in the tree; a failure prints its reproduce blob
    max_examples=1000,
    stateful_step_count=60,
    deadline=None,
    suppress_health_check=_SUPPRESS,
    print_blob=True,
)
PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")
if PROFILE not in ("ci", "long"):
    raise ValueError(f"HYPOTHESIS_PROFILE must be 'ci' or 'long', got {PROFILE!r}")
BASE_SETTINGS = settings.get_profile(PROFILE)
REAL_SCALE = 1 if PROFILE == "ci" else 10
SCORE_PREEMPTION_FIXED = True
"""A preempted score request re-emitted the targets it had already returned (found by this
machine, fixed: `test_preempted_score_request_returns_each_target_once`); the machines add
score requests to engines that preempt too."""
"""The real-model machine is ~100x slower per step than the fake one."""

# ---------------------------------------------------------------------------- requests


@dataclass(frozen=True)
class Spec:
    """One request as the machine submitted it (hashable: the key of its alone run)."""

    prompt: tuple[int, ...]
    max_new_tokens: int
    seed: int
    temperature: float
    top_k: int
    top_p: float
    stop_token_ids: tuple[int, ...]
    score_len: int = 0
    """> 0: a score request of `prompt` (the whole sequence) from this prompt length."""

    def kwargs(self) -> dict[str, Any]:
        return dict(
            max_new_tokens=self.max_new_tokens,
            seed=self.seed,
            temperature=self.temperature,
            top_k=self.top_k,
            top_p=self.top_p,
            stop_token_ids=self.stop_token_ids,
        )


@dataclass
class Alone:
    tokens: list[int]
    logprobs: list[float]
    reason: str


def submit(eng: Engine, spec: Spec) -> int:
    if spec.score_len:
        return eng.add_score_request(list(spec.prompt), spec.score_len)
    return eng.add_request(list(spec.prompt), **spec.kwargs())


def run_alone(eng: Engine, spec: Spec) -> Alone:
    """Run one request by itself to the end (the engine must be idle)."""
    assert not eng.has_unfinished()
    rid = submit(eng, spec)
    toks: list[int] = []
    lps: list[float] = []
    reason = ""
    while eng.has_unfinished():
        for out in eng.step():
            assert out.request_id == rid and not reason
            toks += out.new_token_ids
            lps += out.new_logprobs
            if out.finished:
                reason = str(out.finish_reason)
    assert reason in ("length", "stop"), (spec, reason)
    return Alone(toks, lps, reason)


TOKENS = st.integers(0, VOCAB - 1)
TEMPERATURES = st.sampled_from([0.0, 0.0, 0.4, 1.0, 1.7, 3.0])
TOP_K = st.sampled_from([0, 0, 1, 2, 5, VOCAB])
TOP_P = st.sampled_from([1.0, 1.0, 0.95, 0.5, 1e-6])
SEEDS = st.one_of(st.integers(0, 7), st.integers(-(2**63), 2**63 - 1))


def note(label: str, n: int) -> None:
    """A Hypothesis statistics event (ignored when a machine runs outside Hypothesis)."""
    with contextlib.suppress(InvalidArgument):
        event(f"{label}: {bucket(n)}")


def bucket(n: int) -> str:
    return "0" if n == 0 else "1-2" if n <= 2 else "3+"


def pages_for_window(page_size: int) -> int:
    """Pages one request of the fake needs at any time: its last WINDOW positions."""
    return (WINDOW - 1 + page_size - 1) // page_size + 1


# ---------------------------------------------------------------------------- the machine


class EngineMachine(RuleBasedStateMachine):
    """Rules and checks; subclasses build the engines (`initialize`) and the alone runs."""

    vocab = VOCAB
    max_prompt = 20
    max_new = 8

    def __init__(self) -> None:
        super().__init__()
        self.eng: Engine | None = None
        self.specs: dict[int, Spec] = {}
        self.requests: dict[int, Request] = {}
        self.roomy = False
        """The cache holds every request at once (no preemption)."""
        self.outputs: dict[int, list[RequestOutput]] = {}
        self.finished: dict[int, str] = {}
        self.aborted: set[int] = set()
        self.bases: list[list[int]] = []
        self.stolen: list[int] = []
        self.min_pages = 0
        self.step_count = 0

    # ------------------------------------------------------------------ engines
    def alone(self, spec: Spec) -> Alone:
        raise NotImplementedError

    @property
    def engine(self) -> Engine:
        assert self.eng is not None
        return self.eng

    # ------------------------------------------------------------------ rules
    def live(self) -> list[int]:
        return sorted(r for r in self.specs if r not in self.finished and r not in self.aborted)

    def _add(self, spec: Spec) -> None:
        rid = submit(self.engine, spec)
        assert rid not in self.specs, "request ids must be fresh"
        self.specs[rid] = spec
        self.requests[rid] = self.engine._live[rid]

    @rule(
        copies=st.integers(1, 3),
        base=st.integers(0, 1),
        cut=st.integers(0, 12),
        tail=st.lists(TOKENS, min_size=1, max_size=8),
        max_new=st.integers(1, 8),
        seed=SEEDS,
        temperature=TEMPERATURES,
        top_k=TOP_K,
        top_p=TOP_P,
        stops=st.lists(TOKENS, max_size=3),
        use_base=st.booleans(),
    )
    def add(self, copies: int, base: int, cut: int, tail: list[int], max_new: int, seed: int,
            temperature: float, top_k: int, top_p: float, stops: list[int],
            use_base: bool) -> None:  # fmt: skip
        head = self.bases[base % len(self.bases)][:cut] if use_base else []
        prompt = (head + tail)[: self.max_prompt]
        # `copies` requests at once: the same prompt with seeds seed, seed + 1, ...
        for c in range(copies):
            spec = Spec(tuple(prompt), min(max_new, self.max_new), (seed + c) % 2**63,
                        temperature, min(top_k, self.vocab), top_p,
                        tuple(sorted(set(stops))))  # fmt: skip
            self._add(spec)

    @precondition(lambda self: bool(self.specs))
    @rule(data=st.data())
    def add_same_prompt(self, data: st.DataObject) -> None:
        # A prompt seen before (a full prefix hit when its pages are cached), new parameters.
        old = data.draw(st.sampled_from(sorted(self.specs)))
        prompt = self.specs[old].prompt
        seed = data.draw(SEEDS)
        temperature = data.draw(TEMPERATURES)
        spec = Spec(prompt, data.draw(st.integers(1, self.max_new)), seed, temperature, 0, 1.0, ())
        self._add(spec)

    @precondition(lambda self: bool(self.specs) and (SCORE_PREEMPTION_FIXED or self.roomy))
    @rule(data=st.data())
    def add_score(self, data: st.DataObject) -> None:
        # Score what a generation request produced alone: the log-probs must equal its own.
        gen = [r for r in sorted(self.specs) if not self.specs[r].score_len]
        if not gen:
            return
        old = self.specs[data.draw(st.sampled_from(gen))]
        ref = self.alone(old)
        seq = old.prompt + tuple(ref.tokens)
        start = data.draw(st.integers(1, len(old.prompt)))
        self._add(Spec(seq, 1, 0, 0.0, 0, 1.0, (), score_len=start))

    @rule(n=st.integers(1, 6))
    def steps(self, n: int) -> None:
        for _ in range(n):
            self._collect(self.engine.step())

    @precondition(lambda self: bool(self.live()))
    @rule(data=st.data())
    def abort(self, data: st.DataObject) -> None:
        rid = data.draw(st.sampled_from(self.live()))
        self.engine.abort(rid)
        self.aborted.add(rid)

    @precondition(lambda self: bool(self.specs))
    @rule(data=st.data())
    def abort_bad_id(self, data: st.DataObject) -> None:
        done = sorted(self.finished) + sorted(self.aborted)
        if done and data.draw(st.booleans()):
            with pytest.raises(ValueError, match="already finished"):
                self.engine.abort(data.draw(st.sampled_from(done)))
        else:
            with pytest.raises(KeyError):
                self.engine.abort(max(self.specs) + data.draw(st.integers(1, 3)))

    @rule(n=st.integers(1, 12))
    def set_chunk_size(self, n: int) -> None:
        self.engine.chunk_size = n

    def can_steal(self) -> bool:
        return isinstance(self.engine.kv, FakeKV) and not self.roomy

    @precondition(lambda self: self.can_steal())
    @rule(n=st.integers(1, 8))
    def shrink_cache(self, n: int) -> None:
        # Take free pages away (as another tenant would): the engine must preempt, and still
        # never fail a request while one request alone fits.
        kv = self.engine.kv
        assert isinstance(kv, FakeKV)
        for _ in range(n):
            if kv.num_pages - len(self.stolen) <= self.min_pages or kv.num_free_pages() == 0:
                break
            page = kv.refs.index(0)
            kv.refs[page] = 1
            self.stolen.append(page)

    @precondition(lambda self: bool(self.stolen))
    @rule(n=st.integers(1, 8))
    def grow_cache(self, n: int) -> None:
        kv = self.engine.kv
        assert isinstance(kv, FakeKV)
        for _ in range(min(n, len(self.stolen))):
            kv.refs[self.stolen.pop()] -= 1

    # ------------------------------------------------------------------ checks
    def _collect(self, outs: list[RequestOutput]) -> None:
        self.step_count += 1
        for out in outs:
            rid = out.request_id
            assert rid in self.specs, f"output for unknown request {rid}"
            assert rid not in self.finished, f"request {rid} said something after finishing"
            self.outputs.setdefault(rid, []).append(out)
            assert len(out.new_token_ids) == len(out.new_logprobs)
            if out.finished:
                assert out.finish_reason != "error", f"request {rid} failed: {out.error}"
                self.finished[rid] = str(out.finish_reason)
                if rid in self.aborted:
                    assert out.finish_reason == "abort"
                else:
                    assert out.finish_reason != "abort"
                    self._check_one(rid)
            elif rid in self.aborted:
                # Tokens of a step launched before the abort may not arrive after it.
                raise AssertionError(f"request {rid} produced tokens after its abort")

    def _check_one(self, rid: int) -> None:
        spec = self.specs[rid]
        outs = self.outputs[rid]
        toks = [t for o in outs for t in o.new_token_ids]
        lps = [x for o in outs for x in o.new_logprobs]
        ref = self.alone(spec)
        if rid in self.aborted:
            assert toks == ref.tokens[: len(toks)], (rid, spec)
            assert lps == ref.logprobs[: len(lps)], (rid, spec)
            return
        assert toks == ref.tokens, (rid, spec)
        assert lps == ref.logprobs, (rid, spec)
        assert self.finished[rid] == ref.reason, (rid, spec)

    @invariant()
    def pages_and_slots_accounted(self) -> None:
        if self.eng is None:
            return
        eng = self.eng
        sched = eng.sched
        free = sched._free_slots
        used = [r.slot for r in sched.running]
        assert len(set(free)) == len(free) and not set(free) & set(used), (free, used)
        assert sorted(free + used) == list(range(eng.max_requests)), "a slot leaked"  # type: ignore[operator]
        assert all(r.slot is None for r in sched.waiting), "a waiting request holds a slot"
        kv = eng.kv
        if not isinstance(kv, FakeKV):
            return
        for s in free:
            assert not kv.table[s], f"free slot {s} holds pages {kv.table[s]}"
        refs = [0] * kv.num_pages
        for row in kv.table:
            for p in row:
                if p >= 0:
                    refs[p] += 1
        if eng.prefix_cache is not None:
            for entry in eng.prefix_cache._entries.values():
                assert not entry.handle.released
                for p in entry.handle.pages:
                    if p >= 0:
                        refs[p] += 1
        for p in self.stolen:
            refs[p] += 1
        assert refs == kv.refs, "page references do not add up (a leak or a double free)"

    def teardown(self) -> None:
        if self.eng is None:
            return
        eng = self.eng
        for _ in range(5000):
            if not eng.has_unfinished():
                break
            self._collect(eng.step())
        assert not eng.has_unfinished(), "requests never finished"
        assert set(self.finished) == set(self.specs), "a request never said it finished"
        for rid in self.specs:
            assert sum(o.finished for o in self.outputs[rid]) == 1
            self._check_one(rid)
        self.pages_and_slots_accounted()
        reqs = self.requests.values()
        note("preemptions", sum(r.preemptions for r in reqs))
        note("prefix-hit requests", sum(r.prefix_hit_tokens > 0 for r in reqs))
        note("aborted", len(self.aborted))
        note("stopped", sum(v == "stop" for v in self.finished.values()))
        note("score requests", sum(bool(s.score_len) for s in self.specs.values()))
        if isinstance(eng.kv, FakeKV):
            for p in self.stolen:
                eng.kv.refs[p] -= 1
        self.stolen.clear()
        eng.clear_prefix_cache()
        self.check_no_leak(eng)

    def check_no_leak(self, eng: Engine) -> None:
        assert eng.kv.num_free_pages() == eng.kv.num_pages, "pages leaked"  # type: ignore[attr-defined]
        assert sorted(eng.sched._free_slots) == list(range(eng.max_requests)), "slots leaked"


class FakeEngineMachine(EngineMachine):
    """The fake model of test_engine_scheduler.py, overlap on and off."""

    alone_cache: dict[Spec, Alone] = {}  # noqa: RUF012 (shared on purpose: runs are pure)

    def build(self, num_pages: int, page_size: int, max_requests: int, chunk_size: int,
              prefix_cache: bool, overlap: bool) -> Engine:  # fmt: skip
        kv = FakeKV(num_pages, page_size, max_requests=max_requests)
        return Engine(
            FakeModel(), kv, vocab_size=VOCAB, max_tokens=64, chunk_size=chunk_size,
            prefix_cache=prefix_cache, overlap=overlap,
        )  # fmt: skip

    def alone(self, spec: Spec) -> Alone:
        if spec not in self.alone_cache:
            eng = self.build(64, 4, 1, 32, prefix_cache=False, overlap=False)
            self.alone_cache[spec] = run_alone(eng, spec)
        return self.alone_cache[spec]

    @initialize(
        num_pages=st.integers(0, 6),
        page_size=st.sampled_from([2, 4]),
        max_requests=st.integers(2, 4),
        chunk_size=st.integers(1, 12),
        prefix_cache=st.booleans(),
        overlap=st.booleans(),
        bases=st.lists(st.lists(TOKENS, min_size=2, max_size=12), min_size=1, max_size=2),
        roomy=st.integers(0, 2),
    )
    def setup(self, num_pages: int, page_size: int, max_requests: int, chunk_size: int,
              prefix_cache: bool, overlap: bool, bases: list[list[int]],
              roomy: int) -> None:  # fmt: skip
        self.min_pages = pages_for_window(page_size)
        # One engine in three: room for every request's whole sequence (no preemption).
        self.roomy = roomy == 0
        if self.roomy:
            num_pages = max_requests * -(-(self.max_prompt + self.max_new) // page_size)
        self.eng = self.build(
            self.min_pages + num_pages, page_size, max_requests, chunk_size, prefix_cache, overlap
        )
        self.bases = bases


TestEngineFake = FakeEngineMachine.TestCase
TestEngineFake.settings = settings(BASE_SETTINGS)


# ---------------------------------------------------------------------------- the real model

REAL_BASE = [
    "device=cpu",
    "backend=torch",
    "workload=tiny",
    "page_size=4",
    "max_requests=3",
    "max_tokens_per_request=24",
]
_REAL_COLD: list[Engine] = []


class RealEngineMachine(EngineMachine):
    """The real tiny model (CPU, torch backend) with a cache of a few pages: preemption,
    prefix hits and chunking go through the real window / compressed / index caches and the
    compressor rings. No page stealing (the real allocators are not faked)."""

    vocab = 512
    max_prompt = 14
    max_new = 5
    alone_cache: dict[Spec, Alone] = {}  # noqa: RUF012

    def build(self, num_pages: int, page_size: int, max_requests: int, chunk_size: int,
              prefix_cache: bool, overlap: bool) -> Engine:  # fmt: skip
        import ds41_runner

        cfg = ds41_runner.compose(
            REAL_BASE + [f"num_pages={num_pages}", f"chunk_size={chunk_size}",
                         f"prefix_cache={str(prefix_cache).lower()}"]
        )  # fmt: skip
        return Engine.from_config(cfg, overlap=overlap)

    def alone(self, spec: Spec) -> Alone:
        # One cold, non-overlapped engine without prefix cache, used one request at a time.
        if spec not in self.alone_cache:
            if not _REAL_COLD:
                _REAL_COLD.append(self.build(32, 4, 3, 32, prefix_cache=False, overlap=False))
            eng = _REAL_COLD[0]
            self.alone_cache[spec] = run_alone(eng, spec)
            self.check_no_leak(eng)
        return self.alone_cache[spec]

    @initialize(
        num_pages=st.integers(6, 10),
        chunk_size=st.integers(1, 10),
        prefix_cache=st.booleans(),
        overlap=st.booleans(),
        bases=st.lists(st.lists(st.integers(0, 511), min_size=4, max_size=10), min_size=1,
                       max_size=2),
    )  # fmt: skip
    def setup_real(self, num_pages: int, chunk_size: int, prefix_cache: bool, overlap: bool,
                   bases: list[list[int]]) -> None:  # fmt: skip
        # 6 pages of 4: one 19-token request fits alone (its compressed ratio-1 cache keeps
        # every entry), two long ones do not.
        self.eng = self.build(num_pages, 4, 3, chunk_size, prefix_cache, overlap)
        self.bases = bases

    def can_steal(self) -> bool:
        return False

    def check_no_leak(self, eng: Engine) -> None:
        kv = eng.kv
        assert kv.free_pages() == dict.fromkeys(kv.free_pages(), kv.num_pages), "pages leaked"  # type: ignore[attr-defined]
        assert sorted(eng.sched._free_slots) == list(range(eng.max_requests)), "slots leaked"


# ~1 s per real step on a loaded CI machine: in CI the fixed sequences below cover the real
# model; the random machine runs under the `long` profile.
TestEngineReal = pytest.mark.skipif(
    PROFILE == "ci", reason="the real-model machine runs under HYPOTHESIS_PROFILE=long"
)(RealEngineMachine.TestCase)
TestEngineReal.settings = settings(
    BASE_SETTINGS,
    max_examples=2 * REAL_SCALE,
    stateful_step_count=10 + 2 * REAL_SCALE,
)


@pytest.mark.parametrize("overlap", [False, True])
def test_real_model_fixed_sequence(overlap: bool) -> None:
    # The real machine's rules in a fixed order that certainly preempts and hits the prefix
    # cache: three requests sharing 8 tokens (two pages) in six pages, chunk size changes, an
    # abort, a late arrival with the same prefix.
    m = RealEngineMachine()
    base = [7, 300, 41, 5, 260, 99, 18, 411, 3, 77]
    m.setup_real(num_pages=6, chunk_size=5, prefix_cache=True, overlap=overlap, bases=[base])
    gen = dict(max_new=5, temperature=1.0, top_k=0, top_p=0.95, stops=[], use_base=True)
    m.add(copies=1, base=0, cut=8, tail=[1, 2], seed=1, **gen)  # type: ignore[arg-type]
    m.steps(3)
    m.add(copies=2, base=0, cut=10, tail=[9, 8, 7], seed=11, **gen)  # type: ignore[arg-type]
    m.set_chunk_size(3)
    m.steps(4)
    victim = m.live()[-1]
    m.engine.abort(victim)
    m.aborted.add(victim)
    m.add(copies=1, base=0, cut=9, tail=[4], seed=5, **gen)  # type: ignore[arg-type]
    m.set_chunk_size(8)
    m.steps(6)
    m.teardown()
    reqs = m.requests.values()
    assert sum(r.preemptions for r in reqs) >= 1
    assert any(r.prefix_hit_tokens >= 8 for r in reqs)


# ---------------------------------------------------------------------------- found bugs


@pytest.mark.parametrize("chunk_size", [4, 2])
def test_preempted_score_request_returns_each_target_once(chunk_size: int) -> None:
    from test_engine_scheduler import make_engine

    (gen,) = make_engine(prefix_cache=False).generate([[0]], 5, seeds=[0])
    seq = [0, *gen.tokens]
    ref = make_engine(prefix_cache=False).score([seq], [1])[0]
    # Three 2-token pages: the generation request (admitted first) and the score request
    # cannot both hold their windows, so the newer one, the score request, is preempted.
    eng = make_engine(num_pages=3, page_size=2, max_requests=2, chunk_size=chunk_size,
                      prefix_cache=False, overlap=False)  # fmt: skip
    eng.add_request([0], max_new_tokens=5, seed=0)
    rid = eng.add_score_request(seq, 1)
    toks: list[int] = []
    lps: list[float] = []
    while eng.has_unfinished():
        for out in eng.step():
            if out.request_id == rid:
                toks += out.new_token_ids
                lps += out.new_logprobs
    assert eng.sched.preemptions >= 1
    assert toks == seq[1:]
    assert lps == ref
