"""Requests, their sampling parameters, per-step outputs and final results."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Literal

import torch

FinishReason = Literal["length", "stop", "abort", "error"]


class Status(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"
    FAILED = "failed"


@dataclass(frozen=True)
class SamplingParams:
    """How a request samples. Every choice is keyed by (seed, position) only, so a request's
    tokens do not depend on its batch.

    `temperature` 0 is greedy; `top_k` <= 0 and `top_p` >= 1 switch those filters off;
    generation stops after `max_new_tokens` tokens or after a token in `stop_token_ids`
    (that token is returned).
    """

    max_new_tokens: int
    seed: int = 0
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    stop_token_ids: tuple[int, ...] = ()


@dataclass
class Request:
    """One request and its progress.

    A generation request's `tokens = prompt + generated`; the cache holds positions
    `< num_computed`. `inflight` counts tokens sampled by launched steps whose values have not
    come back yet (the overlapped engine runs one step ahead): they count in `length`, and a
    row that needs such a token takes it on the device. A preempted request keeps its
    generated tokens and recomputes them as prefill.

    A score request (`score_from` set) runs the rows of `prompt` (the sequence without its last
    token) and returns the log-probs of `targets`, the tokens at `score_from ..`; it samples
    nothing.
    """

    index: int
    prompt: list[int]
    params: SamplingParams
    label: str = ""
    """How errors name the request (`request <index>` unless the caller says otherwise)."""
    score_from: int | None = None
    targets: list[int] = field(default_factory=list)
    targets_launched: int = 0
    """Score targets whose rows a launched step has computed (returned or in flight). A
    preempted score request recomputes its earlier rows for the cache only: they are not
    scored again."""
    generated: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    rows: list[torch.Tensor] = field(default_factory=list)
    inflight: int = 0
    num_computed: int = 0
    slot: int | None = None
    admit_order: int = -1
    status: Status = Status.WAITING
    error: str | None = None
    finish_reason: FinishReason | None = None
    preemptions: int = 0
    prefix_hit_tokens: int = 0
    exported_pages: int = 0
    """Full prompt pages already offered to the prefix cache."""
    prefix_keys: list[bytes] = field(default_factory=list)
    """Chain hashes of the prompt's full pages computed so far (the prefix cache's keys)."""

    def __post_init__(self) -> None:
        if not self.label:
            self.label = f"request {self.index}"

    @property
    def max_new_tokens(self) -> int:
        return self.params.max_new_tokens

    @property
    def seed(self) -> int:
        return self.params.seed

    @property
    def temperature(self) -> float:
        return self.params.temperature

    @property
    def is_score(self) -> bool:
        return self.score_from is not None

    @property
    def known(self) -> int:
        """Tokens whose ids the host knows: prompt + generated."""
        return len(self.prompt) + len(self.generated)

    @property
    def length(self) -> int:
        return self.known + self.inflight

    @property
    def tokens(self) -> list[int]:
        return self.prompt + self.generated

    @property
    def pending(self) -> int:
        """Rows still to run: positions `num_computed .. length - 1`."""
        if self.is_score or len(self.generated) + self.inflight < self.max_new_tokens:
            return self.length - self.num_computed
        return 0  # every token it may produce is sampled; only results are outstanding

    @property
    def first_needed_row(self) -> int:
        """The earliest row that must run (a prefix hit may cover the positions before it)."""
        if self.score_from is not None:
            return self.score_from - 1
        return self.length - 1

    @property
    def done(self) -> bool:
        return self.status in (Status.FINISHED, Status.FAILED)


@dataclass
class RequestOutput:
    """What one `Engine.step()` produced for one request.

    `new_token_ids` / `new_logprobs`: the tokens sampled in that step and their log-probs
    (log-softmax, independent of temperature); for a score request, the target tokens whose
    log-probs came back. `finish_reason` is set when `finished`: "length", "stop", "abort"
    or "error" (then `error` says why).
    """

    request_id: int
    new_token_ids: list[int]
    new_logprobs: list[float]
    finished: bool = False
    finish_reason: FinishReason | None = None
    error: str | None = None


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
    finish_reason: FinishReason | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    def raise_for_error(self) -> Result:
        if self.error is not None:
            raise ValueError(self.error)
        return self
