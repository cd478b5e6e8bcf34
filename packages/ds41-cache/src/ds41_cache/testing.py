"""Pytest support shared by the ds41 packages' test suites.

Each package's `tests/conftest.py` sets `TRITON_INTERPRET=1` (when no CUDA device is present)
before importing anything that imports triton, then re-exports the hooks and fixtures below.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from .backend import interpreter_active
from .outputs import poisoned_allocations


def pytest_configure(config: pytest.Config) -> None:
    for line in (
        "gpu: needs a CUDA device; skipped (with the reason) when none is present",
        "interpreter: runs Triton kernels; on CPU under TRITON_INTERPRET=1",
        "slow: long-running; still part of the default suite unless deselected",
    ):
        config.addinivalue_line("markers", line)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    has_cuda = torch.cuda.is_available()
    skip_gpu = pytest.mark.skip(reason="needs a CUDA device (torch.cuda.is_available() is False)")
    skip_interp = pytest.mark.skip(
        reason="Triton kernels need a CUDA device or TRITON_INTERPRET=1 set before triton loads"
    )
    for item in items:
        if "gpu" in item.keywords and not has_cuda:
            item.add_marker(skip_gpu)
        if "interpreter" in item.keywords and not (has_cuda or interpreter_active()):
            item.add_marker(skip_interp)


@pytest.fixture(autouse=True)
def _poison_library_allocations() -> Iterator[None]:
    """Every tensor library code allocates through `ds41_cache.outputs.empty` starts poisoned."""
    with poisoned_allocations():
        yield


@pytest.fixture
def device() -> torch.device:
    """The device kernels under test run on: CUDA when present, else the CPU."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def triton_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


interpreter_only = pytest.mark.skipif(
    not interpreter_active(),
    reason="tests the Triton interpreter's fp32 (upcast) arithmetic; compiled kernels take "
    "the tensor-core path, which the gpu tests check",
)
"""For tests of the interpreter's own arithmetic (kernels' `upcast` variants compared with the
public API, which takes that variant only under TRITON_INTERPRET=1): skipped when compiled.
Evaluated at import: the conftests set TRITON_INTERPRET before importing this module."""
