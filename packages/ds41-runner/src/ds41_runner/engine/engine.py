"""The engine: generate with continuous batching and chunked prefill, and score.

Each step's rows (prefill chunks and decode tokens of every scheduled request) go through one
`model.forward`, so every layer runs one attention call per step. Sampling is keyed by
(seed, position) only. Under mode=bi every per-token result is independent of the batch
(SPEC section 9), so a request's tokens and log-probs do not depend on arrivals, chunk size,
preemption, prefix-cache hits or CUDA-graph replay.
"""

from __future__ import annotations

import math
import operator
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from omegaconf import DictConfig

from ds41_cache.backend import canonical_device

from ..config import RunConfig, Validated, resolve_kv_dtype, validate
from .graphs import DecodeGraphs
from .prefix_cache import PrefixCache
from .request import Request, Result, Status
from .scheduler import Scheduler, StepPlan, is_cache_full


@dataclass
class StepRecord:
    step: int
    rows: int
    requests: int
    decode_only: bool
    graph: bool
    seconds: float


@dataclass
class EngineStats:
    """Counters of the last `generate` call."""

    steps: int = 0
    rows: int = 0
    prefill_rows: int = 0
    decode_rows: int = 0
    generated: int = 0
    preemptions: int = 0
    prefix_hit_tokens: int = 0
    graph_replays: int = 0
    failed: int = 0
    seconds: float = 0.0
    records: list[StepRecord] = field(default_factory=list)


def resolve_device(device: str) -> torch.device:
    """`auto` -> cuda when available, else cpu."""
    if device == "auto":
        return canonical_device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device=cuda but torch.cuda.is_available() is False; use device=cpu")
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be one of ['auto', 'cpu', 'cuda'], got {device!r}")
    return canonical_device(device)


