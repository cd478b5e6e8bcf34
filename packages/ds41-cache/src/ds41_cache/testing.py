"""Pytest support shared by the ds41 packages' test suites.

Each package's `tests/conftest.py` sets `TRITON_INTERPRET=1` (when no CUDA device is present)
before importing anything that imports triton, then re-exports the hooks and fixtures below.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

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


def dependent_launch_sites(src: Path) -> tuple[list[str], list[str]]:
    """Check `ds41_cache.ops.launch`'s contract in every module under `src` (source only, no
    import): a kernel with a `GDC` parameter defaults it to False and calls
    `enter_dependent(GDC)` (`@triton.jit`) or `gluon_enter_dependent(GDC)` (`@gluon.jit`) as
    its first statement (after the docstring); a launch `kernel[grid](...)` or
    `module.kernel[grid](...)` that passes `**dependent_launch(...)` launches such a kernel of
    the same package. Returns (the kernels with `GDC`, as `file:kernel`; the contract's
    violations, empty when it holds)."""
    kernels: list[str] = []
    bad: list[str] = []
    trees = {
        path.relative_to(src).as_posix(): ast.parse(path.read_text(), filename=str(path))
        for path in sorted(src.rglob("*.py"))
    }
    gdc: set[str] = set()
    for name, tree in trees.items():
        for fn in ast.walk(tree):
            if not isinstance(fn, ast.FunctionDef):
                continue
            args = fn.args.args + fn.args.kwonlyargs
            entry = fn.name in ("enter_dependent", "gluon_enter_dependent")
            if entry or not any(a.arg == "GDC" for a in args):
                continue
            gdc.add(fn.name)
            kernels.append(f"{name}:{fn.name}")
            names = [a.arg for a in fn.args.args][::-1]
            defaults = dict(zip(names, fn.args.defaults[::-1], strict=False))
            default = defaults.get("GDC")
            if not (isinstance(default, ast.Constant) and default.value is False):
                bad.append(f"{name}:{fn.name}: GDC must default to False")
            body = fn.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                body = body[1:]
            first = body[0] if body else None
            gluon = any(ast.unparse(d) == "gluon.jit" for d in fn.decorator_list)
            enter = "gluon_enter_dependent" if gluon else "enter_dependent"
            ok = (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Call)
                and isinstance(first.value.func, ast.Name)
                and first.value.func.id == enter
                and [ast.unparse(a) for a in first.value.args] == ["GDC"]
            )
            if not ok:
                bad.append(f"{name}:{fn.name}: first statement must be {enter}(GDC)")
    for name, tree in trees.items():
        for call in ast.walk(tree):
            if not isinstance(call, ast.Call):
                continue
            pdl = any(
                k.arg is None
                and isinstance(k.value, ast.Call)
                and isinstance(k.value.func, ast.Name)
                and k.value.func.id == "dependent_launch"
                for k in call.keywords
            )
            if not pdl:
                continue
            target = call.func.value if isinstance(call.func, ast.Subscript) else None
            launched = (
                target.id
                if isinstance(target, ast.Name)
                else target.attr
                if isinstance(target, ast.Attribute)
                else None
            )
            if launched not in gdc:
                bad.append(f"{name}:{call.lineno}: dependent_launch for {launched!r}, no GDC")
    return kernels, bad
