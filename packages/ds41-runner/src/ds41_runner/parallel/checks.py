"""Config checks of tensor parallelism, run at compose time (before any process group).

`check_parallel` raises ValueError naming `parallel.tp` when the degree does not split the
model (heads, output groups, MLP width, vocabulary and its log-softmax segments), when a
row-parallel K shard would not start on a segment boundary of the batch-invariant matmul's
plan, or when the processes were not launched for it (no launcher, or a world size other
than `parallel.tp`).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..app_config import RunConfig
    from ..model import ModelConfig

LAUNCH_HINT = "torchrun --nproc-per-node={tp} -m ds41_runner parallel.tp={tp} ..."


def launcher_world_size() -> int | None:
    """WORLD_SIZE as the launcher (torchrun) set it, or None when there is no launcher."""
    raw = os.environ.get("WORLD_SIZE")
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"WORLD_SIZE must be an integer, got {raw!r}") from None


def resolved_backend(run: RunConfig) -> str:
    """ "torch" or "triton": the matmul backend this run's model will use."""
    if run.backend != "auto":
        return run.backend
    if run.device == "cpu":
        return "torch"
    import torch

    return "triton" if torch.cuda.is_available() else "torch"


def row_parallel_weights(model: ModelConfig) -> list[tuple[str, int, int]]:
    """(name, N, K) of the weights split along K: `wo_b` and the MLP's `w2`."""
    return [
        ("wo_b", model.hidden, model.o_groups * model.o_lora_rank),
        ("w2", model.hidden, model.mlp_hidden),
    ]


def check_split(model: ModelConfig, tp: int, backend: str) -> None:
    """ValueError naming parallel.tp unless `tp` splits `model` for `backend`."""
    from ..ops.linear import segment_len
    from ..ops.vocab import vocab_segments

    for field in ("heads", "o_groups", "mlp_hidden", "vocab_size"):
        v = getattr(model, field)
        if v % tp:
            raise ValueError(f"parallel.tp = {tp} must divide model.{field} = {v}")
    segs = vocab_segments(model.vocab_size)
    if segs % tp:
        raise ValueError(
            f"parallel.tp = {tp} must divide the {segs} log-softmax segments of "
            f"model.vocab_size = {model.vocab_size} (each rank reduces whole segments)"
        )
    for name, n, k in row_parallel_weights(model):
        seg = segment_len(n, k, 1, backend)
        if (k // tp) % seg:
            raise ValueError(
                f"parallel.tp = {tp} splits {name} ([{n}, {k}]) along K into shards of "
                f"{k // tp}, which is not a multiple of its matmul segment ({seg} channels on "
                f"the {backend} backend): each rank must hold whole segments"
            )


def check_parallel(run: RunConfig, model: ModelConfig) -> None:
    """All checks of `run.parallel` (see the module doc)."""
    tp = run.parallel.tp
    world = launcher_world_size()
    if tp > 1:
        check_split(model, tp, resolved_backend(run))
        if world is None:
            raise ValueError(
                f"parallel.tp = {tp} needs one process per rank, but there is no launcher "
                f"(WORLD_SIZE is not set): run `{LAUNCH_HINT.format(tp=tp)}`"
            )
    if world is not None and world != tp and (tp > 1 or world > 1):
        raise ValueError(
            f"parallel.tp = {tp} must equal the launcher's world size (WORLD_SIZE = {world}): "
            f"run `{LAUNCH_HINT.format(tp=world)}`"
        )
    if tp > 1 and run.graph.name == "cuda_graph" and resolved_backend(run) != "triton":
        raise ValueError("graph=cuda_graph with parallel.tp > 1 needs the CUDA device")
