"""The device side of a step, eager or replayed from a whole-step CUDA graph.

Every causal row, prefill or decode, goes through the same kernels, so one graph captured for
a bucket of `B` rows replays ANY mix of up to `B` rows: a step of `T` rows replays the smallest
bucket `B >= T`; rows `T..B-1` are padding (request -1: they write nothing) and padding logit
rows store their token in a spare slot. The step body takes its inputs from one device buffer
(`step_io`), picks the rows that need logits, samples them on the device (keyed by
(seed, position)), keeps each request's last token on the device for the next step and packs
tokens and log-probs into one output buffer. Steps past the largest bucket, or with more logit
rows than a bucket holds (score requests), run the same body eagerly.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch

from ..ops.sampling import sample
from ..ops.vocab import RowSampling
from .step_io import HostBuffers, StepInputs, StepLayout, device_views, fill_padding

OUT_SECTIONS = 3
"""Sections of a step's packed output, `capacity` int64 each: tokens, log-prob bits, stages."""

MAX_BUCKET = 2048
"""Largest captured step (rows); larger steps run eagerly."""


def default_buckets(token_budget: int) -> list[int]:
    """Capture sizes for a per-step token budget: 1, 2, 4 .. 512, then multiples of 256, up to
    the budget (capped at `MAX_BUCKET`), the budget itself included."""
    top = min(token_budget, MAX_BUCKET)
    sizes = [b for b in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512) if b < top]
    sizes += [b for b in range(768, top, 256)]
    return sorted(set(sizes + [top]))


def step_filters(host: torch.Tensor, layout: StepLayout, logit_rows: int) -> bool:
    """Whether a logit row of the step buffer `host` (int64, CPU) samples with top-k or top-p
    (temperature > 0 and top_k > 0 or top_p < 1): read on the host, so a step's graph is
    chosen without a device sync."""
    h = host.numpy()  # numpy views: a few microseconds of host time per step
    s = logit_rows
    temp = h[layout.span("temperature")][:s].astype(np.int32).view(np.float32)
    top_k = h[layout.span("top_k")][:s]
    top_p = h[layout.span("top_p")][:s].astype(np.int32).view(np.float32)
    return bool(((temp > 0) & ((top_k > 0) | (top_p < 1))).any())


class StepModel(Protocol):
    """The model contract of a step (`ds41_runner.model.Model`); `kv` is the model's own
    cache type (`KVState`), so it stays `Any` here."""

    def forward(
        self,
        tokens: torch.Tensor,
        req_idx: torch.Tensor,
        pos: torch.Tensor,
        kv: Any,
        *,
        validate: bool = True,
        logit_rows: torch.Tensor | None = None,
        nonfinite_stage: torch.Tensor | None = None,
    ) -> torch.Tensor: ...


class StepKV(Protocol):
    def flush(self) -> None: ...


@dataclass
class _Captured:
    replay: Callable[[], None]
    out: torch.Tensor
    logp: torch.Tensor


@dataclass
class Launched:
    """A step on its way: its packed outputs land in `out_host` once `event` completes."""

    out_host: torch.Tensor
    event: torch.cuda.Event | None
    logit_rows: int
    capacity: int
    """Logit-row slots of the step's layout (`logit_rows` real ones, then padding)."""
    rows: torch.Tensor | None
    graph: bool

    def wait(self) -> tuple[list[int], list[float], list[int]]:
        """Sampled (or target) tokens, their log-probs and the first non-finite stage of each
        row (`Model.forward(nonfinite_stage=)`; -1 = none) of the `logit_rows` real rows."""
        if self.event is not None:
            self.event.synchronize()
        s, cap = self.logit_rows, self.capacity
        packed = self.out_host[: OUT_SECTIONS * cap].numpy()
        tokens = packed[:s].tolist()
        logprobs = packed[cap : cap + s].astype(np.int32).view(np.float32).tolist()
        stages = packed[2 * cap : 2 * cap + s].tolist()
        return tokens, logprobs, stages


