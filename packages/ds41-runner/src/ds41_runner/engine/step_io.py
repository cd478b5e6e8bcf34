"""One step's inputs and outputs as single transfers.

Everything the device needs for a step travels in ONE int64 buffer copied from pinned host
memory (asynchronously on CUDA): per row `tokens, token_source, req_idx, pos` and per logit row
`row, seed, position, store_slot, top_k, target, temperature bits, top_p bits`. The sampled
tokens and their log-probs come back in ONE int64 buffer copied into pinned memory, read after
its event. `token_source >= 0` means "the token this request sampled last, still on the
device" (the overlapped engine plans a step before the previous one's tokens are back).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

ROW_FIELDS = ("tokens", "token_source", "req_idx", "pos")
LOGIT_FIELDS = (
    "rows", "seeds", "positions", "store_slot", "top_k", "targets", "temperature", "top_p",
)  # fmt: skip


@dataclass(frozen=True)
class StepLayout:
    """Offsets in the step buffer for `rows` row slots and `logit_rows` logit-row slots."""

    rows: int
    logit_rows: int

    @property
    def size(self) -> int:
        return len(ROW_FIELDS) * self.rows + len(LOGIT_FIELDS) * self.logit_rows

    def span(self, name: str) -> slice:
        if name in ROW_FIELDS:
            i = ROW_FIELDS.index(name) * self.rows
            return slice(i, i + self.rows)
        base = len(ROW_FIELDS) * self.rows
        i = base + LOGIT_FIELDS.index(name) * self.logit_rows
        return slice(i, i + self.logit_rows)


@dataclass
class StepInputs:
    """Device views of one step's inputs (see the module doc)."""

    tokens: torch.Tensor  # int64 [T]
    token_source: torch.Tensor  # int64 [T]
    req_idx: torch.Tensor  # int32 [T]
    pos: torch.Tensor  # int32 [T]
    rows: torch.Tensor  # int64 [S]
    seeds: torch.Tensor  # int64 [S]
    positions: torch.Tensor  # int32 [S]
    store_slot: torch.Tensor  # int64 [S]
    top_k: torch.Tensor  # int64 [S]
    targets: torch.Tensor  # int64 [S]
    temperature: torch.Tensor  # f32 [S]
    top_p: torch.Tensor  # f32 [S]


def device_views(buf: torch.Tensor, layout: StepLayout) -> StepInputs:
    """Typed views (and the few casts the model needs) of an int64 step buffer. Pure tensor
    ops, so they can be captured in a CUDA graph."""

    def seg(name: str) -> torch.Tensor:
        return buf[layout.span(name)]

    def f32(name: str) -> torch.Tensor:
        return seg(name).to(torch.int32).view(torch.float32)

    return StepInputs(
        tokens=seg("tokens"),
        token_source=seg("token_source"),
        req_idx=seg("req_idx").to(torch.int32),
        pos=seg("pos").to(torch.int32),
        rows=seg("rows"),
        seeds=seg("seeds"),
        positions=seg("positions").to(torch.int32),
        store_slot=seg("store_slot"),
        top_k=seg("top_k"),
        targets=seg("targets"),
        temperature=f32("temperature"),
        top_p=f32("top_p"),
    )


def f32_bits(values: list[float]) -> np.ndarray:
    """The fp32 bit patterns of `values` as int64 (what `device_views` reads back)."""
    return np.asarray(values, dtype=np.float32).view(np.int32).astype(np.int64)


class HostBuffers:
    """A small ring of pinned (on CUDA) int64 host buffers, each reused only after the copy
    that last read or wrote it has run (its event)."""

    def __init__(self, device: torch.device, depth: int = 3) -> None:
        self.device = device
        self.pinned = device.type == "cuda"
        self._bufs: list[torch.Tensor] = []
        self._events: list[torch.cuda.Event | None] = []
        self._next = 0
        self.depth = depth

    def take(self, size: int) -> tuple[torch.Tensor, int]:
        """A host buffer of at least `size` entries (waits for its last copy) and its slot."""
        k = self._next
        self._next = (self._next + 1) % self.depth
        if len(self._bufs) < self.depth:
            self._bufs.append(torch.empty(0, dtype=torch.int64))
            self._events.append(None)
        ev = self._events[k]
        if ev is not None:
            ev.synchronize()
        if self._bufs[k].numel() < size:
            self._bufs[k] = torch.empty(max(size, 2 * self._bufs[k].numel()), dtype=torch.int64,
                                        pin_memory=self.pinned)  # fmt: skip
        return self._bufs[k], k

    def record(self, k: int) -> torch.cuda.Event | None:
        """Mark slot `k` in use by the copies just enqueued; returns their event."""
        if not self.pinned:
            return None
        ev = self._events[k]
        if ev is None:  # one event per slot, re-recorded: its last record is the one waited on
            ev = self._events[k] = torch.cuda.Event()  # type: ignore[no-untyped-call]
        ev.record()
        return ev


def fill_padding(host: np.ndarray, layout: StepLayout, spare_slot: int) -> None:
    """Every slot a padding row/logit row: it writes nothing and its results are ignored."""
    host[: layout.size] = 0
    host[layout.span("token_source")] = -1
    host[layout.span("req_idx")] = -1
    host[layout.span("store_slot")] = spare_slot
    host[layout.span("targets")] = -1
    host[layout.span("top_p")] = f32_bits([1.0])[0]
