"""Swappable implementations of the attention, indexer and compressor steps.

Each concrete class states `batch_invariant = True/False` in its own class body.
`declares_batch_invariant(obj)` reads only `type(obj).__dict__`, so a subclass or wrapper never
inherits the promise: whoever changes behaviour must restate it. Mode "bi" of the model refuses
any component without the declaration.
"""

from __future__ import annotations

from typing import Any

import torch

from ds41_cache.paged import PagedCache


def declares_batch_invariant(obj: object) -> bool:
    """True iff the object's own class body sets `batch_invariant = True` (no inheritance)."""
    return type(obj).__dict__.get("batch_invariant", False) is True


# --------------------------------------------------------------------------- attention
class AttentionImpl:
    """`__call__(q, window_cache, swa_slots, swa_lens, comp_cache, comp_slots, comp_lens, sink,
    scale) -> (out bf16 [T, H, D], lse f32 [T, H])` (ds41_attention.sparse_attention)."""

    name = "abstract"
    backend = "auto"
    invariant_kernel = True

    def __call__(
        self,
        q: torch.Tensor,
        window_cache: PagedCache,
        swa_slots: torch.Tensor,
        swa_lens: torch.Tensor,
        comp_cache: PagedCache | None,
        comp_slots: torch.Tensor | None,
        comp_lens: torch.Tensor | None,
        sink: torch.Tensor,
        scale: float,
        *,
        validate: bool = True,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        from ds41_attention import sparse_attention

        kwargs: dict[str, Any] = {
            "batch_invariant": self.invariant_kernel,
            "backend": self.backend,
        }
        if validate is False:
            kwargs["validate"] = False
        return sparse_attention(  # type: ignore[no-any-return]
            q, window_cache, swa_slots, swa_lens, comp_cache, comp_slots, comp_lens, sink,
            scale, **kwargs,
        )  # fmt: skip


class InvariantTritonAttention(AttentionImpl):
    """One launch for every row, fixed key order, no split over keys (SPEC section 8).

    `backend="triton"` means ds41-attention's GPU kernels: the Gluon kernel on sm_90 with
    D = 512, the portable Triton kernel elsewhere (the name is kept for configs and reports)."""

    batch_invariant = True
    name = "triton_invariant"
    backend = "triton"
    invariant_kernel = True


class SplitKVTritonAttention(AttentionImpl):
    """Split-KV plan chosen from the batch shape + combine: fast, not batch invariant.

    On sm_90 with D = 512 this is the Gluon split path (contiguous tile slices + combine),
    elsewhere the Triton split kernel; see `InvariantTritonAttention` for the name."""

    batch_invariant = False
    name = "triton_split_kv"
    backend = "triton"
    invariant_kernel = False


class TorchAttention(AttentionImpl):
    """The bf16-faithful, per-row torch path (CPU)."""

    batch_invariant = True
    name = "torch"
    backend = "torch"
    invariant_kernel = True


# --------------------------------------------------------------------------- indexer
class IndexerImpl:
    """`__call__(q, weights, key_cache, block_table, req_idx, pos, ratio, k, candidates)
    -> int32 [T, k]` (ds41_indexer.paged_index_topk)."""

    name = "abstract"
    backend = "auto"
    bf16_logits = False

    def __call__(
        self,
        q: torch.Tensor,
        weights: torch.Tensor,
        key_cache: PagedCache,
        block_table: torch.Tensor,
        req_idx: torch.Tensor,
        pos: torch.Tensor,
        ratio: int,
        k: int,
        *,
        candidates: torch.Tensor | None = None,
        validate: bool = True,
    ) -> torch.Tensor:
        if self.bf16_logits:
            return self._bf16_topk(
                q, weights, key_cache, block_table, req_idx, pos, ratio, k, candidates, validate
            )
        from ds41_indexer import paged_index_topk

        return paged_index_topk(  # type: ignore[no-any-return]
            q, weights, key_cache, block_table, req_idx, pos, ratio, k,
            candidates=candidates, backend=self.backend, validate=validate,
        )  # fmt: skip

    def _bf16_topk(
        self,
        q: torch.Tensor,
        weights: torch.Tensor,
        key_cache: PagedCache,
        block_table: torch.Tensor,
        req_idx: torch.Tensor,
        pos: torch.Tensor,
        ratio: int,
        k: int,
        candidates: torch.Tensor | None,
        validate: bool,
    ) -> torch.Tensor:
        """Logits cast to bf16 (finite scores stay finite, -inf stays), then the exact
        selector on them."""
        from ds41_indexer import index_logits, index_topk, visible_entries

        logits = index_logits(
            q, weights, key_cache, block_table, req_idx, pos, ratio,
            candidates=candidates, out_dtype=torch.bfloat16, backend=self.backend,
            validate=validate,
        )  # fmt: skip
        n_vis = visible_entries(req_idx, pos, ratio, backend=self.backend)
        return index_topk(  # type: ignore[no-any-return]
            logits.to(torch.float32), n_vis, k, backend=self.backend,
            validate=validate,
        )  # fmt: skip


class Fp32FusedIndexer(IndexerImpl):
    """fp32 logits fused with the exact top-k selector (batch-invariant mode)."""

    batch_invariant = True
    name = "fp32_fused"
    bf16_logits = False


class Bf16Indexer(IndexerImpl):
    """bf16-cast logits: cheaper, outside the invariance contract."""

    batch_invariant = False
    name = "bf16"
    bf16_logits = True


# --------------------------------------------------------------------------- compressor
class CompressorImpl:
    """`__call__(compressor, kv, score, req_idx, pos, norm_weight, eps) -> (latent bf16 [T, D],
    emit bool [T], entry int64 [T])` over a `ds41_cache.compressor.Compressor`. `emit` and
    `entry` must be functions of (req_idx, pos, ratio) alone, as `Compressor.forward`'s are:
    the kv-source layers of one ratio share a step's entry slots' RoPE tables
    (`StepContext.entry_cos_sin`)."""

    name = "abstract"

    def __call__(
        self,
        compressor: Any,
        kv: torch.Tensor,
        score: torch.Tensor | None,
        req_idx: torch.Tensor,
        pos: torch.Tensor,
        norm_weight: torch.Tensor,
        eps: float,
        *,
        validate: bool = True,
        backend: str = "auto",
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return compressor.forward(  # type: ignore[no-any-return]
            kv, score, req_idx, pos, norm_weight, eps, validate=validate, backend=backend
        )


class RingCompressor(CompressorImpl):
    """Ring-buffered compressor: a group's first row comes from the same call when it is there,
    else from the fp32 ring, with the same fp32 bits either way, so a latent never depends on
    where a chunk boundary fell (SPEC section 5)."""

    batch_invariant = True
    name = "ring"


ATTENTION_IMPLS: dict[str, type[AttentionImpl]] = {
    c.name: c for c in (InvariantTritonAttention, SplitKVTritonAttention, TorchAttention)
}
INDEXER_IMPLS: dict[str, type[IndexerImpl]] = {c.name: c for c in (Fp32FusedIndexer, Bf16Indexer)}
COMPRESSOR_IMPLS: dict[str, type[CompressorImpl]] = {RingCompressor.name: RingCompressor}


def make_component(kind: str, spec: object, registry: dict[str, Any]) -> Any:
    """An instance from a registry name, a class, or an instance (returned as is)."""
    if isinstance(spec, str):
        if spec not in registry:
            raise ValueError(f"{kind} must be one of {sorted(registry)}, got {spec!r}")
        return registry[spec]()
    if isinstance(spec, type):
        return spec()
    if not callable(spec):
        raise TypeError(f"{kind} must be a name, a class or a callable instance, got {spec!r}")
    return spec
