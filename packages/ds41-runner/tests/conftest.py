import os

import pytest
import torch

if not torch.cuda.is_available():
    # Must happen before anything imports triton.
    os.environ.setdefault("TRITON_INTERPRET", "1")

from ds41_cache import testing as _testing
from ds41_cache.testing import _poison_library_allocations, device  # noqa: F401


def pytest_configure(config: pytest.Config) -> None:
    _testing.pytest_configure(config)
    config.addinivalue_line(
        "markers", "gpu2: needs two CUDA devices (tensor parallelism over NCCL); skipped with fewer"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    _testing.pytest_collection_modifyitems(config, items)
    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    skip = pytest.mark.skip(reason=f"needs two CUDA devices, {n} visible")
    for item in items:
        if "gpu2" in item.keywords and n < 2:
            item.add_marker(skip)
