"""The tensor-parallel model: one rank's shard of `Model` (see `shard` for the split).

Mode "bi" makes no `all_reduce`. A row-parallel product (`wo_b`, `w2`) computes the fp32 chain
of each K segment the rank holds (whole segments of the single-process plan). The plan adds
the segments in two halves of K (`matmul.plan.half_split`); at TP=2 each rank holds one half,
adds its own segments in the same launch (`linear_chain`) and the ranks all-gather one fp32
partial each, then add the two; at other degrees (or with fewer than 4 segments) the ranks
all-gather every segment's chain and add them in the plan's order. Either way these are the
operations of the single-process matmul, so its bits. Column-parallel products use the full
weight's plan. The embedding is a gathered lookup (each token's row comes from its owner,
copied), the LM head is vocabulary-parallel (`pick`: each rank reduces its vocabulary segments
to a few partials per row, `ops.vocab`, and the ranks gather those; `forward`'s full log-prob
rows gather the logits), and attention runs on the rank's heads (with their sinks) over the
replicated latent caches. Mode "fast" adds the
row-parallel partial products with `all_reduce`.

Every rank runs the same engine on the same inputs (the scheduler is deterministic and every
rank samples from the same gathered partials), so the ranks stay in step without messages of
their own.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import torch

from ..components import declares_batch_invariant
from ..model.config import ModelConfig
from ..model.layers import Runtime
from ..model.model import Model
from ..model.weights import ModelWeights, init_weights
from ..ops.linear import (
    grouped_linear,
    linear,
    linear_chain,
    linear_partials,
    reduce_linear_partials,
    segment_count,
)
from ..ops.matmul.plan import half_split
from .checks import check_split
from .dist import TPGroup
from .shard import ShardSpec, shard_weights


@dataclass
class TPRuntime(Runtime):
    """`Runtime` whose products know the rank's shards (by the weight tensor's `id`)."""

    group: TPGroup = field(kw_only=True)
    specs: dict[int, ShardSpec] = field(kw_only=True)

    def lin(self, x: torch.Tensor, w: torch.Tensor, **kw: Any) -> torch.Tensor:
        spec = self.specs.get(id(w))
        if spec is None:
            return super().lin(x, w, **kw)
        if spec.kind == "row":
            return self.row_parallel(x, w, spec, **kw)
        return linear(x, w, mode=self.mode, backend=self.backend, plan_shape=spec.full, **kw)

    def grouped_lin(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        spec = self.specs.get(id(w))
        if spec is None:
            return super().grouped_lin(x, w)
        return grouped_linear(x, w, mode=self.mode, backend=self.backend, plan_shape=spec.full)

    def row_parallel(
        self,
        x: torch.Tensor,
        w: torch.Tensor,
        spec: ShardSpec,
        *,
        out_dtype: torch.dtype | None = None,
        fp32: bool = False,
    ) -> torch.Tensor:
        """`x: [M, K/tp]` (the rank's channels), `w: [N, K/tp]` -> the full product `[M, N]`
        on every rank (mode "bi": gathered segment chains added in order)."""
        dtype = x.dtype if out_dtype is None else out_dtype
        if self.mode == "fast":
            wide = dtype if self.group.backend == "nccl" else torch.float32
            y = linear(x, w, mode="fast", backend=self.backend, out_dtype=wide, fp32=fp32)
            return self.group.all_reduce_sum(y).to(dtype)
        be = self.backend
        tp = self.group.size
        n_segs = segment_count(*spec.full, "triton" if be == "triton" else "torch")
        if tp == 2 and n_segs >= 2 and half_split(n_segs) * 2 == n_segs:
            # The plan adds K's two halves apart and each rank holds one: one launch adds the
            # rank's own segments, the ranks exchange that one partial, and the two half
            # totals are added in order (half the bytes of exchanging every segment).
            own = linear_chain(x, w, plan_shape=spec.full, fp32=fp32, backend=be)
            halves = self.group.all_gather(own)  # [2, M, N]
            return reduce_linear_partials(halves, dtype, backend=be, half=2)
        parts = linear_partials(x, w, plan_shape=spec.full, fp32=fp32, backend=be)
        gathered = self.group.all_gather(parts)  # [tp, S/tp, M, N]: segment order
        return reduce_linear_partials(gathered.flatten(0, 1), dtype, backend=be)


class _HeadShard:
    """Attention over the rank's heads `[h0, h0 + H/tp)`.

    `pad=True` runs the kernel on all H heads with the other heads' queries (and sinks) zero,
    and keeps the rank's: kernels whose per-head arithmetic depends on the head count (the
    Triton kernel's head block, the CPU path's vector/scalar split over `[H, N]` tensors) then
    see the single-process shapes, with the rank's heads at their single-process places.
    """

    def __init__(self, inner: Any, rank: int, heads: int, pad: bool) -> None:
        self.inner = inner
        self.rank = rank
        self.heads = heads
        self.pad = pad
        self.name = f"{getattr(inner, 'name', type(inner).__name__)}[heads/{rank}]"

    def __call__(
        self,
        q: torch.Tensor,
        window_cache: Any,
        swa_slots: torch.Tensor,
        swa_lens: torch.Tensor,
        comp_cache: Any,
        comp_slots: torch.Tensor | None,
        comp_lens: torch.Tensor | None,
        sink: torch.Tensor,
        scale: float,
        *,
        validate: bool = True,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`q: bf16 [T, H/tp, D]`, `sink: f32 [H/tp]` -> (out bf16 [T, H/tp, D], lse f32
        [T, H/tp]); the other arguments as `sparse_attention`."""
        if not self.pad:
            out, lse = self.inner(
                q, window_cache, swa_slots, swa_lens, comp_cache, comp_slots, comp_lens,
                sink, scale, validate=validate,
            )  # fmt: skip
            return out, lse
        t, hl, d = q.shape
        h0 = self.rank * hl
        qf = q.new_zeros((t, self.heads, d))
        qf[:, h0 : h0 + hl] = q
        sf = sink.new_zeros((self.heads,))
        sf[h0 : h0 + hl] = sink
        out, lse = self.inner(
            qf, window_cache, swa_slots, swa_lens, comp_cache, comp_slots, comp_lens, sf, scale,
            validate=validate,
        )  # fmt: skip
        return out[:, h0 : h0 + hl], lse[:, h0 : h0 + hl]


