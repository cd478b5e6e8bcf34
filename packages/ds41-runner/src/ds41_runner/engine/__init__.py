"""Serving engine: online requests, scheduler, prefix cache, whole-step CUDA graphs."""

from .engine import Engine, EngineStats, StepRecord, resolve_device
from .graphs import StepRunner, default_buckets
from .prefix_cache import PrefixCache, chain_hashes
from .request import Request, RequestOutput, Result, SamplingParams, Status
from .scheduler import Scheduler, StepPlan

__all__ = [
    "Engine",
    "EngineStats",
    "PrefixCache",
    "Request",
    "RequestOutput",
    "Result",
    "SamplingParams",
    "Scheduler",
    "Status",
    "StepPlan",
    "StepRecord",
    "StepRunner",
    "chain_hashes",
    "default_buckets",
    "resolve_device",
]
