"""CUDA-graph capture and replay of decode-only steps.

One graph per batch size of a ladder. A decode step of `n` rows replays the graph of the
smallest ladder size `B >= n`; rows `n..B-1` are padding (request -1: they write nothing and
their output is ignored), which batch invariance makes harmless. The forward runs with
`validate=False` (no host syncs) so it can be captured. The static inputs are refilled in
place before each replay; the cache tensors and block tables keep their addresses (the
allocators refresh block tables in place), so captured pointers stay valid.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch


@dataclass
class _Captured:
    graph: Any
    tokens: torch.Tensor
    req_idx: torch.Tensor
    pos: torch.Tensor
    out: torch.Tensor


class DecodeGraphs:
    """Lazily captured decode graphs for `batch_sizes` (ascending)."""

    def __init__(
        self, model: Any, kv: Any, batch_sizes: Sequence[int], device: torch.device
    ) -> None:
        if device.type != "cuda":
            raise ValueError(f"CUDA graphs need a CUDA device, got {device}")
        sizes = list(batch_sizes)
        if not sizes or sizes != sorted(set(sizes)) or sizes[0] <= 0:
            raise ValueError(f"batch_sizes must be positive and strictly increasing, got {sizes}")
        self.model = model
        self.kv = kv
        self.batch_sizes = sizes
        self.device = device
        self._graphs: dict[int, _Captured] = {}
        self._pool: Any = None
        self.replays = 0

    def bucket(self, n: int) -> int | None:
        """Smallest ladder size >= n, or None when n exceeds the ladder."""
        i = bisect.bisect_left(self.batch_sizes, n)
        return self.batch_sizes[i] if i < len(self.batch_sizes) else None

    def capture_all(self) -> None:
        for b in self.batch_sizes:
            self._get(b)

    def _get(self, b: int) -> _Captured:
        if b not in self._graphs:
            self._graphs[b] = self._capture(b)
        return self._graphs[b]

    def _forward(self, tokens: torch.Tensor, req: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.model.forward(tokens, req, pos, self.kv, validate=False)
        return out

    def _capture(self, b: int) -> _Captured:
        tokens = torch.zeros(b, dtype=torch.int64, device=self.device)
        req = torch.full((b,), -1, dtype=torch.int32, device=self.device)
        pos = torch.zeros(b, dtype=torch.int32, device=self.device)
        # Warm up (Triton compilation, allocator) on a side stream with all-padding rows,
        # which write nothing to the caches.
        side = torch.cuda.Stream(device=self.device)  # type: ignore[no-untyped-call]
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            for _ in range(2):
                self._forward(tokens, req, pos)
        torch.cuda.current_stream(self.device).wait_stream(side)
        torch.cuda.synchronize(self.device)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool):
            out = self._forward(tokens, req, pos)
        self._pool = graph.pool()
        return _Captured(graph, tokens, req, pos, out)

    def run(self, tokens: torch.Tensor, req_idx: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """Replay for `n = len(tokens)` decode rows (device tensors); returns f32 [n, V]
        (a view of the graph's output buffer, valid until the next replay)."""
        n = tokens.shape[0]
        b = self.bucket(n)
        if b is None:
            raise ValueError(f"{n} rows exceed the largest captured batch size {self.batch_sizes}")
        cap = self._get(b)
        cap.tokens[:n].copy_(tokens)
        cap.tokens[n:].zero_()
        cap.req_idx[:n].copy_(req_idx)
        cap.req_idx[n:].fill_(-1)
        cap.pos[:n].copy_(pos)
        cap.pos[n:].zero_()
        cap.graph.replay()
        self.replays += 1
        return cap.out[:n]