class Engine:
    """Serves `generate` and `score` over one model and its paged caches.

    `model` follows the runner contract (`forward(tokens, req_idx, pos, kv, *, validate)`),
    `kv` is its `KVState`. `graph="cuda_graph"` replays captured decode steps on CUDA.
    """

    def __init__(
        self,
        model: Any,
        kv: Any,
        *,
        vocab_size: int | None = None,
        max_tokens: int | None = None,
        chunk_size: int = 32,
        prefix_cache: bool = True,
        graph: str = "eager",
        graph_batch_sizes: Sequence[int] = (1, 2, 4, 8, 16, 32),
        keep_rows: bool = False,
        compress_ratios: Sequence[int] | None = None,
    ) -> None:
        if chunk_size <= 0:
            raise ValueError(f"chunk_size must be a positive int, got {chunk_size}")
        if graph not in ("eager", "cuda_graph"):
            raise ValueError(f"graph must be 'eager' or 'cuda_graph', got {graph!r}")
        self.model = model
        self.kv = kv
        model_cfg = getattr(model, "cfg", None)
        if vocab_size is None:
            vocab_size = int(getattr(model_cfg, "vocab_size", 0)) or None
        if vocab_size is None or vocab_size <= 0:
            raise ValueError(f"vocab_size must be a positive int (or model.cfg), got {vocab_size}")
        limit = int(kv.max_tokens_per_request)
        if model_cfg is not None and hasattr(model_cfg, "max_position"):
            limit = min(limit, int(model_cfg.max_position))
        self.vocab_size: int = vocab_size
        self.max_tokens: int = limit if max_tokens is None else min(limit, max_tokens)
        self.chunk_size = chunk_size
        self.keep_rows = keep_rows
        self.device = torch.device(kv.device)
        self.page_size: int = kv.page_size
        self.max_requests: int = kv.max_requests
        self.prefix_cache: PrefixCache | None = None
        if compress_ratios is None:
            compress_ratios = tuple(getattr(model_cfg, "compress_ratios", ()))
        if prefix_cache:
            bad = sorted({m for m in compress_ratios if m > 0 and self.page_size % m})
            if bad:
                # Prefixes end on page boundaries; a compressor group must not straddle one.
                raise ValueError(
                    f"page_size must be a multiple of every compress ratio {bad} when the "
                    f"prefix cache is on, got {self.page_size}"
                )
            self.prefix_cache = PrefixCache(kv, self.page_size)
        self.graphs: DecodeGraphs | None = None
        if graph == "cuda_graph" and self.device.type == "cuda":
            self.graphs = DecodeGraphs(model, kv, graph_batch_sizes, self.device)
        self.stats = EngineStats()
        self.on_step: Callable[[Engine, StepRecord], None] | None = None
        """Called after every step (progress display)."""

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_config(cls, cfg: DictConfig | Validated, **overrides: Any) -> Engine:
        """Build model, caches and engine from a composed config (`ds41_runner.compose`).

        `overrides` are passed to the Engine constructor (e.g. `keep_rows=True`).
        """
        from ..model import KVState, Model

        v = cfg if isinstance(cfg, Validated) else validate(cfg)
        run: RunConfig = v.run
        device = resolve_device(run.device)
        model = Model(
            v.model, mode=run.mode.name, backend=run.backend, device=device, seed=run.seed
        )
        kv = KVState(
            v.model,
            kv_dtype=resolve_kv_dtype(run.kv_dtype.name, run.mode.name),
            max_requests=run.max_requests,
            max_tokens_per_request=run.max_tokens_per_request,
            num_pages=run.num_pages,
            page_size=run.page_size,
            device=device,
        )
        kwargs: dict[str, Any] = dict(
            chunk_size=run.chunk_size,
            prefix_cache=run.prefix_cache,
            graph=run.graph.name,
            graph_batch_sizes=tuple(run.graph.batch_sizes),
        )
        kwargs.update(overrides)
        return cls(model, kv, **kwargs)

    def clear_prefix_cache(self) -> None:
        """Release every cached prefix (the next requests run cold)."""
        if self.prefix_cache is not None:
            self.prefix_cache.clear()

    # ------------------------------------------------------------------ validation
    def _check_tokens(self, what: str, tokens: Any) -> str | None:
        if not isinstance(tokens, (list, tuple)):
            return f"{what} must be a list of token ids, got {type(tokens).__name__}"
        if len(tokens) == 0:
            return f"{what} is empty"
        for j, t in enumerate(tokens):
            if isinstance(t, bool) or not hasattr(t, "__index__"):
                return f"{what}: token {j} must be an int, got {t!r}"
            t = operator.index(t)
            if not 0 <= t < self.vocab_size:
                return f"{what}: token {j} = {t} is outside the vocabulary [0, {self.vocab_size})"
        return None

    def _check_request(self, i: int, prompt: Any, max_new: Any, temp: float) -> str | None:
        err = self._check_tokens(f"request {i}: prompt", prompt)
        if err is not None:
            return err
        if isinstance(max_new, bool) or not isinstance(max_new, int) or max_new <= 0:
            return f"request {i}: max_new_tokens must be an int >= 1, got {max_new!r}"
        if len(prompt) > self.max_tokens:
            return (
                f"request {i}: prompt of {len(prompt)} tokens is longer than the model maximum "
                f"of {self.max_tokens} tokens"
            )
        if len(prompt) + max_new > self.max_tokens:
            return (
                f"request {i}: prompt of {len(prompt)} tokens + max_new_tokens {max_new} "
                f"exceeds the model maximum of {self.max_tokens} tokens"
            )
        if not (math.isfinite(temp) and temp >= 0):
            return f"request {i}: temperature must be finite and >= 0, got {temp}"
        return None

    @staticmethod
    def _per_request(name: str, value: Any, n: int, default: Any) -> list[Any]:
        if value is None:
            return [default(i) for i in range(n)]
        if isinstance(value, (list, tuple)):
            if len(value) != n:
                raise ValueError(f"{name} must have one entry per prompt ({n}), got {len(value)}")
            return list(value)
        return [value] * n

    # ------------------------------------------------------------------ generate
    def generate(
        self,
        prompts: list[list[int]],
        max_new_tokens: int | list[int],
        seeds: list[int] | None = None,
        arrivals: list[int] | None = None,
        *,
        temperature: float | list[float] = 0.0,
    ) -> list[Result]:
        """Generate for every prompt; request i arrives at step `arrivals[i]` (default 0).

        Sampling seed `seeds[i]` (default i), temperature 0 = greedy. Returns one `Result` per
        prompt in input order; a bad request gets `Result.error` naming it and does not affect
        the others.
        """
        if not isinstance(prompts, (list, tuple)):
            raise TypeError(f"prompts must be a list of token-id lists, got {type(prompts)}")
        n = len(prompts)
        mnts = self._per_request("max_new_tokens", max_new_tokens, n, lambda i: 0)
        seed_l = self._per_request("seeds", seeds, n, lambda i: i)
        arr_l = self._per_request("arrivals", arrivals, n, lambda i: 0)
        temps = self._per_request("temperature", temperature, n, lambda i: 0.0)
        for i, (s, a) in enumerate(zip(seed_l, arr_l, strict=True)):
            if isinstance(s, bool) or not isinstance(s, int) or not -(2**63) <= s < 2**63:
                raise ValueError(f"seeds[{i}] must be an int64, got {s!r}")
            if isinstance(a, bool) or not isinstance(a, int) or a < 0:
                raise ValueError(f"arrivals[{i}] must be an int >= 0, got {a!r}")

        results: list[Result | None] = [None] * n
        requests: list[Request] = []
        for i in range(n):
            temp = float(temps[i])
            err = self._check_request(i, prompts[i], mnts[i], temp)
            if err is not None:
                plen = len(prompts[i]) if isinstance(prompts[i], (list, tuple)) else 0
                results[i] = Result([], [], prompt_len=plen, error=err)
                continue
            requests.append(
                Request(
                    i, [operator.index(t) for t in prompts[i]], mnts[i], seed_l[i], temp, arr_l[i]
                )
            )

        self.stats = EngineStats(failed=sum(r is not None for r in results))
        sched = Scheduler(
            self.kv,
            chunk_size=self.chunk_size,
            max_requests=self.max_requests,
            page_size=self.page_size,
            prefix_cache=self.prefix_cache,
        )
        sched.add(requests)
        replays_before = self.graphs.replays if self.graphs is not None else 0
        start = time.perf_counter()
        step = 0
        try:
            while sched.has_work:
                plan = sched.schedule(step)
                if plan:
                    self._run_step(plan, sched)
                    step += 1
                    continue
                nxt = sched.next_arrival()
                if sched.running or nxt is None:
                    if not sched.has_work:
                        break
                    raise RuntimeError(f"scheduler made no progress at step {step}")
                step = max(step + 1, nxt)
        finally:
            sched.abort()  # after an exception mid-run: give the slots back
        self.stats.seconds = time.perf_counter() - start
        self.stats.preemptions = sched.preemptions
        self.stats.failed += len(sched.failed)
        if self.graphs is not None:
            self.stats.graph_replays = self.graphs.replays - replays_before

        for req in requests:
            rows = torch.stack(req.rows) if (self.keep_rows and req.rows) else None
            results[req.index] = Result(
                list(req.generated),
                list(req.logprobs),
                prompt_len=len(req.prompt),
                error=req.error,
                preemptions=req.preemptions,
                prefix_hit_tokens=req.prefix_hit_tokens,
                rows=rows,
            )
            self.stats.prefix_hit_tokens += req.prefix_hit_tokens
        return [r for r in results if r is not None]

    def _run_step(self, plan: StepPlan, sched: Scheduler) -> None:
        t0 = time.perf_counter()
        tokens: list[int] = []
        slots: list[int] = []
        positions: list[int] = []
        sample_at: list[tuple[int, Request]] = []
        for req, n in plan.entries:
            start = req.num_computed
            tokens += req.tokens[start : start + n]
            slots += [sched.slot_of(req)] * n
            positions += range(start, start + n)
            if start + n == req.length:
                sample_at.append((len(tokens) - 1, req))
        decode_only = plan.decode_only
        decode_rows = sum(1 for req, n in plan.entries if n == 1 and req.pending == 1)
        logprobs, used_graph = self._forward(tokens, slots, positions, decode_only)

        new_tokens: list[int] = []
        chosen: list[float] = []
        rows_cpu: torch.Tensor | None = None
        if sample_at:
            from ..ops.sampling import sample

            idx = torch.tensor([r for r, _ in sample_at], dtype=torch.int64, device=self.device)
            rows = logprobs.index_select(0, idx)
            reqs = [q for _, q in sample_at]
            seeds = torch.tensor([q.seed for q in reqs], dtype=torch.int64, device=self.device)
            pos = torch.tensor([q.length - 1 for q in reqs], dtype=torch.int32, device=self.device)
            temp = torch.tensor(
                [q.temperature for q in reqs], dtype=torch.float32, device=self.device
            )
            new = sample(rows, seeds, pos, temp)
            lp = rows.gather(1, new[:, None])[:, 0]
            new_tokens = new.tolist()
            chosen = lp.tolist()
            if self.keep_rows:
                rows_cpu = rows.cpu()

        sched.complete(plan)
        for k, (_, req) in enumerate(sample_at):
            req.generated.append(int(new_tokens[k]))
            req.logprobs.append(float(chosen[k]))
            if rows_cpu is not None:
                req.rows.append(rows_cpu[k])
            self.stats.generated += 1
            if len(req.generated) >= req.max_new_tokens:
                sched.finish(req)

        rec = StepRecord(
            plan.step, len(tokens), len(plan.entries), decode_only, used_graph,
            time.perf_counter() - t0,
        )  # fmt: skip
        st = self.stats
        st.steps += 1
        st.rows += len(tokens)
        st.decode_rows += decode_rows
        st.prefill_rows += len(tokens) - decode_rows
        st.records.append(rec)
        if self.on_step is not None:
            self.on_step(self, rec)

    def _forward(
        self, tokens: list[int], slots: list[int], positions: list[int], decode_only: bool
    ) -> tuple[torch.Tensor, bool]:
        t = torch.tensor(tokens, dtype=torch.int64, device=self.device)
        r = torch.tensor(slots, dtype=torch.int32, device=self.device)
        p = torch.tensor(positions, dtype=torch.int32, device=self.device)
        if self.graphs is not None and decode_only and self.graphs.bucket(len(tokens)):
            return self.graphs.run(t, r, p), True
        out: torch.Tensor = self.model.forward(t, r, p, self.kv, validate=True)
        return out, False

    # ------------------------------------------------------------------ score
    def score(self, sequences: list[list[int]], prompt_lens: list[int]) -> list[list[float]]:
        """Log-probs of `sequences[i][prompt_lens[i]:]`, each sequence one prefill.

        Equals `generate`'s `Result.logprobs` bitwise for the same tokens (mode=bi). Raises
        ValueError naming the sequence on bad input, before computing anything.
        """
        if not isinstance(sequences, (list, tuple)) or not isinstance(prompt_lens, (list, tuple)):
            raise TypeError("sequences and prompt_lens must be lists")
        if len(sequences) != len(prompt_lens):
            raise ValueError(
                f"prompt_lens must have one entry per sequence ({len(sequences)}), "
                f"got {len(prompt_lens)}"
            )
        for i, (seq, plen) in enumerate(zip(sequences, prompt_lens, strict=True)):
            err = self._check_tokens(f"sequence {i}", seq)
            if err is not None:
                raise ValueError(err)
            if isinstance(plen, bool) or not isinstance(plen, int) or not 1 <= plen <= len(seq):
                raise ValueError(
                    f"sequence {i}: prompt_lens[{i}] must be an int in [1, {len(seq)}], "
                    f"got {plen!r}"
                )
            if len(seq) > self.max_tokens:
                raise ValueError(
                    f"sequence {i}: {len(seq)} tokens exceed the model maximum of "
                    f"{self.max_tokens} tokens"
                )
        return [
            self._score_one(i, s, p)
            for i, (s, p) in enumerate(zip(sequences, prompt_lens, strict=True))
        ]

    def _score_one(self, i: int, seq: list[int], plen: int) -> list[float]:
        seq = [operator.index(t) for t in seq]
        slot = 0
        n = len(seq)
        while True:
            try:
                self.kv.reserve(slot, n)
                break
            except Exception as exc:
                if not is_cache_full(exc):
                    raise
                if self.prefix_cache is not None and self.prefix_cache.evict_one():
                    continue
                self.kv.free(slot)
                raise ValueError(
                    f"sequence {i}: the cache is too small for its {n} tokens ({exc})"
                ) from exc
        try:
            out, _ = self._forward(list(seq), [slot] * n, list(range(n)), decode_only=False)
            if plen == n:
                return []
            target = torch.tensor(seq[plen:], dtype=torch.int64, device=self.device)
            lp = out[plen - 1 : n - 1].gather(1, target[:, None])[:, 0]
            return [float(x) for x in lp.tolist()]
        finally:
            self.kv.free(slot)

    # ------------------------------------------------------------------ reporting helpers
    def bytes_per_token(self, context_len: int) -> float:
        """Cache bytes per token of a context of `context_len` tokens (all layers)."""
        return float(self.kv.bytes_per_token(context_len))


__all__ = ["Engine", "EngineStats", "Result", "Status", "StepRecord", "resolve_device"]
