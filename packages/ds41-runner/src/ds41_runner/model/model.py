"""The ds41 model: embedding, decoder layers in their roles, final norm, LM head, log-softmax.

Simplifications against V4.1 (documented, deliberate): a dense SwiGLU MLP instead of MoE and
plain residuals instead of hyper-connections. The attention stack follows SPEC sections 1-9.
"""

from __future__ import annotations

from typing import Any

import torch

from ds41_cache.backend import canonical_device, resolve_backend

from .. import components as comp
from ..ops.linear import check_mode
from ..ops.logits import log_softmax
from ..ops.norm import UNMARKED, embed_rmsnorm, residual_rmsnorm
from ..ops.vocab import Pick, RowSampling
from ..ops.vocab import pick as vocab_pick
from .config import ModelConfig
from .kv import KVState
from .layers import Runtime, StepContext, attention_block, entry_slots, mlp_block
from .weights import ModelWeights, init_weights

NO_NONFINITE_STAGE = UNMARKED
"""`nonfinite_stage` of a row whose embedding and every block output were finite."""


def nonfinite_stage_name(stage: int) -> str:
    """Where a row first turned non-finite, from `Model.forward(nonfinite_stage=)`'s code:
    0 = the embedding, 1 + 2l = layer l's attention block, 2 + 2l = layer l's MLP block,
    -1 = none of those (so the final norm, the LM head or the log-softmax)."""
    if stage == NO_NONFINITE_STAGE:
        return "the final norm / LM head (every layer's output was finite)"
    if stage == 0:
        return "the embedding"
    layer, block = divmod(stage - 1, 2)
    return f"layer {layer}'s {'attention' if block == 0 else 'MLP'} block"


def _rope_tables(cfg: ModelConfig, device: torch.device) -> dict[int, torch.Tensor]:
    """0: plain `rope_theta` (ratio-0 layers); 1: YaRN `compress_rope_theta` (ratio > 0)."""
    from ds41_cache.rope import RopeConfig, rope_freqs

    plain = RopeConfig(cfg.rope_dim, cfg.rope_theta)
    yarn = RopeConfig(
        cfg.rope_dim,
        cfg.compress_rope_theta,
        yarn_factor=cfg.yarn_factor,
        yarn_orig=cfg.yarn_orig,
        beta_fast=cfg.yarn_beta_fast,
        beta_slow=cfg.yarn_beta_slow,
    )
    return {0: rope_freqs(plain).to(device), 1: rope_freqs(yarn).to(device)}


