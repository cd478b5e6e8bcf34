"""Serving engine: requests, scheduler, prefix cache, CUDA graphs."""

from .engine import Engine, EngineStats, StepRecord, resolve_device
from .prefix_cache import PrefixCache, chain_hashes
from .request import Request, Result, Status
from .scheduler import Scheduler, StepPlan

__all__ = [
    "Engine",
    "EngineStats",
    "PrefixCache",
    "Request",
    "Result",
    "Scheduler",
    "Status",
    "StepPlan",
    "StepRecord",
    "chain_hashes",
    "resolve_device",
]