class ShardedInvariantAttention(_HeadShard):
    """A head shard of a batch-invariant attention component."""

    batch_invariant = True


class ShardedAttention(_HeadShard):
    """A head shard of a fast (not batch-invariant) attention component."""

    batch_invariant = False


def heads_independent(inner: Any, mode: str, device: torch.device, head_dim: int) -> bool:
    """Whether `inner` computes each head with arithmetic that does not depend on the head
    count: the Hopper Gluon kernel (fixed blocks of 64 heads, masked), or any kernel in mode
    "fast" (which promises no bits)."""
    if mode != "bi":
        return True
    if device.type != "cuda" or getattr(inner, "backend", "") != "triton" or head_dim != 512:
        return False
    from ds41_attention import sparse_attention as sa

    if not getattr(sa, "GLUON_DEFAULT", False):
        return False
    from ds41_attention.ops.sparse_attention.gluon_launch import gluon_supported

    return bool(gluon_supported(torch.empty((1, 1, head_dim), device=device)))


class TPModel(Model):
    """Rank `group.rank`'s shard of `Model(cfg, ...)`; `forward` takes and returns the same
    tensors on every rank (log-probs `[T, V]` gathered over the vocabulary).

    `draw_device`: where the full weights are drawn before sharding (default the CPU, which
    gives `Model`'s weights; "cuda" is much faster for large presets and gives others).
    """

    def __init__(
        self,
        cfg: ModelConfig,
        *,
        group: TPGroup,
        mode: str = "bi",
        backend: str = "auto",
        seed: int | None = None,
        draw_device: torch.device | str | None = None,
        full_weights: ModelWeights | None = None,
        **impls: Any,
    ) -> None:
        from ds41_cache.backend import resolve_backend

        cfg.validate()
        tp = group.size
        check_split(cfg, tp, resolve_backend(backend, group.device))
        seed_ = cfg.init_seed if seed is None else int(seed)
        if full_weights is None:
            where = torch.device("cpu") if draw_device is None else torch.device(draw_device)
            full_weights = init_weights(cfg, where, seed=seed_, draw_device=where)
        weights, specs = shard_weights(full_weights, cfg, group.rank, tp, group.device)
        del full_weights
        super().__init__(
            cfg, mode=mode, backend=backend, device=group.device, seed=seed_, weights=weights,
            **impls,
        )  # fmt: skip
        self.group = group
        self.layer_cfg = dataclasses.replace(
            cfg, heads=cfg.heads // tp, o_groups=cfg.o_groups // tp
        )
        rt = self.runtime
        inner = rt.attention
        cls = ShardedInvariantAttention if declares_batch_invariant(inner) else ShardedAttention
        pad = not heads_independent(inner, mode, self.device, cfg.head_dim)
        attention = cls(inner, group.rank, cfg.heads, pad)
        self.runtime = TPRuntime(
            mode=rt.mode, backend=rt.backend, attention=attention, indexer=rt.indexer,
            compressor=rt.compressor, freqs=rt.freqs, group=group, specs=specs,
        )  # fmt: skip

    def _embed(self, tok: torch.Tensor) -> torch.Tensor:
        """Each rank looks up the tokens it owns (zeros elsewhere); the lookups are gathered
        and every token takes its owner's row (a copy: the bits of `embed[tok]`)."""
        emb = self.weights.embed
        vl = emb.shape[0]
        local = tok - self.group.rank * vl
        own = (local >= 0) & (local < vl)
        rows = emb[local.clamp(0, vl - 1)]
        rows = torch.where(own[:, None], rows, torch.zeros_like(rows))
        every = self.group.all_gather(rows)  # [tp, T, hidden]
        owner = (tok // vl).clamp(0, self.group.size - 1)
        index = owner.view(1, -1, 1).expand(1, tok.shape[0], emb.shape[1])
        return every.gather(0, index)[0]

    def _lm_head(self, h: torch.Tensor) -> torch.Tensor:
        """Column-parallel logits of the rank's vocabulary rows, gathered: f32 `[S, V]`."""
        return self._gather_logits(self._local_logits(h)[0])

    def _local_logits(self, h: torch.Tensor) -> tuple[torch.Tensor, int]:
        """The rank's vocabulary rows' logits f32 `[S, V/tp]` (column-parallel, the full
        weight's plan) and their first id."""
        local = self.runtime.lin(h, self.weights.lm_head, out_dtype=torch.float32)
        return local, self.group.rank * local.shape[1]

    def _gather_logits(self, x: torch.Tensor) -> torch.Tensor:
        every = self.group.all_gather(x)  # [tp, S, V/tp]
        return every.permute(1, 0, 2).reshape(x.shape[0], -1)

    def _gather_partials(self, parts: torch.Tensor) -> torch.Tensor:
        """`[S, nseg/tp, F]` -> `[S, nseg, F]`: a copy of every rank's segments, in id order
        (a few floats per segment instead of the `[S, V]` logits)."""
        every = self.group.all_gather(parts)  # [tp, S, nseg/tp, F]
        return every.permute(1, 0, 2, 3).reshape(parts.shape[0], -1, parts.shape[2])


def build_tp_model(run: Any, model_cfg: ModelConfig) -> TPModel:
    """Join the process group of `run.parallel` and build this rank's `TPModel`."""
    from ..engine.engine import resolve_device
    from .dist import init_tensor_parallel

    kind = resolve_device(run.device).type
    group = init_tensor_parallel(run.parallel.tp, kind, run.parallel.timeout_s)
    return TPModel(model_cfg, group=group, mode=run.mode.name, backend=run.backend, seed=run.seed)