class Model:
    """A seeded random ds41 model (see the module doc).

    `mode="bi"`: every op batch invariant (and every component must declare
    `batch_invariant = True` in its own class); `mode="fast"`: torch matmuls, split-KV
    attention and bf16 indexer logits where available.
    """

    def __init__(
        self,
        cfg: ModelConfig,
        *,
        mode: str = "bi",
        backend: str = "auto",
        device: torch.device | str = "cpu",
        seed: int | None = None,
        attention_impl: Any = None,
        indexer_impl: Any = None,
        compressor_impl: Any = None,
        weights: ModelWeights | None = None,
    ) -> None:
        check_mode(mode)
        cfg.validate()
        self.cfg = cfg
        self.mode = mode
        self.device = canonical_device(device)
        self.backend = resolve_backend(backend, self.device)
        self.plans = cfg.plans
        on_triton = self.backend == "triton"
        if attention_impl is None:
            if mode == "bi":
                attention_impl = "triton_invariant" if on_triton else "torch"
            else:
                attention_impl = "triton_split_kv" if on_triton else "torch"
        if indexer_impl is None:
            indexer_impl = "fp32_fused" if mode == "bi" else "bf16"
        if compressor_impl is None:
            compressor_impl = "ring"
        parts = {
            "attention_impl": comp.make_component(
                "attention_impl", attention_impl, comp.ATTENTION_IMPLS
            ),
            "indexer_impl": comp.make_component("indexer_impl", indexer_impl, comp.INDEXER_IMPLS),
            "compressor_impl": comp.make_component(
                "compressor_impl", compressor_impl, comp.COMPRESSOR_IMPLS
            ),
        }
        if mode == "bi":
            bad = [
                f"{k}={type(v).__name__}"
                for k, v in parts.items()
                if not comp.declares_batch_invariant(v)
            ]
            if bad:
                raise ValueError(
                    "mode='bi' needs components whose own class declares batch_invariant = "
                    f"True; these do not: {', '.join(bad)}"
                )
        self.seed = cfg.init_seed if seed is None else int(seed)
        self.attention_impl = parts["attention_impl"]
        self.indexer_impl = parts["indexer_impl"]
        self.compressor_impl = parts["compressor_impl"]
        self.weights: ModelWeights = (
            init_weights(cfg, self.device, seed=self.seed) if weights is None else weights
        )
        self.layer_cfg = cfg
        """The geometry the layers see (a tensor-parallel rank's: its share of the heads)."""
        self.runtime = Runtime(
            mode=mode,
            backend=self.backend,
            attention=self.attention_impl,
            indexer=self.indexer_impl,
            compressor=self.compressor_impl,
            freqs=_rope_tables(cfg, self.device),
        )

    @property
    def vocab_size(self) -> int:
        return self.cfg.vocab_size

    def make_kv(self, **kw: Any) -> KVState:
        """A `KVState` for this model on its device (keywords as `KVState`)."""
        kw.setdefault("device", self.device)
        return KVState(self.cfg, **kw)

    # ------------------------------------------------------------------ forward
    def forward(
        self,
        tokens: torch.Tensor,
        req_idx: torch.Tensor,
        pos: torch.Tensor,
        kv: KVState,
        *,
        validate: bool = True,
        capture: dict[str, Any] | None = None,
        logit_rows: torch.Tensor | None = None,
        nonfinite_stage: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """`tokens: int64 [T]`, `req_idx: int32 [T]` (-1 = padding), `pos: int32 [T]` ->
        log-probabilities f32 `[T, V]`, or `[S, V]` for the rows `logit_rows: int64 [S]` only
        (the final norm, LM head and log-softmax are row-wise, so a row's bits are the same).

        Rows of a request have consecutive ascending positions; the caches hold all earlier
        positions and `kv.reserve` covered these. Padding rows write nothing (their output
        is unspecified). `validate=False` skips every check that syncs with the host.
        `capture`, when a dict, receives per-layer intermediates (`attn{l}`, `lse{l}`,
        `topk{l}`, `latent{l}`, `emit{l}`, `candidates{l}`) for tests.
        `nonfinite_stage: int64 [T]`, when given, receives for each row the first stage whose
        output had a NaN/inf (`nonfinite_stage_name` reads it; -1 = none): the engine names
        the layer of a non-finite log-prob without a host sync (one reduction per block).

        Pending block-table changes of `kv` are uploaded first (`kv.flush()`); under CUDA-graph
        capture the caller must have flushed them already.
        """
        h = self._final_hidden(tokens, req_idx, pos, kv, validate=validate, capture=capture,
                               logit_rows=logit_rows, nonfinite_stage=nonfinite_stage)  # fmt: skip
        return self._log_softmax(self._lm_head(h))

    __call__ = forward

    def pick(
        self,
        tokens: torch.Tensor,
        req_idx: torch.Tensor,
        pos: torch.Tensor,
        kv: KVState,
        sampling: RowSampling,
        *,
        logit_rows: torch.Tensor,
        validate: bool = True,
        nonfinite_stage: torch.Tensor | None = None,
        filters: bool = False,
        full_rows: bool = False,
    ) -> Pick:
        """`forward` and sampling of the rows `logit_rows: int64 [S]` (`sampling`: `[S]` each)
        without materialising the log-prob rows: the tokens, the chosen tokens' log-probs
        (bitwise `forward(...)[s, chosen]`) and, with `full_rows`, the `[S, V]` rows.

        `filters`: some row has temperature > 0 and top-k or top-p on (a static flag: it
        decides whether the full logits are needed; rows without an active filter get the
        same bits either way). See `ops.vocab.pick`."""
        h = self._final_hidden(tokens, req_idx, pos, kv, validate=validate,
                               logit_rows=logit_rows, nonfinite_stage=nonfinite_stage)  # fmt: skip
        x, v0 = self._local_logits(h)
        return vocab_pick(
            x, sampling, vocab=self.cfg.vocab_size, v0=v0,
            gather_partials=self._gather_partials, gather_logits=self._gather_logits,
            filters=filters, full_rows=full_rows, backend=self.backend,
        )  # fmt: skip

    def _final_hidden(
        self,
        tokens: torch.Tensor,
        req_idx: torch.Tensor,
        pos: torch.Tensor,
        kv: KVState,
        *,
        validate: bool,
        capture: dict[str, Any] | None = None,
        logit_rows: torch.Tensor | None = None,
        nonfinite_stage: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The layers, then the final norm of the logit rows: `[S, hidden]` (`forward`)."""
        self._check_inputs(tokens, req_idx, pos, kv)
        if nonfinite_stage is not None and (
            nonfinite_stage.shape != tokens.shape
            or nonfinite_stage.dtype != torch.int64
            or nonfinite_stage.device != self.device
        ):
            raise TypeError(
                f"nonfinite_stage must be int64 {list(tokens.shape)} on {self.device}, got "
                f"{nonfinite_stage.dtype} {list(nonfinite_stage.shape)} on "
                f"{nonfinite_stage.device}"
            )
        if logit_rows is not None and (
            logit_rows.dim() != 1
            or logit_rows.dtype != torch.int64
            or logit_rows.device != self.device
        ):
            raise TypeError(
                f"logit_rows must be int64 [S] on {self.device}, got {logit_rows.dtype} "
                f"{list(logit_rows.shape)} on {logit_rows.device}"
            )
        kv.flush()
        if validate:
            self._check_values(tokens, req_idx, pos, kv)
        cfg, w, rt = self.cfg, self.weights, self.runtime
        valid = req_idx >= 0
        win_slots = entry_slots(
            kv.window_alloc.block_table, req_idx, pos, valid, kv.page_size, rt.backend
        )
        ctx = StepContext(req_idx, pos, valid, win_slots, kv, validate, capture=capture)
        eps = cfg.rms_norm_eps
        # Each residual add, the non-finite mark of its sum and the next block's input norm
        # run as one step (`residual_rmsnorm`: one launch on the Triton backend); the first
        # step also picks the embedding rows (`embed_rmsnorm`), unless `_embed` is overridden
        # (tensor parallelism gathers the rows).
        h: torch.Tensor | None
        if type(self)._embed is Model._embed:
            x, h = embed_rmsnorm(
                tokens, req_idx, w.embed, w.layers[0].attn_norm, eps, nonfinite=nonfinite_stage,
                stage=0, backend=rt.backend,
            )  # fmt: skip
        else:
            tok = torch.where(valid, tokens, torch.zeros_like(tokens)).clamp(0, cfg.vocab_size - 1)
            x = self._embed(tok)
            if nonfinite_stage is not None:
                nonfinite_stage.fill_(NO_NONFINITE_STAGE)
            x, h = residual_rmsnorm(
                x, None, w.layers[0].attn_norm, eps, nonfinite=nonfinite_stage, stage=0,
                backend=rt.backend,
            )  # fmt: skip
        layers = list(zip(self.plans, w.layers, strict=True))
        for i, (plan, lw) in enumerate(layers):
            assert h is not None
            attn = attention_block(self.layer_cfg, plan, lw, h, ctx, rt)
            x, h = residual_rmsnorm(x, attn, lw.mlp_norm, eps, nonfinite=nonfinite_stage,
                                    stage=1 + 2 * plan.layer, backend=rt.backend)  # fmt: skip
            assert h is not None
            # The last block's sum gets the final norm in the same launch (a row's norm is a
            # function of that row alone, so norming every row and keeping the logit rows
            # gives the bits of norming the logit rows).
            nxt = layers[i + 1][1].attn_norm if i + 1 < len(layers) else w.final_norm
            x, h = residual_rmsnorm(x, mlp_block(lw, h, rt), nxt, eps, nonfinite=nonfinite_stage,
                                    stage=2 + 2 * plan.layer, backend=rt.backend)  # fmt: skip
            if capture is not None:
                capture[f"hidden{plan.layer}"] = x
        assert h is not None
        if logit_rows is not None:
            h = h.index_select(0, logit_rows)
        return h

    def _embed(self, tok: torch.Tensor) -> torch.Tensor:
        """int64 `[T]` token ids in range -> bf16 `[T, hidden]` (a hook for tensor parallelism)."""
        return self.weights.embed[tok]

    def _lm_head(self, h: torch.Tensor) -> torch.Tensor:
        """Normed bf16 `[S, hidden]` -> f32 logits `[S, V]` (a hook for tensor parallelism)."""
        return self.runtime.lin(h, self.weights.lm_head, out_dtype=torch.float32)

    def _local_logits(self, h: torch.Tensor) -> tuple[torch.Tensor, int]:
        """Normed bf16 `[S, hidden]` -> this process's f32 logits `[S, Vl]` and their first
        vocabulary id (all of them here; a tensor-parallel rank's shard in `TPModel`)."""
        return self._lm_head(h), 0

    def _gather_partials(self, parts: torch.Tensor) -> torch.Tensor:
        """This process's vocabulary partials `[S, n, F]` -> every segment's (here: the same)."""
        return parts

    def _gather_logits(self, x: torch.Tensor) -> torch.Tensor:
        """This process's logits (`_local_logits`) -> the full `[S, V]` (here: the same)."""
        return x

    def _log_softmax(self, logits: torch.Tensor) -> torch.Tensor:
        """Full f32 logits `[S, V]` -> log-probs `[S, V]` (segmented: `ops.vocab`)."""
        return log_softmax(logits, backend=self.backend)

    def _check_inputs(
        self,
        tokens: torch.Tensor,
        req_idx: torch.Tensor,
        pos: torch.Tensor,
        kv: KVState,
    ) -> None:
        if not isinstance(kv, KVState):
            raise TypeError(f"kv must be a KVState, got {type(kv).__name__}")
        if kv.cfg is not self.cfg and _geometry(kv.cfg) != _geometry(self.cfg):
            raise ValueError("kv was built for a ModelConfig of another geometry")
        if kv.device != self.device:
            raise ValueError(f"kv is on {kv.device}, the model on {self.device}")
        if tokens.dim() != 1 or tokens.dtype != torch.int64:
            raise TypeError(f"tokens must be int64 [T], got {tokens.dtype} {list(tokens.shape)}")
        t = tokens.shape[0]
        for name, x in (("req_idx", req_idx), ("pos", pos)):
            if x.dtype != torch.int32 or tuple(x.shape) != (t,):
                raise TypeError(f"{name} must be int32 [{t}], got {x.dtype} {list(x.shape)}")
        for name, x in (("tokens", tokens), ("req_idx", req_idx), ("pos", pos)):
            if x.device != self.device:
                raise ValueError(f"{name} is on {x.device}, the model on {self.device}")

    def _check_values(
        self, tokens: torch.Tensor, req_idx: torch.Tensor, pos: torch.Tensor, kv: KVState
    ) -> None:
        """Value checks (host syncs): request slots, token ids, positions, reserved pages."""
        t = tokens.shape[0]
        if t == 0:
            return
        r = req_idx.cpu().tolist()
        p = pos.cpu().tolist()
        tk = tokens.cpu().tolist()
        last: dict[int, int] = {}
        for i in range(t):
            if r[i] == -1:
                continue
            if not 0 <= r[i] < kv.max_requests:
                raise IndexError(
                    f"req_idx[{i}] must be -1 or in [0, {kv.max_requests}), got {r[i]}"
                )
            if not 0 <= tk[i] < self.cfg.vocab_size:
                raise ValueError(
                    f"tokens[{i}] (request {r[i]}) must lie in [0, {self.cfg.vocab_size}), "
                    f"got {tk[i]}"
                )
            if not 0 <= p[i] < kv.max_tokens_per_request:
                raise ValueError(
                    f"pos[{i}] (request {r[i]}) must lie in [0, {kv.max_tokens_per_request}), "
                    f"got {p[i]}"
                )
            if r[i] in last and p[i] != last[r[i]] + 1:
                raise ValueError(
                    f"rows of request {r[i]} must have consecutive ascending positions; "
                    f"pos[{i}] = {p[i]} follows {last[r[i]]}"
                )
            last[r[i]] = p[i]
        self._check_pages(kv, r, p)

    def _check_pages(self, kv: KVState, r: list[int], p: list[int]) -> None:
        ps = kv.page_size
        win = kv.window_alloc.block_table.cpu()
        comp_bt = {m: a.block_table.cpu() for m, a in kv.comp_alloc.items()}
        for req, pp in zip(r, p, strict=True):
            if req < 0:
                continue
            if int(win[req, pp // ps]) < 0:
                raise ValueError(
                    f"request {req} has no window page for position {pp}: call "
                    f"kv.reserve({req}, {pp + 1}) first"
                )
            for m, bt in comp_bt.items():
                n = (pp + 1) // m
                if n and int(bt[req, (n - 1) // ps]) < 0:
                    raise ValueError(
                        f"request {req} has no ratio-{m} compressed page for position {pp}: "
                        f"call kv.reserve({req}, {pp + 1}) first"
                    )


def _geometry(cfg: ModelConfig) -> dict[str, Any]:
    fields = cfg.to_dict()
    fields.pop("init_seed")
    fields.pop("init_std")
    return fields
