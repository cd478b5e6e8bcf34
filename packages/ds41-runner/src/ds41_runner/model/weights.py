"""Seeded random weights, scaled so activations stay O(1) through every layer.

Linear weights are `N(0, 1) * init_std / sqrt(fan_in)`; the two projections that feed the
residual stream (`wo_b`, `w2`) are further scaled by `1 / sqrt(2 * n_layers)` so the residual
grows slowly. Norm weights are `1 + 0.1 * N(0, 1)` (not all ones, so a swapped or missing
norm weight changes the output). Everything is drawn on the CPU from one generator seeded with
`init_seed`, in a fixed order, then moved to the device: the same seed gives the same model on
every device.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from .config import LayerPlan, ModelConfig


@dataclass
class LayerWeights:
    """One layer's tensors (bf16 unless noted).

    Projections that read the same input are held concatenated along N (rows), so each group is
    one matmul launch (`layers.py`): `wq_a_kv` = `wq_a` rows then `wkv` rows, `w13` = `w1`
    rows then `w3` rows, `wkv_gate_c` = `wkv_c` rows then (ratio 2) `wgate_c` rows. The
    separate names are properties returning row views of the fused tensor (no second copy).
    A tensor-parallel rank's `w13` holds its slice of `w1` then its slice of `w3`.
    """

    attn_norm: torch.Tensor  # [hidden]
    wq_a_kv: torch.Tensor  # [q_lora + D, hidden]: wq_a, then wkv
    q_norm: torch.Tensor  # [q_lora]
    wq_b: torch.Tensor  # [H * D, q_lora]
    kv_norm: torch.Tensor  # [D]
    sink: torch.Tensor  # f32 [H]
    wo_a: torch.Tensor  # [G, o_lora, H * D / G]
    wo_b: torch.Tensor  # [hidden, G * o_lora]
    mlp_norm: torch.Tensor  # [hidden]
    w13: torch.Tensor  # [2 * mlp_hidden, hidden]: w1, then w3
    w2: torch.Tensor  # [hidden, mlp_hidden]
    # kv sources (ratio > 0): compressor and index-key projections
    wkv_gate_c: torch.Tensor | None = None
    """f32 (bf16 values) `[D, hidden]` (`wkv_c`), or `[2 * D, hidden]` at ratio 2 (`wkv_c`
    then `wgate_c`)."""
    c_norm: torch.Tensor | None = None  # [D]
    wk_idx: torch.Tensor | None = None  # [Di, D]
    k_norm: torch.Tensor | None = None  # [Di]
    # index sources: index queries and head weights
    wq_b_idx: torch.Tensor | None = None  # [Hi * Di, q_lora]
    weights_proj: torch.Tensor | None = None  # [Hi, hidden]

    @property
    def wq_a(self) -> torch.Tensor:
        """`[q_lora, hidden]` (a view of `wq_a_kv`)."""
        return self.wq_a_kv[: self.q_norm.shape[0]]

    @property
    def wkv(self) -> torch.Tensor:
        """`[D, hidden]` (a view of `wq_a_kv`)."""
        return self.wq_a_kv[self.q_norm.shape[0] :]

    @property
    def w1(self) -> torch.Tensor:
        """`[mlp_hidden, hidden]` (a TP rank: its rows; a view of `w13`)."""
        return self.w13[: self.w13.shape[0] // 2]

    @property
    def w3(self) -> torch.Tensor:
        """`[mlp_hidden, hidden]` (a TP rank: its rows; a view of `w13`)."""
        return self.w13[self.w13.shape[0] // 2 :]

    @property
    def wkv_c(self) -> torch.Tensor | None:
        """f32 `[D, hidden]` (a view of `wkv_gate_c`), None outside kv sources."""
        if self.wkv_gate_c is None:
            return None
        return self.wkv_gate_c[: self.kv_norm.shape[0]]

    @property
    def wgate_c(self) -> torch.Tensor | None:
        """f32 `[D, hidden]` (a view of `wkv_gate_c`), None unless the ratio is 2."""
        d = self.kv_norm.shape[0]
        if self.wkv_gate_c is None or self.wkv_gate_c.shape[0] == d:
            return None
        return self.wkv_gate_c[d:]


@dataclass
class ModelWeights:
    embed: torch.Tensor  # [V, hidden]
    final_norm: torch.Tensor  # [hidden]
    lm_head: torch.Tensor  # [V, hidden]
    layers: list[LayerWeights] = field(default_factory=list)

    def num_parameters(self) -> int:
        n = self.embed.numel() + self.final_norm.numel() + self.lm_head.numel()
        for lw in self.layers:
            for v in vars(lw).values():
                if isinstance(v, torch.Tensor):
                    n += v.numel()
        return n


class _Init:
    def __init__(
        self,
        cfg: ModelConfig,
        device: torch.device,
        dtype: torch.dtype,
        seed: int,
        draw_device: torch.device | None = None,
    ) -> None:
        self.draw = torch.device("cpu") if draw_device is None else draw_device
        self.gen = torch.Generator(device=self.draw).manual_seed(seed)
        self.std = cfg.init_std
        self.device = device
        self.dtype = dtype

    def randn(self, *shape: int) -> torch.Tensor:
        return torch.randn(shape, generator=self.gen, dtype=torch.float32, device=self.draw)

    def linear(self, *shape: int, extra: float = 1.0) -> torch.Tensor:
        w = self.randn(*shape) * (self.std * extra / math.sqrt(shape[-1]))
        return w.to(self.device, self.dtype)

    def norm(self, n: int) -> torch.Tensor:
        return (1.0 + 0.1 * self.randn(n)).to(self.device, self.dtype)


def init_weights(
    cfg: ModelConfig,
    device: torch.device,
    dtype: torch.dtype = torch.bfloat16,
    *,
    seed: int | None = None,
    draw_device: torch.device | str | None = None,
) -> ModelWeights:
    """Deterministic weights for `cfg` (see the module doc); `seed` overrides `init_seed`.

    `draw_device` (default the CPU) is where the generator draws: a CUDA generator is much
    faster for large models (benchmarks) but gives other values than the CPU's.
    """
    plans = cfg.plans
    draw = None if draw_device is None else torch.device(draw_device)
    g = _Init(cfg, device, dtype, cfg.init_seed if seed is None else seed, draw)
    hd = cfg.heads * cfg.head_dim
    resid = 1.0 / math.sqrt(2 * cfg.n_layers)
    embed = g.randn(cfg.vocab_size, cfg.hidden).to(device, dtype)
    layers = [_layer(cfg, p, g, hd, resid) for p in plans]
    final_norm = g.norm(cfg.hidden)
    lm_head = g.linear(cfg.vocab_size, cfg.hidden)
    return ModelWeights(embed, final_norm, lm_head, layers)


def _layer(cfg: ModelConfig, p: LayerPlan, g: _Init, hd: int, resid: float) -> LayerWeights:
    d = cfg.head_dim
    # Drawn in the order of the separate projections (the same values for a seed), then
    # concatenated along N into the fused tensors (`LayerWeights`).
    attn_norm = g.norm(cfg.hidden)
    wq_a = g.linear(cfg.q_lora_rank, cfg.hidden)
    q_norm = g.norm(cfg.q_lora_rank)
    wq_b = g.linear(hd, cfg.q_lora_rank)
    wkv = g.linear(d, cfg.hidden)
    kv_norm = g.norm(d)
    sink = g.randn(cfg.heads).to(g.device, torch.float32)
    wo_a = g.linear(cfg.o_groups, cfg.o_lora_rank, hd // cfg.o_groups)
    wo_b = g.linear(cfg.hidden, cfg.o_groups * cfg.o_lora_rank, extra=resid)
    mlp_norm = g.norm(cfg.hidden)
    w1 = g.linear(cfg.mlp_hidden, cfg.hidden)
    w3 = g.linear(cfg.mlp_hidden, cfg.hidden)
    w2 = g.linear(cfg.hidden, cfg.mlp_hidden, extra=resid)
    lw = LayerWeights(
        attn_norm=attn_norm,
        wq_a_kv=torch.cat([wq_a, wkv]),
        q_norm=q_norm,
        wq_b=wq_b,
        kv_norm=kv_norm,
        sink=sink,
        wo_a=wo_a,
        wo_b=wo_b,
        mlp_norm=mlp_norm,
        w13=torch.cat([w1, w3]),
        w2=w2,
    )
    del wq_a, wkv, w1, w3
    if p.is_kv_source:
        # The compressor's projections run in fp32 (`fp32=True`): held in fp32 once here
        # (exact: bf16 values) instead of converted in every step.
        parts = [g.linear(d, cfg.hidden).float()]
        if p.ratio == 2:
            parts.append(g.linear(d, cfg.hidden).float())
        lw.wkv_gate_c = torch.cat(parts)
        lw.c_norm = g.norm(d)
        lw.wk_idx = g.linear(cfg.index_head_dim, d)
        lw.k_norm = g.norm(cfg.index_head_dim)
    if p.is_index_source:
        lw.wq_b_idx = g.linear(cfg.index_heads * cfg.index_head_dim, cfg.q_lora_rank)
        lw.weights_proj = g.linear(cfg.index_heads, cfg.hidden)
    return lw
