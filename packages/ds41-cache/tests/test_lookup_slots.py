"""`paged.lookup_slots`: the Triton kernel (one slot per row) gives the torch reference's slots
and `missing` flags on every kind of row: a live page, a released page (-1), a column past
the table, a negative position, padding and out-of-range requests, rows not needed."""

from __future__ import annotations

import pytest
import torch

from ds41_cache import lookup_slots
from ds41_cache.ops.slots import naive
from ds41_cache.outputs import poisoned_allocations


def _case(seed: int, t: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    table = torch.randint(0, 400, (5, 7), generator=g, dtype=torch.int32)
    table[torch.rand(5, 7, generator=g) < 0.2] = -1  # released pages
    req = torch.randint(-2, 7, (t,), generator=g, dtype=torch.int32)  # -2, -1, 5, 6: no pages
    pos = torch.randint(-3, 40, (t,), generator=g, dtype=torch.int32)  # cols up to 9 of 7
    needed = torch.rand(t, generator=g) < 0.8
    return table, req, pos, needed


def _host_loop(table, req, pos, needed, ps):  # type: ignore[no-untyped-def]
    slots, missing = [], []
    for r, p, n in zip(req.tolist(), pos.tolist(), needed.tolist(), strict=True):
        col = p // ps if p >= 0 else -1
        page = int(table[r, col]) if 0 <= r < table.shape[0] and 0 <= col < table.shape[1] else -1
        ok = n and page >= 0
        slots.append(page * ps + p % ps if ok else -1)
        missing.append(n and not ok)
    return slots, missing


@pytest.mark.interpreter
@pytest.mark.parametrize("t", [1, 37, 300])  # one row, a partial block, several blocks
@pytest.mark.parametrize("pos_dtype", [torch.int32, torch.int64])
def test_triton_lookup_slots_is_the_reference(device: str, t: int, pos_dtype: torch.dtype) -> None:
    ps = 4
    table, req, pos, needed = _case(t, t)
    pos = pos.to(pos_dtype)
    want_slots, want_missing = _host_loop(table, req, pos, needed, ps)
    ref_slots, ref_missing = naive.lookup_slots(table, req, pos, ps, needed)
    assert ref_slots.tolist() == want_slots and ref_missing.tolist() == want_missing
    args = [x.to(device) for x in (table, req, pos)]
    with poisoned_allocations():
        slots, missing = lookup_slots(*args, ps, needed.to(device), backend="triton")
    assert slots.dtype == torch.int64 and missing.dtype == torch.bool
    assert torch.equal(slots.cpu(), ref_slots) and torch.equal(missing.cpu(), ref_missing)
    if t > 1:
        assert bool(ref_missing.any()) and bool((ref_slots >= 0).any())
    # a row's slot does not depend on the rows around it
    one, one_missing = lookup_slots(
        args[0], args[1][t // 2 :][:1], args[2][t // 2 :][:1], ps, needed.to(device)[t // 2 :][:1],
        backend="triton",
    )  # fmt: skip
    assert int(one) == int(slots[t // 2]) and bool(one_missing) == bool(missing[t // 2])


@pytest.mark.interpreter
def test_triton_lookup_slots_strided_table_and_empty(device: str) -> None:
    table, req, pos, needed = _case(9, 50)
    wide = torch.full((5, 11), 123, dtype=torch.int32)
    wide[:, 2:9] = table
    view = wide[:, 2:9].to(device)  # row stride 11, not 7: the kernel honours strides
    got = lookup_slots(view, req.to(device), pos.to(device), 8, needed.to(device), backend="triton")
    ref = naive.lookup_slots(table, req, pos, 8, needed)
    assert torch.equal(got[0].cpu(), ref[0]) and torch.equal(got[1].cpu(), ref[1])
    e = torch.zeros(0, dtype=torch.int32, device=device)
    s, m = lookup_slots(view, e, e, 8, e.bool(), backend="triton")
    assert s.shape == (0,) and m.shape == (0,)


def test_lookup_slots_checks_shapes() -> None:
    table, req, pos, needed = _case(1, 6)
    with pytest.raises(ValueError, match="positions and needed must share"):
        lookup_slots(table, req, pos, 4, needed[:5])
    with pytest.raises(ValueError, match=r"req_idx must be \[6\]"):
        lookup_slots(table, req[:5], pos, 4, needed)
    with pytest.raises(TypeError, match="needed must be bool"):
        lookup_slots(table, req, pos, 4, needed.int())
