"""Backend selection shared by every ds41 package."""

from __future__ import annotations

import os
from typing import Literal

import torch

Backend = Literal["torch", "triton", "auto"]
BACKENDS: tuple[str, ...] = ("torch", "triton", "auto")


def interpreter_active() -> bool:
    """True when Triton kernels run under the CPU interpreter (TRITON_INTERPRET=1)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def canonical_device(device: torch.device | str) -> torch.device:
    """`device` as tensors report it: a bare "cuda" gets the current device index, so that
    `tensor.device == canonical_device(...)` comparisons hold."""
    dev = torch.device(device)
    if dev.type == "cuda" and dev.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return dev


def resolve_backend(backend: str, device: torch.device) -> Literal["torch", "triton"]:
    """`auto` picks Triton on CUDA tensors and the torch reference on the CPU.

    An explicit `triton` on CPU tensors needs the interpreter; without it the error says so.
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if backend == "auto":
        return "triton" if device.type == "cuda" else "torch"
    if backend == "triton" and device.type != "cuda" and not interpreter_active():
        raise RuntimeError(
            "backend='triton' on CPU tensors needs TRITON_INTERPRET=1 set before triton is "
            "imported; use backend='torch' or move the tensors to CUDA"
        )
    return backend  # type: ignore[return-value]
