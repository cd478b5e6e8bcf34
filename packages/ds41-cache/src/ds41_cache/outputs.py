"""Output allocation for every ds41 package.

Library code allocates the tensors a kernel is meant to fill through `empty`, never through
`torch.empty` directly. Tests switch on poisoning (`poisoned_allocations`), which fills each
fresh tensor with a loud pattern (NaN for floats, 0xA5 bytes / -7 for integers) so an element a
kernel forgot to write fails the test instead of passing on leftover zeros.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

import torch

_POISON = False

POISON_BYTE = 0xA5
POISON_INT = -7


def poison_enabled() -> bool:
    return _POISON


@contextlib.contextmanager
def poisoned_allocations(enabled: bool = True) -> Iterator[None]:
    """Within the block, `empty` returns poisoned tensors."""
    global _POISON
    previous = _POISON
    _POISON = enabled
    try:
        yield
    finally:
        _POISON = previous


def empty(
    shape: Sequence[int] | torch.Size,
    dtype: torch.dtype,
    device: torch.device | str,
) -> torch.Tensor:
    """`torch.empty`, poisoned while `poisoned_allocations` is active."""
    out = torch.empty(tuple(shape), dtype=dtype, device=device)
    if _POISON:
        poison_(out)
    return out


def poison_(t: torch.Tensor) -> torch.Tensor:
    """Fill `t` in place with the poison pattern of its dtype."""
    if t.dtype.is_floating_point:
        if t.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
            t.view(torch.uint8).fill_(0x7F)  # NaN in e4m3fn
        else:
            t.fill_(float("nan"))
    elif t.dtype == torch.uint8:
        t.fill_(POISON_BYTE)
    elif t.dtype == torch.bool:
        t.fill_(True)
    else:
        t.fill_(POISON_INT)
    return t
