"""The serving engine: an online request API, continuous batching, overlapped steps.

`add_request` queues a request; each `step()` schedules one step (decode rows and prefill
chunks of many requests together, within the token budget `chunk_size`), launches it as ONE
device step (a whole-step CUDA graph when one fits) and returns what earlier steps produced.
With `overlap=True` the host plans and launches step n+1 while the device runs step n: a row
that needs the token sampled in step n takes it on the device, and the host learns the value
one step later. `generate` and `score` are loops over this API.

A step never synchronizes the host with the device except to read results that are due:
request state lives on the host and goes up in one copy per step (`step_io`), block tables in
one copy per changed allocator, values are validated once when a request is added, window
trimming is amortized O(1), and the prefix cache exports only pages completed in the step.
Under mode=bi a request's tokens and log-probs depend only on its prompt and sampling
parameters, not on when it was added, what else ran, chunking, preemption, prefix hits,
graph replay or overlap (SPEC section 9).
"""

from __future__ import annotations

import math
import operator
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from omegaconf import DictConfig

from ds41_cache.backend import canonical_device

from ..app_config import RunConfig, Validated, resolve_kv_dtype, validate
from ..model.model import nonfinite_stage_name
from .graphs import Launched, StepKV, StepModel, StepRunner, default_buckets
from .prefix_cache import PrefixCache
from .request import FinishReason, Request, RequestOutput, Result, SamplingParams, Status
from .scheduler import Scheduler, StepPlan
from .step_io import f32_bits, fill_padding


class EngineKV(StepKV, Protocol):
    """What the engine needs of the caches (`ds41_runner.model.KVState`)."""

    page_size: int
    max_requests: int
    max_tokens_per_request: int
    device: torch.device

    def reserve(self, req: int, num_tokens: int) -> None: ...
    def trim(self, req: int, next_pos: int) -> None: ...
    def free(self, req: int) -> None: ...
    def export_prefixes(self, req: int, counts: Sequence[int]) -> list[Any]: ...
    def import_prefix(self, handle: Any, dst_req: int) -> None: ...
    def release_prefix(self, handle: Any) -> None: ...
    def num_free_pages(self) -> int: ...


EngineModel = StepModel
"""What the engine needs of the model (`ds41_runner.model.Model`)."""


@dataclass
class StepRecord:
    step: int
    rows: int
    requests: int
    decode_only: bool
    graph: bool
    seconds: float
    """Host time spent on the step: planning and launching it, then handing its results to
    the requests (not the wait for the device, which runs it asynchronously)."""
    entries: tuple[tuple[int, int, bool], ...] = ()
    """(request id, rows run, whether the step sampled a token for it) per scheduled request."""


@dataclass
class EngineStats:
    """Counters since the engine was built (`generate` and `score` reset them)."""

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


@dataclass
class _InFlight:
    """A launched step whose results are not processed yet."""

    launched: Launched
    samples: list[tuple[Request, int]]
    """Per logit row: its request and what it is (-1: a sampled token; k >= 0: the log-prob
    of score target k)."""
    record: StepRecord


