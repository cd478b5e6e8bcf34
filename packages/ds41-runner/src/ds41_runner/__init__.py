"""ds41 runner: a batch-invariant DeepSeek-V4.1-style model, its serving engine and Hydra app.

import ds41_runner
cfg = ds41_runner.compose(["model=tiny", "chunk_size=16"])
engine = ds41_runner.Engine.from_config(cfg)
results = engine.generate([[1, 2, 3]], max_new_tokens=4, seeds=[0])
logprobs = engine.score([[1, 2, 3] + results[0].tokens], prompt_lens=[3])
"""

from __future__ import annotations

from typing import Any

from .app_config import RunConfig, compose, validate
from .engine import Engine, EngineStats, Result

__all__ = ["Engine", "EngineStats", "KVState", "Model", "ModelConfig", "Result", "RunConfig",
           "compose", "validate"]  # fmt: skip


def __getattr__(name: str) -> Any:
    # The model is imported lazily: config and engine work without building it.
    if name in ("Model", "KVState", "ModelConfig"):
        from . import model

        return getattr(model, name)
    raise AttributeError(f"module 'ds41_runner' has no attribute {name!r}")
