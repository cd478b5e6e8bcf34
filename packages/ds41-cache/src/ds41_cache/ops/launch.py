# mypy: allow-untyped-defs, allow-incomplete-defs
"""Programmatic dependent launch (PDL) for the chain of small kernels a decode step is.

A decode step replays ~300 dependent launches of 2-20 us each. Between two ordinary launches
the GPU lets the first kernel finish and flush before it places the second one's programs;
measured on the H200 in a graph replay (`scripts/pdl_chain_probe.py`), that costs ~0.3 us per
boundary at 64 programs and ~0.45 us at 512, and a decode step replays ~100 us slower than its
kernels' sum. With PDL (sm_90+) the next launch's programs are placed while the current kernel
still runs and wait on the GPU instead.

The contract, for every kernel that takes part:
- it is launched with `**dependent_launch(device)`, which sets both its `GDC` constexpr and the
  launch option `launch_pdl` (one dict, so the two cannot be set apart);
- its first statement is `enter_dependent(GDC)`, in every program, before any memory access:
  `griddepcontrol.wait` (every earlier kernel of the stream has finished and its writes are
  visible; a write of this kernel cannot overtake an earlier read either), then
  `griddepcontrol.launch_dependents` (the next launch may be placed now; its programs wait in
  their own `enter_dependent`).
A kernel that waits only after its predecessor has finished keeps the stream's order by
induction: the kernel after it waits for it, and it ended after everything before it. A Gluon
kernel takes part the same way with `gluon_enter_dependent(GDC)` (the attention kernel, the
indexer's logits kernel). Kernels without PDL (torch ops, cuBLAS) are ordinary stream-ordered
launches around them. Nothing in the arithmetic changes: same bits with and without.

Off under the Triton interpreter (no `griddepcontrol` there), on CPU tensors, below sm_90, and
when the environment sets `DS41_PDL=0` (a comparison baseline and an escape hatch). The decision
is taken once per device and cached (reading the environment costs ~1 us, paid at every launch
of an eager step otherwise); after changing `DS41_PDL` in a running process, call `refresh()`.
"""

from __future__ import annotations

import functools
import os

import torch
import triton
import triton.language as tl
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from ..backend import interpreter_active

PDL_ENV = "DS41_PDL"
"""Environment variable: `0` turns programmatic dependent launch off (ordinary launches)."""

PDL_MIN_CAPABILITY = (9, 0)
"""`griddepcontrol` exists from sm_90 (Hopper) on."""


@triton.jit
def enter_dependent(GDC: tl.constexpr):
    # First statement of a kernel launched with `dependent_launch`: wait for the previous
    # kernel of the stream (and its memory), then let the next launch be placed.
    if GDC:
        gdc_wait()
        gdc_launch_dependents()


@gluon.jit
def gluon_enter_dependent(GDC: gl.constexpr):
    # `enter_dependent` for a Gluon kernel (same PTX; Gluon has no `gdc_*` builtins). As its
    # first statement, before the partitions of a warp-specialized kernel start: they start
    # after the default warps have passed it, so none of them reads before the wait either.
    if GDC:
        gl.inline_asm_elementwise(
            "griddepcontrol.wait; // dummy $0", "=r", [], dtype=gl.int32, is_pure=False, pack=1
        )
        gl.inline_asm_elementwise(
            "griddepcontrol.launch_dependents; // dummy $0",
            "=r",
            [],
            dtype=gl.int32,
            is_pure=False,
            pack=1,
        )


@functools.cache
def _enabled(device_type: str, index: int | None) -> bool:
    if device_type != "cuda" or interpreter_active():
        return False
    if os.environ.get(PDL_ENV, "1").strip() == "0":
        return False
    assert index is not None
    return _capability(index) >= PDL_MIN_CAPABILITY


def _capability(index: int) -> tuple[int, int]:
    return torch.cuda.get_device_capability(index)


def refresh() -> None:
    """Forget the cached decisions: the next launch reads `DS41_PDL` (and the interpreter flag)
    again."""
    _enabled.cache_clear()


def pdl_enabled(device: torch.device) -> bool:
    """Whether launches on `device` use programmatic dependent launch (see the module doc)."""
    index = device.index
    if device.type == "cuda" and index is None:
        index = torch.cuda.current_device()
    return _enabled(device.type, index)


def dependent_launch(device: torch.device) -> dict[str, bool]:
    """Keyword arguments for a launch of a kernel whose first statement is
    `enter_dependent(GDC)`: `{"GDC": True, "launch_pdl": True}` where `pdl_enabled(device)`,
    else `{"GDC": False}` (an ordinary launch, the kernel waits for nothing)."""
    if pdl_enabled(device):
        return {"GDC": True, "launch_pdl": True}
    return {"GDC": False}
