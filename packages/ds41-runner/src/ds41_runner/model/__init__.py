"""The ds41 model: config and roles, cache state, weights and the forward pass."""

from .config import LayerPlan, ModelConfig, Role
from .kv import KV_DTYPES, KVState, PrefixPages
from .model import Model

__all__ = ["KV_DTYPES", "KVState", "LayerPlan", "Model", "ModelConfig", "PrefixPages", "Role"]