class Engine:
    """Serves requests over one model and its paged caches (see the module doc).

    `graph="cuda_graph"` replays whole-step graphs on CUDA for steps of up to
    `graph_batch_sizes[-1]` rows (default: `default_buckets(chunk_size)`). `overlap` runs the
    host one step ahead of the device. `keep_rows` keeps the full log-prob row of every
    sampled token (tests; costs a host sync per step).
    """

    def __init__(
        self,
        model: EngineModel,
        kv: EngineKV,
        *,
        vocab_size: int | None = None,
        max_tokens: int | None = None,
        chunk_size: int = 32,
        prefix_cache: bool = True,
        graph: str = "eager",
        graph_batch_sizes: Sequence[int] | None = None,
        keep_rows: bool = False,
        compress_ratios: Sequence[int] | None = None,
        overlap: bool = True,
        emulate_graphs: bool = False,
    ) -> None:
        if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size <= 0:
            raise ValueError(f"chunk_size must be a positive int, got {chunk_size!r}")
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
        self.keep_rows = keep_rows
        self.overlap = overlap
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
        use_graphs = graph == "cuda_graph" and (self.device.type == "cuda" or emulate_graphs)
        buckets: list[int] = []
        if use_graphs:
            buckets = list(graph_batch_sizes or default_buckets(chunk_size))
        self.runner = StepRunner(
            model, kv, self.device, self.max_requests, buckets, keep_rows=keep_rows,
            emulate_graphs=emulate_graphs,
        )  # fmt: skip
        self.sched = Scheduler(
            kv,
            chunk_size=chunk_size,
            max_requests=self.max_requests,
            page_size=self.page_size,
            prefix_cache=self.prefix_cache,
        )
        self.stats = EngineStats()
        self.on_step: Callable[[Engine, StepRecord], None] | None = None
        """Called at the end of every `step()` that launched or finished a step, with the
        latest step's record (progress display; `stats.generated` counts what came back)."""
        self._next_id = 0
        self._live: dict[int, Request] = {}
        self._finished_ids: set[int] = set()
        self._inflight: deque[_InFlight] = deque()
        self._outbox: list[RequestOutput] = []
        self._step_no = 0

    @property
    def chunk_size(self) -> int:
        """The per-step token budget (settable between steps)."""
        return self.sched.chunk_size

    @chunk_size.setter
    def chunk_size(self, value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"chunk_size must be a positive int, got {value!r}")
        self.sched.chunk_size = value

    @property
    def graphs(self) -> StepRunner | None:
        """The step runner when it replays graphs (None: every step eager)."""
        return self.runner if self.runner.buckets else None

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_config(
        cls, cfg: DictConfig | Validated, *, model: Any = None, **overrides: Any
    ) -> Engine:
        """Build model, caches and engine from a composed config (`ds41_runner.compose`).

        `model`: reuse a model built for this config (its mode and geometry; new caches are
        made). `overrides` are passed to the Engine constructor (e.g. `keep_rows=True`).
        """
        from ..model import KVState, Model

        v = cfg if isinstance(cfg, Validated) else validate(cfg)
        run: RunConfig = v.run
        if model is not None:
            device = model.device
        elif run.parallel.tp > 1:  # this process's rank of a tensor-parallel group
            from ..parallel.model import build_tp_model

            model = build_tp_model(run, v.model)
            device = model.device
        else:
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
        sizes = list(run.graph.batch_sizes) if run.graph.name == "cuda_graph" else []
        kwargs: dict[str, Any] = dict(
            chunk_size=run.chunk_size,
            prefix_cache=run.prefix_cache,
            graph=run.graph.name,
            graph_batch_sizes=sizes or None,
            overlap=bool(getattr(run, "overlap", True)),
        )
        kwargs.update(overrides)
        return cls(model, kv, **kwargs)

    def clear_prefix_cache(self) -> None:
        """Release every cached prefix (the next requests run cold)."""
        if self.prefix_cache is not None:
            self.prefix_cache.clear()

    def warmup(self) -> None:
        """Capture the CUDA graphs now instead of at first use (every bucket's graph for steps
        without top-k/top-p rows; the variant for steps with them is captured when first
        needed)."""
        self.runner.capture_all()

    # ------------------------------------------------------------------ validation
    def _check_tokens(self, what: str, tokens: object) -> list[int]:
        if not isinstance(tokens, (list, tuple)):
            raise ValueError(f"{what} must be a list of token ids, got {type(tokens).__name__}")
        if len(tokens) == 0:
            raise ValueError(f"{what} is empty")
        # Fast path (one C pass): plain ints in range. Anything else (bools, floats, numpy
        # scalars of other kinds, out-of-range ids) takes the loop below, which names the
        # first bad token.
        if set(map(type, tokens)) == {int} and min(tokens) >= 0 and max(tokens) < self.vocab_size:
            return list(tokens)
        out: list[int] = []
        for j, t in enumerate(tokens):
            if isinstance(t, bool) or not hasattr(t, "__index__"):
                raise ValueError(f"{what}: token {j} must be an int, got {t!r}")
            t = operator.index(t)
            if not 0 <= t < self.vocab_size:
                raise ValueError(
                    f"{what}: token {j} = {t} is outside the vocabulary [0, {self.vocab_size})"
                )
            out.append(t)
        return out

    def _check_params(
        self, prompt_len: int, max_new_tokens: object, seed: object, temperature: object,
        top_k: object, top_p: object, stop_token_ids: object,
    ) -> SamplingParams:  # fmt: skip
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int):
            raise ValueError(f"max_new_tokens must be an int >= 1, got {max_new_tokens!r}")
        if max_new_tokens <= 0:
            raise ValueError(f"max_new_tokens must be an int >= 1, got {max_new_tokens!r}")
        if prompt_len > self.max_tokens:
            raise ValueError(
                f"prompt of {prompt_len} tokens is longer than the model maximum of "
                f"{self.max_tokens} tokens"
            )
        if prompt_len + max_new_tokens > self.max_tokens:
            raise ValueError(
                f"prompt of {prompt_len} tokens + max_new_tokens {max_new_tokens} exceeds the "
                f"model maximum of {self.max_tokens} tokens"
            )
        if isinstance(seed, bool) or not isinstance(seed, int) or not -(2**63) <= seed < 2**63:
            raise ValueError(f"seed must be an int64, got {seed!r}")
        if isinstance(temperature, bool) or not isinstance(temperature, (int, float)):
            raise ValueError(f"temperature must be a float >= 0, got {temperature!r}")
        temp = float(temperature)
        if not (math.isfinite(temp) and temp >= 0):
            raise ValueError(f"temperature must be finite and >= 0, got {temperature!r}")
        if temp != 0 and temp < 1e-6:
            # logits / 1e-40 overflow to -inf everywhere: every draw would be token 0.
            raise ValueError(f"temperature must be 0 (greedy) or >= 1e-6, got {temperature!r}")
        if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 0:
            raise ValueError(f"top_k must be an int >= 0 (0: off), got {top_k!r}")
        if isinstance(top_p, bool) or not isinstance(top_p, (int, float)):
            raise ValueError(f"top_p must be a float in (0, 1], got {top_p!r}")
        if not (0.0 < float(top_p) <= 1.0):
            raise ValueError(f"top_p must be a float in (0, 1], got {top_p!r}")
        if not isinstance(stop_token_ids, (list, tuple, set, frozenset)):
            kind = type(stop_token_ids).__name__
            raise ValueError(f"stop_token_ids must be a sequence of token ids, got {kind}")
        stops = []
        for t in stop_token_ids:
            if isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < self.vocab_size:
                raise ValueError(
                    f"stop_token_ids: {t!r} is not a token id in [0, {self.vocab_size})"
                )
            stops.append(t)
        return SamplingParams(
            max_new_tokens, seed, temp, top_k, float(top_p), tuple(sorted(set(stops)))
        )

    # ------------------------------------------------------------------ online API
    def add_request(
        self,
        prompt: Sequence[int],
        *,
        max_new_tokens: int,
        seed: int | None = None,
        temperature: float = 0.0,
        top_k: int = 0,
        top_p: float = 1.0,
        stop_token_ids: Sequence[int] = (),
        label: str | None = None,
    ) -> int:
        """Queue a generation request; returns its id. Bad input raises ValueError naming the
        field, and the engine is left unchanged. `seed` defaults to the request id."""
        tokens = self._check_tokens("prompt", prompt)
        rid = self._next_id
        params = self._check_params(
            len(tokens), max_new_tokens, rid if seed is None else seed, temperature, top_k,
            top_p, stop_token_ids,
        )  # fmt: skip
        return self._submit(Request(rid, tokens, params, label=label or "")).index

    def _submit(self, req: Request) -> Request:
        self._next_id += 1
        self._live[req.index] = req
        if req.score_from is not None and not req.targets:
            self._finish(req, "length")
        else:
            self.sched.add([req])
        return req

    def add_score_request(
        self, sequence: Sequence[int], prompt_len: int, *, label: str | None = None
    ) -> int:
        """Queue the scoring of `sequence[prompt_len:]` given what precedes it; its outputs
        carry those tokens and their log-probs (equal bitwise to what generation gave them)."""
        seq = self._check_tokens("sequence", sequence)
        if isinstance(prompt_len, bool) or not isinstance(prompt_len, int):
            raise ValueError(f"prompt_len must be an int in [1, {len(seq)}], got {prompt_len!r}")
        if not 1 <= prompt_len <= len(seq):
            raise ValueError(f"prompt_len must be an int in [1, {len(seq)}], got {prompt_len!r}")
        if len(seq) > self.max_tokens:
            raise ValueError(
                f"sequence of {len(seq)} tokens exceeds the model maximum of {self.max_tokens} "
                f"tokens"
            )
        req = Request(
            self._next_id, seq[:-1], SamplingParams(0), label=label or "",
            score_from=prompt_len, targets=seq[prompt_len:],
        )  # fmt: skip
        return self._submit(req).index

    def abort(self, request_id: int) -> None:
        """Stop a request now and free its pages; its last output says `finish_reason="abort"`.

        Raises KeyError for an id this engine never issued, ValueError for a finished one."""
        req = self._live.get(request_id)
        if req is None:
            if request_id in self._finished_ids:
                raise ValueError(f"request {request_id} has already finished")
            raise KeyError(f"no request with id {request_id!r}")
        self._finish(req, "abort")

    def has_unfinished(self) -> bool:
        """True while any request is queued, running, or has results on their way."""
        return bool(self._live) or bool(self._inflight) or bool(self._outbox)

    def step(self) -> list[RequestOutput]:
        """Run one scheduling step; returns what requests produced (one step behind under
        `overlap`). Raises only on an engine fault (the requests in flight are then failed)."""
        t0 = time.perf_counter()
        plan = self.sched.schedule(self._step_no)
        self._collect_failed()
        launched = False
        if plan:
            try:
                self._launch(plan, t0)
            except BaseException as exc:
                self._fail_all(f"engine step failed: {exc}")
                raise
            launched = True
        self._step_no += 1
        keep = 1 if (self.overlap and launched) else 0
        processed = len(self._inflight) > keep
        while len(self._inflight) > keep:
            self._process(self._inflight.popleft())
        if self.on_step is not None and (launched or processed) and self.stats.records:
            self.on_step(self, self.stats.records[-1])
        running = self.sched.running
        if not launched and not self._inflight and running and all(r.pending == 0 for r in running):
            raise RuntimeError("requests wait for results that no step will deliver")
        out, self._outbox = self._outbox, []
        return out

    # ------------------------------------------------------------------ one step
    def _launch(self, plan: StepPlan, t0: float) -> None:
        spare = self.runner.spare_slot
        t = plan.num_rows
        samples: list[tuple[Request, int]] = []
        for req, n in plan.entries:
            end = req.num_computed + n
            if req.score_from is not None:
                # Rows at positions p >= score_from - 1 predict target p - score_from + 1;
                # after a preemption, targets already launched are not scored again.
                first = max(req.num_computed, req.score_from - 1 + req.targets_launched)
                for p in range(first, end):
                    samples.append((req, p - req.score_from + 1))
                req.targets_launched = max(req.targets_launched, end - req.score_from + 1)
            elif end == req.length:
                samples.append((req, -1))
        s = len(samples)
        layout, bucket = self.runner.plan_layout(t, s)
        host_t, slot = self.runner.host_in.take(layout.size)
        host = host_t.numpy()
        fill_padding(host, layout, spare)
        tok: list[int] = []
        src: list[int] = []
        req_idx: list[int] = []
        pos: list[int] = []
        entries: list[tuple[int, int, bool]] = []
        decode_rows = 0
        sampled_ids = {id(r) for r, k in samples if k < 0}
        row_of: dict[int, int] = {}  # the step row of each request's first row
        slot_of: dict[int, int] = {}
        for req, n in plan.entries:
            row_of[id(req)] = len(tok)
            start = req.num_computed
            prompt_len = len(req.prompt)
            known = prompt_len + len(req.generated)
            slot_r = slot_of[id(req)] = self.sched.slot_of(req)
            stop = min(start + n, known)
            if stop <= prompt_len:
                tok += req.prompt[start:stop]
            elif start < stop:
                tok += req.prompt[start:prompt_len] if start < prompt_len else ()
                tok += req.generated[max(start, prompt_len) - prompt_len : stop - prompt_len]
            if start + n > known:  # the in-flight token, still on the device
                if start + n != known + 1:
                    raise RuntimeError(f"{req.label}: more than one token in flight")
                tok.append(0)
                src += [-1] * (n - 1)
                src.append(slot_r)
            else:
                src += [-1] * n
            req_idx += [slot_r] * n
            pos += range(start, start + n)
            if n == 1 and start + 1 == req.length:
                decode_rows += 1
            entries.append((req.index, n, id(req) in sampled_ids))
        host[layout.span("tokens")][:t] = tok
        host[layout.span("token_source")][:t] = src
        host[layout.span("req_idx")][:t] = req_idx
        host[layout.span("pos")][:t] = pos
        # Logit rows: the row of each sampled request, and every scored row.
        rows_l, seeds, spos, store, topk, targets, temps, topps = [], [], [], [], [], [], [], []
        for req, k in samples:
            first_row = row_of[id(req)]
            if k < 0:
                p = req.length - 1
                params = req.params
                rows_l.append(first_row + p - req.num_computed)
                seeds.append(params.seed)
                spos.append(p)
                store.append(slot_of[id(req)])
                topk.append(params.top_k)
                targets.append(-1)
                temps.append(params.temperature)
                topps.append(params.top_p)
            else:
                assert req.score_from is not None
                p = req.score_from - 1 + k
                rows_l.append(first_row + p - req.num_computed)
                seeds.append(0)
                spos.append(p)
                store.append(spare)
                topk.append(0)
                targets.append(req.targets[k])
                temps.append(0.0)
                topps.append(1.0)
        if s:
            host[layout.span("rows")][:s] = rows_l
            host[layout.span("seeds")][:s] = seeds
            host[layout.span("positions")][:s] = spos
            host[layout.span("store_slot")][:s] = store
            host[layout.span("top_k")][:s] = topk
            host[layout.span("targets")][:s] = targets
            host[layout.span("temperature")][:s] = f32_bits(temps)
            host[layout.span("top_p")][:s] = f32_bits(topps)
        launched = self.runner.launch(host_t, slot, layout, bucket, s)
        for req, k in samples:
            if k < 0:
                req.inflight += 1
        self.sched.complete(plan)
        rec = StepRecord(
            self._step_no, t, len(plan.entries), plan_decode_only(plan, decode_rows),
            launched.graph, time.perf_counter() - t0, tuple(entries),
        )  # fmt: skip
        self._inflight.append(_InFlight(launched, samples, rec))
        st = self.stats
        st.steps += 1
        st.rows += t
        st.decode_rows += decode_rows
        st.prefill_rows += t - decode_rows
        st.graph_replays += int(launched.graph)
        st.records.append(rec)

    def _process(self, fl: _InFlight) -> None:
        """Hand a finished step's tokens and log-probs to their requests."""
        tokens, logprobs, stages = fl.launched.wait()
        t0 = time.perf_counter()
        new: dict[int, tuple[Request, list[int], list[float]]] = {}
        for j, (req, k) in enumerate(fl.samples):
            if req.done:
                continue  # aborted, failed or stopped while this step ran: its rows are waste
            if not math.isfinite(logprobs[j]):
                # A NaN/inf activation: fail this request alone (its rows never mix with
                # others), naming the first block whose output was non-finite.
                p = req.known - 1 if k < 0 else (req.score_from or 0) - 1 + k
                self._fail(req, f"{req.label}: the model produced a non-finite log-prob at "
                                f"position {p} (NaN or inf activations, first in "
                                f"{nonfinite_stage_name(stages[j])})")  # fmt: skip
                continue
            if k < 0:
                req.inflight -= 1
                req.generated.append(tokens[j])
                req.logprobs.append(logprobs[j])
                if fl.launched.rows is not None:
                    req.rows.append(fl.launched.rows[j])
                self.stats.generated += 1
            else:
                req.logprobs.append(logprobs[j])
            entry = new.setdefault(req.index, (req, [], []))
            entry[1].append(tokens[j])
            entry[2].append(logprobs[j])
        for req, toks, lps in new.values():
            reason: FinishReason | None = None
            if req.score_from is not None:
                if len(req.logprobs) == len(req.targets):
                    reason = "length"
            elif req.params.stop_token_ids and toks[-1] in req.params.stop_token_ids:
                reason = "stop"
            elif len(req.generated) >= req.max_new_tokens:
                reason = "length"
            out = RequestOutput(req.index, toks, lps)
            if reason is not None:
                self._finish(req, reason, emit=False)
                out.finished, out.finish_reason = True, reason
            self._outbox.append(out)
        fl.record.seconds += time.perf_counter() - t0

    def _finish(self, req: Request, reason: FinishReason, *, emit: bool = True) -> None:
        self.sched.finish(req)
        req.finish_reason = reason
        self._live.pop(req.index, None)
        self._finished_ids.add(req.index)
        if emit:
            self._outbox.append(RequestOutput(req.index, [], [], True, reason, req.error))

    def _fail(self, req: Request, message: str) -> None:
        req.error = message
        self._finish(req, "error")
        req.status = Status.FAILED
        self.stats.failed += 1

    def _collect_failed(self) -> None:
        """Report the requests the scheduler failed (it already freed them)."""
        while self.sched.failed:
            req = self.sched.failed.pop(0)
            self._fail(req, req.error or f"{req.label}: failed")

    def _fail_all(self, message: str) -> None:
        for req in list(self._live.values()):
            self._fail(req, req.error or f"{req.label}: {message}")
        self._inflight.clear()

    # ------------------------------------------------------------------ generate / score
    def generate(
        self,
        prompts: list[list[int]],
        max_new_tokens: int | list[int],
        seeds: list[int] | None = None,
        arrivals: list[int] | None = None,
        *,
        temperature: float | list[float] = 0.0,
        top_k: int | list[int] = 0,
        top_p: float | list[float] = 1.0,
        stop_token_ids: Sequence[int] = (),
    ) -> list[Result]:
        """Generate for every prompt; request i is added at step `arrivals[i]` (default 0).

        Sampling seed `seeds[i]` (default i), temperature 0 = greedy. Returns one `Result` per
        prompt in input order; a bad request gets `Result.error` naming it ("request i") and
        does not affect the others.
        """
        if not isinstance(prompts, (list, tuple)):
            raise TypeError(f"prompts must be a list of token-id lists, got {type(prompts)}")
        n = len(prompts)
        mnts = _per_request("max_new_tokens", max_new_tokens, n, lambda i: 0)
        seed_l = _per_request("seeds", seeds, n, lambda i: i)
        arr_l = _per_request("arrivals", arrivals, n, lambda i: 0)
        temps = _per_request("temperature", temperature, n, lambda i: 0.0)
        topks = _per_request("top_k", top_k, n, lambda i: 0)
        topps = _per_request("top_p", top_p, n, lambda i: 1.0)
        for i, (s, a) in enumerate(zip(seed_l, arr_l, strict=True)):
            if isinstance(s, bool) or not isinstance(s, int) or not -(2**63) <= s < 2**63:
                raise ValueError(f"seeds[{i}] must be an int64, got {s!r}")
            if isinstance(a, bool) or not isinstance(a, int) or a < 0:
                raise ValueError(f"arrivals[{i}] must be an int >= 0, got {a!r}")
        self.stats = EngineStats()
        results: list[Result | None] = [None] * n
        reqs: dict[int, Request] = {}
        order = sorted(range(n), key=lambda i: (arr_l[i], i))
        nxt = 0
        step = 0
        start = time.perf_counter()
        try:
            while nxt < n or any(not r.done for r in reqs.values()) or self._inflight:
                while nxt < n and arr_l[order[nxt]] <= step:
                    i = order[nxt]
                    nxt += 1
                    try:
                        rid = self.add_request(
                            prompts[i], max_new_tokens=mnts[i], seed=seed_l[i],
                            temperature=temps[i], top_k=topks[i], top_p=topps[i],
                            stop_token_ids=stop_token_ids, label=f"request {i}",
                        )  # fmt: skip
                        reqs[i] = self._live[rid]
                    except ValueError as exc:
                        plen = len(prompts[i]) if isinstance(prompts[i], (list, tuple)) else 0
                        results[i] = Result([], [], prompt_len=plen, error=f"request {i}: {exc}")
                        self.stats.failed += 1
                if not self.has_unfinished() and nxt < n:
                    step = max(step + 1, arr_l[order[nxt]])  # idle: jump to the next arrival
                    continue
                self.step()
                step += 1
        except BaseException:
            for req in reqs.values():
                if not req.done:
                    self._finish(req, "abort", emit=False)
            self._outbox.clear()
            raise
        self.stats.seconds = time.perf_counter() - start
        self.stats.preemptions = sum(r.preemptions for r in reqs.values())
        self._outbox.clear()
        for i, req in reqs.items():
            rows = torch.stack(req.rows) if (self.keep_rows and req.rows) else None
            results[i] = Result(
                list(req.generated), list(req.logprobs), prompt_len=len(req.prompt),
                error=req.error, preemptions=req.preemptions,
                prefix_hit_tokens=req.prefix_hit_tokens, rows=rows,
                finish_reason=req.finish_reason,
            )  # fmt: skip
            self.stats.prefix_hit_tokens += req.prefix_hit_tokens
        return [r for r in results if r is not None]

    def score(self, sequences: list[list[int]], prompt_lens: list[int]) -> list[list[float]]:
        """Log-probs of `sequences[i][prompt_lens[i]:]`, through the same steps as generation.

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
            try:
                seq_l = self._check_tokens(f"sequence {i}", seq)
            except ValueError as exc:
                raise ValueError(str(exc)) from None
            if isinstance(plen, bool) or not isinstance(plen, int) or not 1 <= plen <= len(seq_l):
                raise ValueError(
                    f"sequence {i}: prompt_lens[{i}] must be an int in [1, {len(seq_l)}], "
                    f"got {plen!r}"
                )
            if len(seq_l) > self.max_tokens:
                raise ValueError(
                    f"sequence {i}: {len(seq_l)} tokens exceed the model maximum of "
                    f"{self.max_tokens} tokens"
                )
        self.stats = EngineStats()
        reqs = []
        for i, (s, p) in enumerate(zip(sequences, prompt_lens, strict=True)):
            rid = self.add_score_request(s, p, label=f"sequence {i}")
            reqs.append(self._live.get(rid))
        try:
            while any(r is not None and not r.done for r in reqs) or self._inflight:
                self.step()
        except BaseException:
            for r in reqs:
                if r is not None and not r.done:
                    self._finish(r, "abort", emit=False)
            raise
        finally:
            self._outbox.clear()
        out: list[list[float]] = []
        for r in reqs:
            if r is None:  # nothing to score (prompt_len == len(sequence))
                out.append([])
                continue
            if r.error is not None:
                raise ValueError(r.error)
            out.append(list(r.logprobs))
        return out

    # ------------------------------------------------------------------ reporting helpers
    def bytes_per_token(self, context_len: int) -> float:
        """Cache bytes per token of a context of `context_len` tokens (all layers)."""
        return float(self.kv.bytes_per_token(context_len))  # type: ignore[attr-defined]


def plan_decode_only(plan: StepPlan, decode_rows: int) -> bool:
    return bool(plan.entries) and decode_rows == len(plan.entries) == plan.num_rows


def _per_request(name: str, value: object, n: int, default: Callable[[int], object]) -> list[Any]:
    if value is None:
        return [default(i) for i in range(n)]
    if isinstance(value, (list, tuple)):
        if len(value) != n:
            raise ValueError(f"{name} must have one entry per prompt ({n}), got {len(value)}")
        return list(value)
    return [value] * n


__all__ = [
    "Engine",
    "EngineStats",
    "RequestOutput",
    "Result",
    "SamplingParams",
    "Status",
    "StepRecord",
    "resolve_device",
]