class StepRunner:
    """Uploads a step's inputs, runs the model and the sampler, and fetches the results."""

    def __init__(
        self,
        model: StepModel,
        kv: StepKV,
        device: torch.device,
        max_requests: int,
        buckets: Sequence[int] = (),
        *,
        keep_rows: bool = False,
        emulate_graphs: bool = False,
    ) -> None:
        sizes = list(buckets)
        if sizes and (sizes != sorted(set(sizes)) or sizes[0] <= 0):
            raise ValueError(f"buckets must be positive and strictly increasing, got {sizes}")
        if sizes and device.type != "cuda" and not emulate_graphs:
            raise ValueError(f"CUDA graphs need a CUDA device, got {device}")
        self.model = model
        self.kv = kv
        self.device = device
        self.max_requests = max_requests
        self.spare_slot = max_requests
        self.buckets = sizes
        self.keep_rows = keep_rows
        self.emulate = emulate_graphs and device.type != "cuda"
        # The last sampled token of each request slot (+ the spare slot padding rows write).
        self.slot_tokens = torch.zeros(max_requests + 1, dtype=torch.int64, device=device)
        self._graphs: dict[tuple[int, bool], _Captured] = {}
        self._pool: Any = None  # the graphs share one memory pool
        top = self.layout_for(sizes[-1]) if sizes else None
        self._graph_in = (
            torch.zeros(top.size, dtype=torch.int64, device=device) if top is not None else None
        )
        self.host_in = HostBuffers(device)
        self.host_out = HostBuffers(device)
        self.replays = 0

    # ------------------------------------------------------------------ layout
    def logit_capacity(self, rows: int) -> int:
        """Logit rows a captured step of `rows` rows holds: one per request at most."""
        return min(rows, self.max_requests)

    def layout_for(self, bucket: int) -> StepLayout:
        return StepLayout(bucket, self.logit_capacity(bucket))

    def plan_layout(self, rows: int, logit_rows: int) -> tuple[StepLayout, int | None]:
        """The layout a step of `rows` rows and `logit_rows` logit rows uses, and its bucket
        (None: eager, exact sizes)."""
        i = bisect.bisect_left(self.buckets, rows)
        if i < len(self.buckets):
            b = self.buckets[i]
            if logit_rows <= self.logit_capacity(b):
                return self.layout_for(b), b
        return StepLayout(rows, logit_rows), None

    # ------------------------------------------------------------------ the step body
    def body(self, inp: StepInputs, filters: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """Model, sampler and token bookkeeping on the device: returns the packed outputs
        int64 `[3S]` (tokens, fp32 log-prob bits, first non-finite stage) and the log-prob
        rows f32 `[S, V]` (`[S, 0]` unless `keep_rows`, for a model with `pick`).

        `filters`: some logit row samples with top-k or top-p (`step_filters`); a model's
        `pick` then also reads the full logits (rows without a filter get the same bits)."""
        own = inp.token_source >= 0
        carried = self.slot_tokens.index_select(0, inp.token_source.clamp(min=0))
        tokens = torch.where(own, carried, inp.tokens)
        stage = torch.empty_like(tokens)
        pick = getattr(self.model, "pick", None)
        if pick is not None:
            rs = RowSampling(inp.seeds, inp.positions, inp.temperature, inp.targets, inp.top_k,
                             inp.top_p)  # fmt: skip
            got = pick(
                tokens, inp.req_idx, inp.pos, self.kv, rs, logit_rows=inp.rows, validate=False,
                nonfinite_stage=stage, filters=filters, full_rows=self.keep_rows,
            )  # fmt: skip
            new, chosen, lp = got.new, got.chosen, got.logprob
            logp = got.rows if got.rows is not None else lp.new_empty((lp.shape[0], 0))
        else:  # a model with `forward` only (the engine tests' fakes): full log-prob rows
            logp = self.model.forward(
                tokens, inp.req_idx, inp.pos, self.kv, validate=False, logit_rows=inp.rows,
                nonfinite_stage=stage,
            )  # fmt: skip
            new = sample(logp, inp.seeds, inp.positions, inp.temperature, inp.top_k, inp.top_p)
            chosen = torch.where(inp.targets >= 0, inp.targets, new)
            lp = logp.gather(1, chosen[:, None])[:, 0]
        self.slot_tokens.index_copy_(0, inp.store_slot, new)
        out = torch.cat(
            [chosen, lp.view(torch.int32).to(torch.int64), stage.index_select(0, inp.rows)]
        )
        return out, logp

    # ------------------------------------------------------------------ graphs
    def capture_all(self) -> None:
        """Capture every bucket now (largest first, so the smaller ones reuse its memory): the
        graphs of steps without top-k/top-p rows; a bucket's variant for steps with such rows
        (`step_filters`) is captured at its first use, since many workloads never need it."""
        for b in reversed(self.buckets):
            self._get(b)

    def _get(self, bucket: int, filters: bool = False) -> _Captured:
        if (bucket, filters) not in self._graphs:
            self._graphs[bucket, filters] = self._capture(bucket, filters)
        return self._graphs[bucket, filters]

    def _padding_input(self, layout: StepLayout) -> torch.Tensor:
        assert self._graph_in is not None
        host = np.zeros(layout.size, dtype=np.int64)
        fill_padding(host, layout, self.spare_slot)
        buf = self._graph_in[: layout.size]
        buf.copy_(torch.from_numpy(host))
        return buf

    def _capture(self, bucket: int, filters: bool) -> _Captured:
        layout = self.layout_for(bucket)
        buf = self._padding_input(layout)
        if self.emulate:  # CPU tests: the same static buffers, "replayed" eagerly
            out0, logp0 = self.body(device_views(buf, layout), filters)
            out, logp = out0.clone(), logp0.clone()

            def run() -> None:
                o, lp = self.body(device_views(buf, layout), filters)
                out.copy_(o)
                logp.copy_(lp)

            return _Captured(run, out, logp)
        # Warm up (Triton compilation, allocator) on a side stream with all-padding rows,
        # which write nothing to the caches.
        stream = torch.cuda.current_stream(self.device)
        side = torch.cuda.Stream(device=self.device)  # type: ignore[no-untyped-call]
        side.wait_stream(stream)
        with torch.cuda.stream(side):
            for _ in range(2):
                self.body(device_views(buf, layout), filters)
        stream.wait_stream(side)
        torch.cuda.synchronize(self.device)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool):
            out, logp = self.body(device_views(buf, layout), filters)
        self._pool = graph.pool()
        return _Captured(graph.replay, out, logp)

    # ------------------------------------------------------------------ one step
    def launch(self, host: torch.Tensor, slot: int, layout: StepLayout, bucket: int | None,
               logit_rows: int) -> Launched:  # fmt: skip
        """Upload `host[:layout.size]` (from `host_in.take`), run the step, start fetching."""
        cap: _Captured | None = None
        filters = step_filters(host, layout, logit_rows)
        if bucket is not None:
            assert self._graph_in is not None
            # capture first: it fills the input buffer with padding
            cap = self._get(bucket, filters)
            dev = self._graph_in[: layout.size]
        else:
            dev = torch.empty(layout.size, dtype=torch.int64, device=self.device)
        dev.copy_(host[: layout.size], non_blocking=True)
        self.host_in.record(slot)
        self.kv.flush()
        if cap is not None:
            cap.replay()
            self.replays += 1
            out, logp = cap.out, cap.logp
        else:
            out, logp = self.body(device_views(dev, layout), filters)
        n = OUT_SECTIONS * layout.logit_rows
        out_host, k = self.host_out.take(n)
        out_host[:n].copy_(out, non_blocking=True)
        event = self.host_out.record(k)
        rows = logp[:logit_rows].to("cpu", copy=True) if self.keep_rows else None
        return Launched(out_host, event, logit_rows, layout.logit_rows, rows, bucket is not None)
