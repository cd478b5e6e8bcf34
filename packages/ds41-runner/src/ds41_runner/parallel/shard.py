"""Which weight a rank holds, and how its products are computed.

The split (rank r of `tp`; every split is contiguous, in rank order):

| weight | split | product |
|---|---|---|
| `wq_b` `[H*D, q_lora]`, `sink` `[H]` | heads (H/tp each) | column-parallel |
| `wo_a` `[G, o_lora, H*D/G]` | groups (G/tp each: the rank's heads) | group-parallel |
| `wo_b` `[hidden, G*o_lora]` | K (the rank's groups) | row-parallel |
| `w13` `[2 * mlp, hidden]` (`w1` then `w3`) | rows of each half | column-parallel |
| `w2` `[hidden, mlp]` | K | row-parallel |
| `embed`, `lm_head` `[V, hidden]` | vocabulary rows | gathered lookup / column-parallel |
| the rest: `wq_a_kv`, norms, `wkv_gate_c`, index keys/queries, head weights | replicated | |

The fused `w13` is split per half: rank r holds rows `[r * F/tp, (r+1) * F/tp)` of `w1` then
the same rows of `w3` (`[2F/tp, hidden]`), so its one launch gives `[a_r | b_r]`, the gate's
two inputs for the rank's channels of `w2`'s K, with the full `[2F, hidden]` weight's plan.

A column (or group) shard is multiplied with the FULL weight's plan (`plan_shape`), so its
columns get the single-process bits. A row-parallel shard holds whole K segments of the full
weight's plan (checked at compose time) and returns their fp32 chains.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from ..model.config import ModelConfig
from ..model.weights import LayerWeights, ModelWeights

Kind = Literal["col", "group", "row"]


@dataclass(frozen=True)
class ShardSpec:
    """How a rank multiplies by its shard of a weight whose full shape is `full`."""

    kind: Kind
    full: tuple[int, int, int]
    """(n, k, groups) of the full weight: its plan fixes the K segments."""


SPLIT_LAYER_WEIGHTS = ("wq_b", "sink", "wo_a", "wo_b", "w13", "w2")


def _rows(t: torch.Tensor, rank: int, tp: int) -> torch.Tensor:
    n = t.shape[0] // tp
    return t[rank * n : (rank + 1) * n]


def _cols(t: torch.Tensor, rank: int, tp: int) -> torch.Tensor:
    k = t.shape[-1] // tp
    return t[..., rank * k : (rank + 1) * k]


def shard_weights(
    full: ModelWeights, cfg: ModelConfig, rank: int, tp: int, device: torch.device
) -> tuple[ModelWeights, dict[int, ShardSpec]]:
    """Rank `rank`'s weights (contiguous copies on `device`) and, by `id()` of each split
    tensor, how it is multiplied. `full` may live on any device."""
    specs: dict[int, ShardSpec] = {}

    def put(t: torch.Tensor, spec: ShardSpec | None = None) -> torch.Tensor:
        # A fresh contiguous copy: a shard never keeps the full tensor's storage alive.
        out = torch.empty(tuple(t.shape), dtype=t.dtype, device=device).copy_(t)
        if spec is not None:
            specs[id(out)] = spec
        return out

    hd = cfg.heads * cfg.head_dim
    layers: list[LayerWeights] = []
    for lw in full.layers:
        kw: dict[str, torch.Tensor | None] = {}
        for name, value in vars(lw).items():
            if name not in SPLIT_LAYER_WEIGHTS:
                kw[name] = None if value is None else put(value)
        kw["wq_b"] = put(_rows(lw.wq_b, rank, tp), ShardSpec("col", (hd, cfg.q_lora_rank, 1)))
        kw["sink"] = put(_rows(lw.sink, rank, tp))
        kw["wo_a"] = put(
            _rows(lw.wo_a, rank, tp),
            ShardSpec("group", (cfg.o_lora_rank, hd // cfg.o_groups, cfg.o_groups)),
        )
        kw["wo_b"] = put(
            _cols(lw.wo_b, rank, tp),
            ShardSpec("row", (cfg.hidden, cfg.o_groups * cfg.o_lora_rank, 1)),
        )
        kw["w13"] = put(
            torch.cat([_rows(lw.w1, rank, tp), _rows(lw.w3, rank, tp)]),
            ShardSpec("col", (2 * cfg.mlp_hidden, cfg.hidden, 1)),
        )
        kw["w2"] = put(_cols(lw.w2, rank, tp), ShardSpec("row", (cfg.hidden, cfg.mlp_hidden, 1)))
        layers.append(LayerWeights(**kw))  # type: ignore[arg-type]
    embed = put(_rows(full.embed, rank, tp))
    lm_head = put(_rows(full.lm_head, rank, tp), ShardSpec("col", (cfg.vocab_size, cfg.hidden, 1)))
    return ModelWeights(embed, put(full.final_norm), lm_head, layers), specs
