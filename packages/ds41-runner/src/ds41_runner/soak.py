"""Soak test of the serving engine: many random requests through the online API, checked.

    python -m ds41_runner.soak [--requests N] [--seconds S] [--seed K] [--check-every K]
                               [--json F] [--smoke]

Runs the tiny model on the CPU (torch backend) with overlap on and a cache small enough to
preempt: requests with random prompts (half of them start with one of a few shared prefixes,
so the prefix cache hits), lengths and sampling parameters (temperature, top-k, top-p, stop
ids) arrive at random steps; live requests are aborted at random; the per-step token budget
(`engine.chunk_size`) changes between steps. It stops adding requests after N requests or S
seconds, whichever comes first, then drains.

Checked (SPEC section 9): a deterministic sample of requests, every request whose id is a
multiple of `--check-every` plus every request that was preempted, hit the prefix cache or
was aborted, is run again alone in a cold, non-overlapped engine without prefix cache and must
match bitwise (tokens, log-probs, finish reason; an aborted request's tokens a prefix).
Every request must finish exactly once and none may fail. At the end, with the prefix cache
cleared, every page of every allocator and every request slot must be free. The exit code is
non-zero on any failure.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from .app_config import compose
from .engine import Engine, Request, RequestOutput

PAGE_SIZE = 4
MAX_TOKENS = 32
"""Tokens per request (prompt + generated); the ratio-1 compressed cache keeps all of them."""


@dataclass(frozen=True)
class Spec:
    """One request as submitted."""

    prompt: tuple[int, ...]
    max_new_tokens: int
    seed: int
    temperature: float
    top_k: int
    top_p: float
    stop_token_ids: tuple[int, ...]


@dataclass
class SoakStats:
    """What one soak run did and found (the JSON report)."""

    seed: int
    requests: int = 0
    finished_length: int = 0
    finished_stop: int = 0
    aborted: int = 0
    errors: int = 0
    tokens: int = 0
    steps: int = 0
    preemptions: int = 0
    preempted_requests: int = 0
    prefix_hit_requests: int = 0
    prefix_hit_tokens: int = 0
    chunk_size_changes: int = 0
    checked: int = 0
    invariance_failures: int = 0
    protocol_failures: int = 0
    leaks: int = 0
    wall_s: float = 0.0
    check_s: float = 0.0
    config: dict[str, Any] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.invariance_failures or self.protocol_failures or self.leaks or self.errors)

    def fail(self, kind: str, message: str) -> None:
        if kind == "invariance":
            self.invariance_failures += 1
        elif kind == "leak":
            self.leaks += 1
        else:
            self.protocol_failures += 1
        if len(self.failures) < 50:
            self.failures.append(f"{kind}: {message}")


def build_engine(
    *, num_pages: int, max_requests: int, chunk_size: int, prefix_cache: bool, overlap: bool
) -> Engine:
    cfg = compose(
        [
            "device=cpu",
            "backend=torch",
            "workload=tiny",
            f"page_size={PAGE_SIZE}",
            f"num_pages={num_pages}",
            f"max_requests={max_requests}",
            f"max_tokens_per_request={MAX_TOKENS}",
            f"chunk_size={chunk_size}",
            f"prefix_cache={str(prefix_cache).lower()}",
        ]
    )
    return Engine.from_config(cfg, overlap=overlap)


def run_alone(eng: Engine, spec: Spec, max_new_tokens: int) -> tuple[list[int], list[float], str]:
    """The request by itself in an idle engine: (tokens, log-probs, finish reason)."""
    if eng.has_unfinished():
        raise RuntimeError("the reference engine must be idle")
    rid = eng.add_request(
        list(spec.prompt), max_new_tokens=max_new_tokens, seed=spec.seed,
        temperature=spec.temperature, top_k=spec.top_k, top_p=spec.top_p,
        stop_token_ids=spec.stop_token_ids,
    )  # fmt: skip
    toks: list[int] = []
    lps: list[float] = []
    reason = ""
    while eng.has_unfinished():
        for out in eng.step():
            if out.request_id == rid:
                toks += out.new_token_ids
                lps += out.new_logprobs
                if out.finished:
                    reason = str(out.finish_reason)
    return toks, lps, reason


def leaks_of(eng: Engine) -> list[str]:
    """Pages or slots still held by an idle engine (after clearing its prefix cache)."""
    out: list[str] = []
    if eng.has_unfinished():
        out.append("the engine still has unfinished requests")
    eng.clear_prefix_cache()
    kv: Any = eng.kv
    for name, free in kv.free_pages().items():
        if free != kv.num_pages:
            out.append(f"{name}: {kv.num_pages - free} of {kv.num_pages} pages not free")
    slots = sorted(eng.sched._free_slots)
    if slots != list(range(eng.max_requests)):
        out.append(f"free slots {slots}, expected all of 0..{eng.max_requests - 1}")
    return out


class Soak:
    """One soak run (see the module doc)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.rng = random.Random(args.seed)
        self.stats = SoakStats(seed=args.seed)
        self.eng = build_engine(
            num_pages=args.num_pages, max_requests=args.max_requests, chunk_size=16,
            prefix_cache=True, overlap=True,
        )  # fmt: skip
        self.ref = build_engine(
            num_pages=64, max_requests=1, chunk_size=32, prefix_cache=False, overlap=False
        )
        self.vocab = self.eng.vocab_size
        self.bases = [
            [self.rng.randrange(self.vocab) for _ in range(self.rng.randint(8, 14))]
            for _ in range(4)
        ]
        self.specs: dict[int, Spec] = {}
        self.reqs: dict[int, Request] = {}
        self.outputs: dict[int, list[RequestOutput]] = {}
        self.done: set[int] = set()
        self.aborted: set[int] = set()
        self.stats.config = dict(
            model="tiny", device="cpu", backend="torch", page_size=PAGE_SIZE,
            num_pages=args.num_pages, max_requests=args.max_requests,
            max_tokens_per_request=MAX_TOKENS, overlap=True, prefix_cache=True,
            check_every=args.check_every, requests=args.requests, seconds=args.seconds,
        )  # fmt: skip

    # ------------------------------------------------------------------ workload
    def random_spec(self) -> Spec:
        r = self.rng
        head: list[int] = []
        if r.random() < 0.5:
            base = r.choice(self.bases)
            head = base[: r.randint(4, len(base))]
        tail = [r.randrange(self.vocab) for _ in range(r.randint(1, 8))]
        prompt = (head + tail)[:20]
        max_new = r.randint(1, min(8, MAX_TOKENS - len(prompt)))
        stops: tuple[int, ...] = ()
        if r.random() < 0.2:
            # Small ids are likelier to be hit by chance: stops happen now and then.
            stops = tuple(sorted({r.randrange(self.vocab) for _ in range(r.randint(1, 40))}))
        return Spec(
            tuple(prompt), max_new, r.randrange(2**63), r.choice([0.0, 0.0, 0.5, 1.0, 1.5]),
            r.choice([0, 0, 1, 4, 50]), r.choice([1.0, 1.0, 0.9, 0.5]), stops,
        )  # fmt: skip

    def add(self) -> None:
        spec = self.random_spec()
        rid = self.eng.add_request(
            list(spec.prompt), max_new_tokens=spec.max_new_tokens, seed=spec.seed,
            temperature=spec.temperature, top_k=spec.top_k, top_p=spec.top_p,
            stop_token_ids=spec.stop_token_ids,
        )  # fmt: skip
        if rid in self.specs:
            self.stats.fail("protocol", f"request id {rid} issued twice")
        self.specs[rid] = spec
        # The engine's own record of the request: preemptions and prefix hits, for the report
        # and the choice of what to check.
        self.reqs[rid] = self.eng._live[rid]
        self.stats.requests += 1

    def live(self) -> list[int]:
        return [r for r in self.specs if r not in self.done and r not in self.aborted]

    # ------------------------------------------------------------------ checks
    def collect(self, outs: list[RequestOutput]) -> None:
        st = self.stats
        for out in outs:
            rid = out.request_id
            if rid not in self.specs:
                st.fail("protocol", f"output for unknown request {rid}")
                continue
            if rid in self.done:
                st.fail("protocol", f"request {rid} spoke after it finished")
                continue
            if rid in self.aborted and not out.finished:
                st.fail("protocol", f"request {rid} produced tokens after its abort")
            self.outputs.setdefault(rid, []).append(out)
            st.tokens += len(out.new_token_ids)
            if not out.finished:
                continue
            self.done.add(rid)
            reason = out.finish_reason
            if reason == "error":
                st.errors += 1
                st.fail("error", f"request {rid} failed: {out.error}")
            elif reason == "abort":
                if rid not in self.aborted:
                    st.fail("protocol", f"request {rid} finished as aborted but was not")
            elif rid in self.aborted:
                st.fail("protocol", f"aborted request {rid} finished with {reason!r}")
            elif reason == "stop":
                st.finished_stop += 1
            else:
                st.finished_length += 1
            if reason != "error" and self.selected(rid):
                self.check(rid)

    def selected(self, rid: int) -> bool:
        req = self.reqs[rid]
        return (
            rid % self.args.check_every == 0
            or req.preemptions > 0
            or req.prefix_hit_tokens > 0
            or rid in self.aborted
        )

    def check(self, rid: int) -> None:
        t0 = time.perf_counter()
        spec = self.specs[rid]
        outs = self.outputs[rid]
        toks = [t for o in outs for t in o.new_token_ids]
        lps = [x for o in outs for x in o.new_logprobs]
        reason = str(outs[-1].finish_reason)
        aborted = rid in self.aborted
        if aborted and not toks:
            return  # nothing came back: nothing to compare
        # An aborted request is compared up to what it returned (the same seeds and
        # positions, so the alone run of that many tokens is its prefix).
        n = len(toks) if aborted else spec.max_new_tokens
        ref_toks, ref_lps, ref_reason = run_alone(self.ref, spec, n)
        self.stats.checked += 1
        if toks != ref_toks or lps != ref_lps or (not aborted and reason != ref_reason):
            first = next(
                (i for i, (a, b) in enumerate(zip(toks, ref_toks, strict=False)) if a != b), None
            )
            req = self.reqs[rid]
            self.stats.fail(
                "invariance",
                f"request {rid} {spec} (preemptions {req.preemptions}, prefix hit "
                f"{req.prefix_hit_tokens}): got {toks} ({reason}), alone {ref_toks} "
                f"({ref_reason}); first token difference at {first}; log-probs "
                f"{'equal' if lps == ref_lps else 'differ'}",
            )
        self.stats.check_s += time.perf_counter() - t0

    # ------------------------------------------------------------------ the run
    def run(self, console: Console) -> SoakStats:
        a, r, st = self.args, self.rng, self.stats
        start = last_line = time.perf_counter()
        columns = (
            TextColumn("[bold]soak"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            TextColumn("{task.fields[line]}"),
        )  # fmt: skip
        with Progress(*columns, console=console, transient=False) as bar:
            task = bar.add_task("soak", total=a.requests, line="")
            while True:
                adding = st.requests < a.requests and time.perf_counter() - start < a.seconds
                if not adding and not self.eng.has_unfinished():
                    break
                if adding and len(self.live()) < 3 * a.max_requests:
                    # Bursty arrivals (usually 0-1 per step, sometimes a burst), with a bounded
                    # backlog so the run drains soon after it stops adding.
                    k = r.choice([0, 0, 0, 1, 1, 2]) if r.random() > 0.05 else r.randint(3, 8)
                    for _ in range(min(k, a.requests - st.requests)):
                        self.add()
                live = self.live()
                if live and r.random() < 0.04:
                    victim = r.choice(live)
                    self.eng.abort(victim)
                    self.aborted.add(victim)
                    st.aborted += 1
                if r.random() < 0.05:
                    self.eng.chunk_size = r.choice([1, 2, 3, 5, 8, 13, 16, 24])
                    st.chunk_size_changes += 1
                if self.eng.has_unfinished():
                    self.collect(self.eng.step())
                    st.steps += 1
                line = (
                    f"steps {st.steps}  live {len(self.live())}  checked {st.checked}  "
                    f"preempted {sum(q.preemptions > 0 for q in self.reqs.values())}  "
                    f"failures {len(st.failures)}"
                )
                bar.update(task, completed=len(self.done), line=line)
                now = time.perf_counter()
                if not console.is_terminal and now - last_line >= 30:
                    # No live display in a log: a plain line every 30 s.
                    console.print(f"{now - start:.0f}s  done {len(self.done)}  {line}")
                    last_line = now
        st.wall_s = time.perf_counter() - start
        for rid in self.specs:
            if rid not in self.done:
                st.fail("protocol", f"request {rid} never finished")
        for msg in leaks_of(self.eng):
            st.fail("leak", f"engine: {msg}")
        for msg in leaks_of(self.ref):
            st.fail("leak", f"reference engine: {msg}")
        st.preemptions = sum(q.preemptions for q in self.reqs.values())
        st.preempted_requests = sum(q.preemptions > 0 for q in self.reqs.values())
        st.prefix_hit_requests = sum(q.prefix_hit_tokens > 0 for q in self.reqs.values())
        st.prefix_hit_tokens = sum(q.prefix_hit_tokens for q in self.reqs.values())
        return st


def summary_table(st: SoakStats) -> Table:
    t = Table(title=f"ds41 engine soak (seed {st.seed}): {'PASS' if st.ok else 'FAIL'}")
    t.add_column("metric")
    t.add_column("value", justify="right")
    rows = [
        ("requests", st.requests),
        ("  finished (length / stop)", f"{st.finished_length} / {st.finished_stop}"),
        ("  aborted", st.aborted),
        ("  failed (error)", st.errors),
        ("tokens generated", st.tokens),
        ("steps", st.steps),
        ("preemptions (requests preempted)", f"{st.preemptions} ({st.preempted_requests})"),
        ("prefix hits (tokens)", f"{st.prefix_hit_requests} ({st.prefix_hit_tokens})"),
        ("chunk-size changes", st.chunk_size_changes),
        ("checked against alone", st.checked),
        ("invariance failures", st.invariance_failures),
        ("protocol failures", st.protocol_failures),
        ("leaks", st.leaks),
        ("wall time (s)", f"{st.wall_s:.1f} (checks {st.check_s:.1f})"),
    ]
    for k, v in rows:
        t.add_row(k, str(v))
    return t


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m ds41_runner.soak", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    ap.add_argument("--requests", type=int, default=2000, help="requests to submit (max)")
    ap.add_argument("--seconds", type=float, default=120.0, help="stop adding after this")
    ap.add_argument("--seed", type=int, default=0, help="workload seed")
    ap.add_argument("--check-every", type=int, default=4,
                    help="also check every request whose id is a multiple of this")  # fmt: skip
    ap.add_argument("--num-pages", type=int, default=12, help="cache pages (small: preempts)")
    ap.add_argument("--max-requests", type=int, default=6, help="request slots")
    ap.add_argument("--json", type=Path, default=None, help="write the report here")
    ap.add_argument("--smoke", action="store_true",
                    help="12 requests, however long they take (tests; a loaded machine is "
                         "slower, not shorter)")  # fmt: skip
    args = ap.parse_args(argv)
    if args.smoke:
        # Bounded by requests, not time, so the run is the same on a slow or busy machine.
        args.requests = min(args.requests, 12)
    for name in ("requests", "check_every", "num_pages", "max_requests"):
        if getattr(args, name) <= 0:
            ap.error(f"--{name.replace('_', '-')} must be positive, got {getattr(args, name)}")
    if args.seconds <= 0:
        ap.error(f"--seconds must be positive, got {args.seconds}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    console = Console(stderr=True)
    stats = Soak(args).run(console)
    Console().print(summary_table(stats))
    for msg in stats.failures[:10]:
        console.print(f"[red]{msg}")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({**asdict(stats), "ok": stats.ok}, indent=2) + "\n")
    return 0 if stats.ok else 1


if __name__ == "__main__":
    sys.exit(main())
