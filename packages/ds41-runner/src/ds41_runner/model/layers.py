"""One decoder layer: attention in its role (SPEC sections 1, 3) and a dense SwiGLU MLP."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import torch

from ds41_cache.paged import lookup_slots
from ds41_cache.rope import rope_cos_sin, rope_inplace

from ..ops.entries import entry_slots_positions
from ..ops.linear import grouped_linear, linear
from ..ops.norm import rmsnorm, rmsnorm_pair
from ..ops.swiglu import swiglu_gate
from .config import LayerPlan, ModelConfig
from .kv import KVState
from .weights import LayerWeights


@dataclass
class StepContext:
    """Per-forward values shared by all layers."""

    req_idx: torch.Tensor  # int32 [T]
    pos: torch.Tensor  # int32 [T]
    valid: torch.Tensor  # bool [T]
    window_slots: torch.Tensor  # int64 [T] (-1 on padding rows)
    kv: KVState
    validate: bool
    published_topk: dict[int, torch.Tensor] = field(default_factory=dict)
    """Index source layer -> its top-k (int32 [T, index_topk])."""
    candidates: torch.Tensor | None = None
    """The candidate source's entry mask (bool [T, N]) once published."""
    capture: dict[str, Any] | None = None
    rope_tables: dict[int, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)
    """RoPE frequency class -> the step's (cos, sin) f32 [T, R/2], computed once per step."""

    def cos_sin(self, key: int, freqs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The step's RoPE tables for frequency class `key` (`Runtime.freqs[key]`)."""
        if key not in self.rope_tables:
            self.rope_tables[key] = rope_cos_sin(self.pos, freqs)
        return self.rope_tables[key]

    entry_rope_tables: dict[int, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)
    """Compress ratio -> the step's (cos, sin) f32 [T, R/2] at the compressed entries'
    positions, computed once per step (not per kv-source layer, nor per cache written)."""

    def entry_cos_sin(
        self, ratio: int, entry_pos: torch.Tensor, freqs: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """RoPE tables at `entry_pos` (int32 [T], `e * ratio` per row) for compress ratio
        `ratio`. A row's entry (so its position) is a function of its request, its position and
        the ratio alone (`Compressor.forward`), the same in every kv-source layer of that ratio
        in a step, so the first layer's tables serve them all."""
        if ratio not in self.entry_rope_tables:
            self.entry_rope_tables[ratio] = rope_cos_sin(entry_pos, freqs)
        return self.entry_rope_tables[ratio]

    paged_indices: dict[tuple[int, int | None], tuple[Any, ...]] = field(default_factory=dict)
    """(ratio, top-k source layer) -> the step's `sparse_paged_indices` outputs. Their inputs
    are the step's rows, the window block table, the window, the replay starts (the same for
    every layer), the ratio's compressed block table and the top-k of the source layer: layers
    that share a ratio and a top-k source (a Reuse layer and its source) read the same slots,
    so the first of them computes them (one launch) and the others reuse them."""


@dataclass
class Runtime:
    """How the layers compute: mode, backend and the chosen components."""

    mode: str
    backend: str
    attention: Any
    indexer: Any
    compressor: Any
    freqs: dict[int, torch.Tensor]
    """Compress ratio class (0, or 1 for every ratio > 0) -> RoPE frequencies f32 [R/2]."""

    @property
    def backend_literal(self) -> Literal["torch", "triton"]:
        return "triton" if self.backend == "triton" else "torch"

    def lin(self, x: torch.Tensor, w: torch.Tensor, **kw: Any) -> torch.Tensor:
        return linear(x, w, mode=self.mode, backend=self.backend, **kw)

    def grouped_lin(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return grouped_linear(x, w, mode=self.mode, backend=self.backend)

    def norm(self, x: torch.Tensor, w: torch.Tensor, eps: float, **kw: Any) -> torch.Tensor:
        return rmsnorm(x, w, eps, backend=self.backend, **kw)

    def norm_pair(
        self, x1: torch.Tensor, w1: torch.Tensor, x2: torch.Tensor, w2: torch.Tensor, eps: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return rmsnorm_pair(x1, w1, x2, w2, eps, backend=self.backend)


def entry_slots(
    block_table: torch.Tensor, req_idx: torch.Tensor, entry: torch.Tensor, ok: torch.Tensor,
    page_size: int, backend: str = "auto",
) -> torch.Tensor:  # fmt: skip
    """int64 slots of `entry` ([T]) where `ok` and the page exists, else -1 (no host sync;
    one launch on the Triton backend)."""
    return lookup_slots(block_table, req_idx, entry, page_size, ok, backend=backend)[0]


def attention_block(
    cfg: ModelConfig,
    plan: LayerPlan,
    lw: LayerWeights,
    x: torch.Tensor,
    ctx: StepContext,
    rt: Runtime,
) -> torch.Tensor:
    """`x: bf16 [T, hidden]` (already normed) -> bf16 `[T, hidden]` attention output."""
    from ds41_cache.indices import sparse_paged_indices
    from ds41_cache.insert import insert

    t = x.shape[0]
    h, d = cfg.heads, cfg.head_dim
    eps = cfg.rms_norm_eps
    kv = ctx.kv
    layer = plan.layer
    freqs = rt.freqs[min(plan.ratio, 1)]
    cos, sin = ctx.cos_sin(min(plan.ratio, 1), freqs)
    ps = kv.page_size

    # `wq_a` and `wkv` read the same `x`: one launch over their concatenation (a row's
    # columns are a function of that row alone); `q_norm` and `kv_norm` read their column
    # ranges in place, in one launch (`rmsnorm_pair`: the bits of two `rmsnorm` calls).
    q_lora = lw.q_norm.shape[0]
    qkv = rt.lin(x, lw.wq_a_kv)
    qr, latent_kv = rt.norm_pair(qkv[:, :q_lora], lw.q_norm, qkv[:, q_lora:], lw.kv_norm, eps)
    # The projection's fresh output is rotated in place (bitwise `apply_rope`).
    q = rope_inplace(rt.lin(qr, lw.wq_b).view(t, h, d), cos, sin, backend=rt.backend)
    insert(
        kv.window[layer], latent_kv, ctx.window_slots, positions=ctx.pos, freqs=freqs,
        rope_tables=(cos, sin), validate=ctx.validate,
    )  # fmt: skip

    m = plan.ratio
    topk: torch.Tensor | None = None
    if m > 0:
        assert plan.kv_source is not None
        comp_bt = kv.comp_alloc[m].block_table
        if plan.is_kv_source:
            _compress(cfg, plan, lw, x, ctx, rt, freqs)
        if plan.is_index_source:
            topk = _index_topk(cfg, plan, lw, x, qr, ctx, rt, freqs, (cos, sin))
            ctx.published_topk[layer] = topk
        else:
            assert plan.topk_source is not None
            topk = ctx.published_topk[plan.topk_source]
        comp_cache = kv.comp[plan.kv_source]
    else:
        comp_bt = None
        comp_cache = None

    key = (m, plan.topk_source if m > 0 else None)
    if key not in ctx.paged_indices:
        ctx.paged_indices[key] = sparse_paged_indices(
            ctx.req_idx, ctx.pos, kv.window_alloc.block_table, cfg.window, kv.replay_start,
            topk, comp_bt, m, swa_page_size=ps, comp_page_size=ps, backend=rt.backend_literal,
            validate=ctx.validate,
        )  # fmt: skip
    swa_slots, swa_lens, comp_slots, comp_lens = ctx.paged_indices[key]
    out, lse = rt.attention(
        q, kv.window[layer], swa_slots, swa_lens, comp_cache, comp_slots, comp_lens,
        lw.sink, cfg.scale, validate=ctx.validate,
    )  # fmt: skip
    if ctx.capture is not None:
        ctx.capture[f"attn{layer}"] = out
        ctx.capture[f"lse{layer}"] = lse
        if topk is not None:
            ctx.capture[f"topk{layer}"] = topk
    # In place on the attention output, unless a test captured it above.
    out = rope_inplace(
        out if ctx.capture is None else out.clone(), cos, sin, inverse=True, backend=rt.backend
    )
    g = cfg.o_groups
    grouped = out.reshape(t, g, (h * d) // g)
    return rt.lin(rt.grouped_lin(grouped, lw.wo_a), lw.wo_b)


def _compress(
    cfg: ModelConfig,
    plan: LayerPlan,
    lw: LayerWeights,
    x: torch.Tensor,
    ctx: StepContext,
    rt: Runtime,
    freqs: torch.Tensor,
) -> None:
    """Compressor -> latent entries; index keys from the pre-RoPE latent; RoPE at `e*m`,
    quantize and write the compressed cache (SPEC sections 3, 5, 6)."""
    from ds41_cache.insert import insert
    from ds41_indexer import write_index_keys

    kv = ctx.kv
    m = plan.ratio
    layer = plan.layer
    assert lw.wkv_gate_c is not None and lw.c_norm is not None
    assert lw.wk_idx is not None and lw.k_norm is not None
    # `wkv_c` (and `wgate_c` at ratio 2) in one launch; the compressor reads the two column
    # ranges in place (row strides).
    kvg = rt.lin(x, lw.wkv_gate_c, fp32=True, out_dtype=torch.float32)
    dim = lw.c_norm.shape[0]
    kv_c = kvg[:, :dim]
    score = None
    if m == 2:
        assert kvg.shape[1] == 2 * dim
        score = kvg[:, dim:]
    latent, emit, entry = rt.compressor(
        kv.compressors[layer], kv_c, score, ctx.req_idx, ctx.pos, lw.c_norm, cfg.rms_norm_eps,
        validate=ctx.validate, backend=rt.backend,
    )  # fmt: skip
    # The entries' slots, positions `e * m` and (first kv source of the ratio in the step)
    # their RoPE tables: one launch on the Triton backend (`ops.entries`, the same bits).
    first = m not in ctx.entry_rope_tables
    slots, entry_pos, fresh = entry_slots_positions(
        kv.comp_alloc[m].block_table, ctx.req_idx, entry, emit, kv.page_size, m,
        freqs=freqs if first else None, backend=rt.backend,
    )  # fmt: skip
    if fresh is not None:
        ctx.entry_rope_tables[m] = fresh
    tables = ctx.entry_cos_sin(m, entry_pos, freqs)
    k_proj = rt.lin(latent, lw.wk_idx)
    write_index_keys(
        k_proj, lw.k_norm, cfg.rms_norm_eps, entry_pos, freqs, kv.index_keys[layer], slots,
        rope_tables=tables, backend=rt.backend, validate=ctx.validate,
    )  # fmt: skip
    insert(
        kv.comp[layer], latent, slots, positions=entry_pos, freqs=freqs, rope_tables=tables,
        validate=ctx.validate,
    )  # fmt: skip
    if ctx.capture is not None:
        ctx.capture[f"latent{layer}"] = latent
        ctx.capture[f"emit{layer}"] = emit


def _index_topk(
    cfg: ModelConfig,
    plan: LayerPlan,
    lw: LayerWeights,
    x: torch.Tensor,
    qr: torch.Tensor,
    ctx: StepContext,
    rt: Runtime,
    freqs: torch.Tensor,
    tables: tuple[torch.Tensor, torch.Tensor],
) -> torch.Tensor:
    """Index queries and head weights, then the indexer's top-k over the kv source's index
    keys (masked by the published candidates on Reindex layers after the candidate source);
    the candidate source publishes its candidate-block mask. `tables`: the step's (cos, sin)
    at the rows' positions for `freqs` (the layer's query tables)."""
    from ds41_indexer import index_queries_and_weights

    kv = ctx.kv
    m = plan.ratio
    assert plan.kv_source is not None
    assert lw.wq_b_idx is not None and lw.weights_proj is not None
    # The queries' cast, RoPE and MXFP4 round trip and the head weights' scale: one launch
    # on the Triton backend (the bits of `prepare_index_queries` and `head_weights`).
    qi, w = index_queries_and_weights(
        rt.lin(qr, lw.wq_b_idx), rt.lin(x, lw.weights_proj, out_dtype=torch.float32), ctx.pos,
        freqs, cfg.index_heads, rope_tables=tables, backend=rt.backend, validate=ctx.validate,
    )  # fmt: skip
    key_cache = kv.index_keys[plan.kv_source]
    block_table = kv.comp_alloc[m].block_table
    cand = ctx.candidates if plan.masked_by_candidates else None
    topk: torch.Tensor = rt.indexer(
        qi, w, key_cache, block_table, ctx.req_idx, ctx.pos, m, cfg.index_topk,
        candidates=cand, validate=ctx.validate,
    )  # fmt: skip
    if plan.candidate_source:
        ctx.candidates = _candidate_mask(cfg, plan, qi, w, ctx, rt)
        if ctx.capture is not None:
            ctx.capture[f"candidates{plan.layer}"] = ctx.candidates
    return topk


def _candidate_mask(
    cfg: ModelConfig,
    plan: LayerPlan,
    qi: torch.Tensor,
    w: torch.Tensor,
    ctx: StepContext,
    rt: Runtime,
) -> torch.Tensor:
    """bool [T, N] entry mask of the candidate blocks (SPEC section 6), N = the entries a
    request can hold at this ratio."""
    from ds41_indexer import candidate_blocks, index_logits, visible_entries

    kv = ctx.kv
    m = plan.ratio
    assert plan.kv_source is not None
    alloc = kv.comp_alloc[m]
    logits = index_logits(
        qi, w, kv.index_keys[plan.kv_source], alloc.block_table, ctx.req_idx, ctx.pos, m,
        backend=rt.backend, validate=ctx.validate,
    )  # fmt: skip
    n_visible = visible_entries(ctx.req_idx, ctx.pos, m, backend=rt.backend)
    return candidate_blocks(  # type: ignore[no-any-return]
        logits, n_visible, cfg.candidate_topk_blocks, cfg.candidate_block_size,
        backend=rt.backend, validate=ctx.validate,
    )  # fmt: skip


def mlp_block(lw: LayerWeights, x: torch.Tensor, rt: Runtime) -> torch.Tensor:
    """SwiGLU: `w2(silu(w1 x) * w3 x)`, bf16 in and out; `w1 x` and `w3 x` in one launch
    over `w13` (a tensor-parallel rank: its halves of both), the gate (`ops.swiglu`: silu in
    float64, one launch on the Triton backend) reading the two column halves in place."""
    ab = rt.lin(x, lw.w13)
    f = ab.shape[1] // 2
    gate = swiglu_gate(ab[:, :f], ab[:, f:], backend=rt.backend)
    return rt.lin(gate, lw.w2)
