"""Model geometry and layer roles (SPEC section 1).

`ModelConfig` holds every field of the model; `validate()` checks each value and the role rules
and raises `ValueError` naming the offending field. Roles are derived, never configured:
a layer's role follows from its compress ratio and the kv/index/candidate source lists.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

ROLE_SWA = "swa"
ROLE_FULL = "full"
ROLE_REINDEX = "reindex"
ROLE_REUSE = "reuse"

SUPPORTED_RATIOS = (0, 1, 2)
"""Compress ratios the ds41 compressor has validated (SPEC section 5: V4.1 uses 1 and 2)."""


class Role(StrEnum):
    SWA = ROLE_SWA
    FULL = ROLE_FULL
    REINDEX = ROLE_REINDEX
    REUSE = ROLE_REUSE


@dataclass(frozen=True)
class LayerPlan:
    """What one layer does, derived from the config."""

    layer: int
    ratio: int
    role: Role
    kv_source: int | None
    """Layer whose compressed cache / index keys this layer reads (None for ratio 0)."""
    topk_source: int | None
    """Layer whose top-k this layer attends with (itself for index sources; None for ratio 0)."""
    candidate_source: bool
    """This layer publishes the candidate-block mask."""
    masked_by_candidates: bool
    """This Reindex layer masks its scores with the published candidate mask."""

    @property
    def is_kv_source(self) -> bool:
        return self.kv_source == self.layer

    @property
    def is_index_source(self) -> bool:
        return self.topk_source == self.layer


def _tuple(v: Any) -> tuple[int, ...]:
    return tuple(int(x) for x in v)


@dataclass
class ModelConfig:
    """Every field of a ds41 model (SPEC section 1). `n_layers = len(compress_ratios)`."""

    vocab_size: int = 512
    hidden: int = 64
    heads: int = 4
    head_dim: int = 64
    rope_dim: int = 16
    q_lora_rank: int = 32
    o_groups: int = 2
    o_lora_rank: int = 16
    window: int = 8
    index_heads: int = 2
    index_head_dim: int = 32
    index_topk: int = 4
    candidate_topk_blocks: int = 4
    candidate_block_size: int = 2
    compress_ratios: tuple[int, ...] = (0, 0, 2, 2, 2, 1, 1, 1, 1, 0)
    kv_source_layer_ids: tuple[int, ...] = (2, 5)
    index_source_layer_ids: tuple[int, ...] = (2, 4, 5, 7)
    candidate_source_layer_id: int | None = 5
    rope_theta: float = 10000.0
    compress_rope_theta: float = 160000.0
    yarn_factor: float = 4.0
    yarn_orig: int = 16
    yarn_beta_fast: float = 32.0
    yarn_beta_slow: float = 1.0
    rms_norm_eps: float = 1e-20
    mlp_hidden: int = 128
    max_position: int = 512
    compressor_capacity: int = 8
    softmax_scale: float | None = None
    """None = head_dim ** -0.5 (SPEC section 1)."""
    init_seed: int = 0
    init_std: float = 1.0
    """Multiplier on every weight's fan-in scaled init std."""

    def __post_init__(self) -> None:
        # YAML / omegaconf hand in lists; the config stores tuples so it is hashable and fixed.
        self.compress_ratios = _tuple(self.compress_ratios)
        self.kv_source_layer_ids = _tuple(self.kv_source_layer_ids)
        self.index_source_layer_ids = _tuple(self.index_source_layer_ids)

    # ---------------------------------------------------------------- derived quantities
    @property
    def n_layers(self) -> int:
        return len(self.compress_ratios)

    @property
    def scale(self) -> float:
        return self.head_dim**-0.5 if self.softmax_scale is None else float(self.softmax_scale)

    @property
    def ratios_in_use(self) -> tuple[int, ...]:
        """Distinct compress ratios > 0 of the kv-source layers, ascending."""
        return tuple(sorted({self.compress_ratios[i] for i in self.kv_source_layer_ids}))

    def to_dict(self) -> dict[str, Any]:
        """Plain fields (lists for the tuples), e.g. for YAML / Hydra."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            out[f.name] = list(v) if isinstance(v, tuple) else v
        return out

    # ---------------------------------------------------------------- presets
    @classmethod
    def preset(cls, name: str) -> ModelConfig:
        """`tiny` (CPU default), `flash_mini` (V4.1-Flash attention geometry, 8 layers, small
        hidden), `flash_wide` (flash_mini's layers at the V4.1 widths) or `flash` (the
        40-layer V4.1-Flash geometry)."""
        if name not in PRESETS:
            raise ValueError(f"preset must be one of {sorted(PRESETS)}, got {name!r}")
        cfg = cls(**PRESETS[name])
        cfg.validate()
        return cfg

    # ---------------------------------------------------------------- validation
    def validate(self) -> ModelConfig:
        """Check every field and the role rules; raise ValueError naming the field."""
        pos_ints = (
            "vocab_size", "hidden", "heads", "head_dim", "rope_dim", "q_lora_rank", "o_groups",
            "o_lora_rank", "window", "index_heads", "index_head_dim", "index_topk",
            "candidate_topk_blocks", "candidate_block_size", "mlp_hidden", "max_position",
            "compressor_capacity", "yarn_orig",
        )  # fmt: skip
        for name in pos_ints:
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise ValueError(f"{name} must be a positive int, got {v!r}")
        if not isinstance(self.init_seed, int) or isinstance(self.init_seed, bool):
            raise ValueError(f"init_seed must be an int, got {self.init_seed!r}")
        for name in ("rope_theta", "compress_rope_theta"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 1):
                raise ValueError(f"{name} must be a finite number > 1, got {v!r}")
        for name in ("yarn_factor", "yarn_beta_fast", "yarn_beta_slow", "init_std"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise ValueError(f"{name} must be a finite number > 0, got {v!r}")
        if self.yarn_beta_fast <= self.yarn_beta_slow:
            raise ValueError(
                f"yarn_beta_fast must exceed yarn_beta_slow ({self.yarn_beta_slow}), "
                f"got {self.yarn_beta_fast}"
            )
        if not (isinstance(self.rms_norm_eps, (int, float)) and 0 < self.rms_norm_eps < 1):
            raise ValueError(f"rms_norm_eps must lie in (0, 1), got {self.rms_norm_eps!r}")
        if self.softmax_scale is not None and not (
            math.isfinite(self.softmax_scale) and self.softmax_scale > 0
        ):
            raise ValueError(f"softmax_scale must be None or > 0, got {self.softmax_scale!r}")
        # Cache formats store rows in blocks of 32 channels (SPEC section 4); the attention and
        # index-key kernels take power-of-two widths.
        for name in ("head_dim", "index_head_dim"):
            v = getattr(self, name)
            if v < 32 or v & (v - 1):
                raise ValueError(f"{name} must be a power of two >= 32, got {v}")
        for name, dim in (("rope_dim", self.head_dim), ("rope_dim", self.index_head_dim)):
            if self.rope_dim % 2 or self.rope_dim > dim:
                raise ValueError(
                    f"{name} must be even and <= head_dim and index_head_dim ({dim}), "
                    f"got {self.rope_dim}"
                )
        if (self.heads * self.head_dim) % self.o_groups:
            raise ValueError(
                f"o_groups must divide heads * head_dim = {self.heads * self.head_dim}, "
                f"got {self.o_groups}"
            )
        cap = self.compressor_capacity
        if cap < 2 or cap & (cap - 1):
            raise ValueError(f"compressor_capacity must be a power of two >= 2, got {cap}")
        self._derive_plans()
        return self

    def _derive_plans(self) -> tuple[LayerPlan, ...]:
        ratios = self.compress_ratios
        n = len(ratios)
        if n == 0:
            raise ValueError("compress_ratios must name at least one layer, got ()")
        for i, r in enumerate(ratios):
            if r not in SUPPORTED_RATIOS:
                raise ValueError(f"compress_ratios[{i}] must be one of {SUPPORTED_RATIOS}, got {r}")
        for name in ("kv_source_layer_ids", "index_source_layer_ids"):
            ids = getattr(self, name)
            if list(ids) != sorted(set(ids)):
                raise ValueError(f"{name} must be strictly ascending, got {list(ids)}")
            for i in ids:
                if not 0 <= i < n:
                    raise ValueError(f"{name} must lie in [0, {n}), got {i}")
                if ratios[i] == 0:
                    raise ValueError(
                        f"{name} names layer {i} whose compress ratio is 0; sources need ratio > 0"
                    )
        kv_ids = self.kv_source_layer_ids
        idx_ids = self.index_source_layer_ids
        for i in kv_ids:
            if i not in idx_ids:
                raise ValueError(
                    f"kv_source_layer_ids: layer {i} must also be in index_source_layer_ids "
                    f"(a kv source is a Full layer), got {list(idx_ids)}"
                )
        cand = self.candidate_source_layer_id
        if cand is not None and cand not in kv_ids:
            raise ValueError(
                f"candidate_source_layer_id must be a Full layer (one of kv_source_layer_ids "
                f"{list(kv_ids)}), got {cand}"
            )
        plans: list[LayerPlan] = []
        kv_src: int | None = None
        idx_src: int | None = None
        for i, r in enumerate(ratios):
            if i in kv_ids:
                kv_src = i
            if i in idx_ids:
                idx_src = i
            if r == 0:
                plans.append(LayerPlan(i, 0, Role.SWA, None, None, False, False))
                continue
            if kv_src is None:
                raise ValueError(
                    f"compress_ratios[{i}] = {r} but no kv source (kv_source_layer_ids "
                    f"{list(kv_ids)}) precedes layer {i}"
                )
            if ratios[kv_src] != r:
                raise ValueError(
                    f"compress_ratios[{i}] = {r} must equal the ratio of its kv source layer "
                    f"{kv_src} ({ratios[kv_src]})"
                )
            if idx_src is None or idx_src < kv_src:
                raise ValueError(
                    f"layer {i} reuses a top-k, but no index source at or after its kv source "
                    f"{kv_src} precedes it (index_source_layer_ids {list(idx_ids)})"
                )
            if i == kv_src:
                role = Role.FULL
            elif i == idx_src:
                role = Role.REINDEX
            else:
                role = Role.REUSE
            masked = role is Role.REINDEX and cand is not None and cand < i
            if masked and kv_src != cand:
                raise ValueError(
                    f"index_source_layer_ids: Reindex layer {i} follows the candidate source "
                    f"{cand} but reads kv source {kv_src}; the candidate mask covers only "
                    f"layer {cand}'s entries"
                )
            plans.append(LayerPlan(i, r, role, kv_src, idx_src, i == cand, masked))
        return tuple(plans)

    @property
    def plans(self) -> tuple[LayerPlan, ...]:
        """Per-layer roles (validates the whole config first)."""
        self.validate()
        return self._derive_plans()


TINY: dict[str, Any] = {}
"""The SPEC section 1 `tiny` column: the dataclass defaults."""

FLASH_MINI: dict[str, Any] = dict(
    vocab_size=4096,
    hidden=1024,
    heads=64,
    head_dim=512,
    rope_dim=64,
    q_lora_rank=256,
    o_groups=8,
    o_lora_rank=256,
    window=128,
    index_heads=32,
    index_head_dim=128,
    index_topk=512,
    candidate_topk_blocks=2048,
    candidate_block_size=8,
    # Roles: 0 SWA; 1 Full (ratio 2); 2 Reuse; 3 Reindex (on 1); 4 Full ratio 1 + candidate
    # source; 5 Reuse; 6 Reindex masked by 4's candidates; 7 Reuse.
    compress_ratios=(0, 2, 2, 2, 1, 1, 1, 1),
    kv_source_layer_ids=(1, 4),
    index_source_layer_ids=(1, 3, 4, 6),
    candidate_source_layer_id=4,
    rope_theta=10000.0,
    compress_rope_theta=160000.0,
    yarn_factor=16.0,
    yarn_orig=65536,
    yarn_beta_fast=32.0,
    yarn_beta_slow=1.0,
    rms_norm_eps=1e-20,
    mlp_hidden=2048,
    max_position=65536,
    compressor_capacity=8,
)

FLASH: dict[str, Any] = dict(
    FLASH_MINI,
    vocab_size=129280,
    hidden=5120,
    q_lora_rank=1280,
    o_lora_rank=1024,
    compress_ratios=(0, 0) + (2,) * 18 + (1,) * 20,
    kv_source_layer_ids=(2, 8, 14, 20),
    index_source_layer_ids=(2, 8, 14, 20, 24, 28, 32, 36),
    candidate_source_layer_id=20,
    mlp_hidden=12288,
    max_position=1048576,
)

FLASH_WIDE: dict[str, Any] = dict(
    FLASH_MINI,
    vocab_size=129280,
    hidden=5120,
    q_lora_rank=1280,
    o_lora_rank=1024,
    mlp_hidden=12288,
)
"""flash_mini's 8 layers and roles at the V4.1 widths (hidden 5120, q_lora 1280, o_lora 1024,
vocabulary 129280; the dense MLP of `flash`): large enough for tensor parallelism to pay."""

PRESETS: dict[str, dict[str, Any]] = {
    "tiny": TINY,
    "flash_mini": FLASH_MINI,
    "flash_wide": FLASH_WIDE,
    "flash": FLASH,
}
