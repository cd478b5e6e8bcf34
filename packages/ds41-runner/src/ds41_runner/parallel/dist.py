"""The tensor-parallel process group: creation from the launcher's environment, collectives.

One process per rank (torchrun sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT). NCCL on
CUDA (rank r uses GPU LOCAL_RANK), gloo on the CPU. Every collective runs under the group's
timeout (`parallel.timeout_s`): a rank that dies makes the others raise instead of hang (a
RuntimeError naming the collective and this rank); such a group cannot be torn down cleanly
(gloo and NCCL abort in their destructors), so `shutdown` then ends the process at once with
status 1.
Mode "bi" uses only `all_gather` (a copy: no arithmetic, so the order of ranks cannot change a
bit); `all_reduce` serves mode "fast".
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from datetime import timedelta

import torch
import torch.distributed as dist


@dataclass
class TPGroup:
    """This process's place in the tensor-parallel group."""

    rank: int
    size: int
    device: torch.device
    backend: str
    """"nccl" or "gloo"."""
    trace: list[tuple[str, tuple[int, ...], torch.dtype]] | None = field(default=None)
    """When a list, every collective appends (op, input shape, dtype) (the benchmark replays
    a step's collectives alone to time them)."""
    broken: bool = False
    """A collective failed (a peer died or timed out): the group is unusable."""

    def _failed(self, op: str, exc: Exception) -> RuntimeError:
        self.broken = True
        return RuntimeError(
            f"tensor-parallel {op} failed on rank {self.rank} of {self.size} (a rank died or "
            f"did not answer within parallel.timeout_s): {exc}"
        )

    def all_gather(self, t: torch.Tensor) -> torch.Tensor:
        """`t: [*S]` (same shape and dtype on every rank) -> `[size, *S]`, rank r's at [r]."""
        t = t.contiguous()
        if self.trace is not None:
            self.trace.append(("all_gather", tuple(t.shape), t.dtype))
        if self.size == 1:
            return t.unsqueeze(0)
        try:
            if self.backend == "nccl":
                out = torch.empty((self.size, *t.shape), dtype=t.dtype, device=t.device)
                dist.all_gather_into_tensor(out, t)
                return out
            parts = [torch.empty_like(t) for _ in range(self.size)]
            dist.all_gather(parts, t)
        except RuntimeError as exc:  # gloo/NCCL errors and timeouts are RuntimeErrors
            raise self._failed("all_gather", exc) from exc
        return torch.stack(parts)

    def all_reduce_sum(self, t: torch.Tensor) -> torch.Tensor:
        """In-place sum over ranks (mode "fast" only: the order of the additions is NCCL's)."""
        if self.trace is not None:
            self.trace.append(("all_reduce", tuple(t.shape), t.dtype))
        if self.size > 1:
            try:
                dist.all_reduce(t)
            except RuntimeError as exc:
                raise self._failed("all_reduce", exc) from exc
        return t


_GROUP: TPGroup | None = None

DEFAULT_NCCL_PROTO = "LL128"
"""NCCL_PROTO set before the NCCL communicator is made, unless the environment sets it."""


def current() -> TPGroup | None:
    """The group made by `init_tensor_parallel`, or None in a single process."""
    return _GROUP


def rank() -> int:
    """This process's rank (0 without tensor parallelism)."""
    return 0 if _GROUP is None else _GROUP.rank


def init_tensor_parallel(tp: int, device_kind: str, timeout_s: float) -> TPGroup:
    """Join (once per process) the group of `tp` ranks the launcher started.

    `device_kind`: "cuda" (NCCL, GPU LOCAL_RANK becomes the current device; NCCL_PROTO
    defaults to DEFAULT_NCCL_PROTO) or "cpu" (gloo).
    The world size was checked against `tp` at compose time (`checks.check_parallel`); here
    it is checked again. A first all_gather initialises the communicator eagerly, so CUDA-graph
    capture never sees a lazy initialisation.
    """
    global _GROUP
    if _GROUP is not None:
        if _GROUP.size != tp:
            raise ValueError(
                f"parallel.tp = {tp}, but this process already joined a group of {_GROUP.size}"
            )
        return _GROUP
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world != tp:
        raise ValueError(f"parallel.tp = {tp} must equal the launcher's world size {world}")
    rank_ = int(os.environ["RANK"])
    local = int(os.environ.get("LOCAL_RANK", rank_))
    timeout = timedelta(seconds=float(timeout_s))
    if device_kind == "cuda":
        if torch.cuda.device_count() <= local:
            raise ValueError(
                f"parallel.tp = {tp}: rank {rank_} needs GPU {local}, but only "
                f"{torch.cuda.device_count()} are visible"
            )
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
        backend = "nccl"
        # LL128 took the flash_wide decode step's gathers from 0.525 to 0.446 ms on two H200s
        # (benchmarks/results/tp_bench_h200x2_s3.json); the user's setting wins.
        os.environ.setdefault("NCCL_PROTO", DEFAULT_NCCL_PROTO)
        if not dist.is_initialized():
            dist.init_process_group("nccl", timeout=timeout, device_id=device)
    else:
        device = torch.device("cpu")
        backend = "gloo"
        if not dist.is_initialized():
            dist.init_process_group("gloo", timeout=timeout)
    group = TPGroup(rank_, tp, device, backend)
    group.all_gather(torch.zeros(1, device=device))
    _GROUP = group
    return group


def shutdown() -> None:
    """Leave the process group (end of the app). After a failed collective the group cannot
    be destroyed (the backends abort), so the process exits here with status 1."""
    global _GROUP
    if _GROUP is not None and _GROUP.broken:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)
    if dist.is_initialized():
        dist.destroy_process_group()
    _GROUP = None
