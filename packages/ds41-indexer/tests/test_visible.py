"""`visible_entries`: n(p) = (p + 1) // ratio (Python's floor), 0 on padding rows, on both
backends, against a plain-Python formula; errors name the argument."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from ds41_indexer import visible_entries

BACKENDS = ["torch", pytest.param("triton", marks=pytest.mark.interpreter)]
INT32_MAX = 2**31 - 1


@pytest.mark.parametrize("backend", BACKENDS)
@given(
    rows=st.lists(
        st.tuples(st.integers(-3, 6), st.integers(-70, INT32_MAX - 1)), min_size=0, max_size=300
    ),
    ratio=st.sampled_from([1, 2, 3, 4, 128]),
)
def test_is_the_formula(backend: str, rows: list[tuple[int, int]], ratio: int) -> None:
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    req = torch.tensor([r for r, _ in rows], dtype=torch.int32, device=dev)
    pos = torch.tensor([p for _, p in rows], dtype=torch.int32, device=dev)
    got = visible_entries(req, pos, ratio, backend=backend)
    want = [(p + 1) // ratio if r >= 0 else 0 for r, p in rows]
    assert got.dtype == torch.int32 and got.tolist() == want


def test_errors_name_the_argument() -> None:
    req = torch.zeros(3, dtype=torch.int32)
    with pytest.raises(TypeError, match="pos must be int32"):
        visible_entries(req, torch.zeros(3, dtype=torch.int64), 2)
    with pytest.raises(ValueError, match=r"pos must have shape \[3\]"):
        visible_entries(req, torch.zeros(4, dtype=torch.int32), 2)
    with pytest.raises(ValueError, match="ratio must be a positive int"):
        visible_entries(req, req, 0)
