"""Requests and their results."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

import torch


class Status(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"
    FAILED = "failed"


@dataclass
class Request:
    """One generation request and its progress.

    `tokens = prompt + generated`; the cache holds positions `< num_computed`. Rows still to run
    are positions `num_computed .. len(tokens) - 1`; the row at `len(tokens) - 1` predicts the
    next token. A preempted request keeps its generated tokens and recomputes them as prefill.
    """

    index: int
    prompt: list[int]
    max_new_tokens: int
    seed: int
    temperature: float
    arrival: int
    generated: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    rows: list[torch.Tensor] = field(default_factory=list)
    num_computed: int = 0
    slot: int | None = None
    admit_order: int = -1
    status: Status = Status.WAITING
    error: str | None = None
    preemptions: int = 0
    prefix_hit_tokens: int = 0
    exported_pages: int = 0
    """Full prompt pages already offered to the prefix cache."""

    @property
    def tokens(self) -> list[int]:
        return self.prompt + self.generated

    @property
    def length(self) -> int:
        return len(self.prompt) + len(self.generated)

    @property
    def pending(self) -> int:
        return self.length - self.num_computed

    @property
    def done(self) -> bool:
        return self.status in (Status.FINISHED, Status.FAILED)


@dataclass
class Result:
    """What `Engine.generate` returns per request, in input order.

    `tokens`: generated token ids; `logprobs`: log-prob of each generated token under the model
    (log-softmax, independent of temperature). `error` names what went wrong for a rejected or
    failed request (its tokens are then empty or partial). `rows` (only when the engine keeps
    them): the full f32 [n, V] log-prob rows that produced each generated token.
    """

    tokens: list[int]
    logprobs: list[float]
    prompt_len: int = 0
    error: str | None = None
    preemptions: int = 0
    prefix_hit_tokens: int = 0
    rows: torch.Tensor | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    def raise_for_error(self) -> Result:
        if self.error is not None:
            raise ValueError(self.error)
        return self
