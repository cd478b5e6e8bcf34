"""Candidate blocks (SPEC section 6) against a literal Python reading of the rule."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from ds41_indexer import candidate_blocks

BACKENDS = ["torch", pytest.param("triton", marks=pytest.mark.interpreter)]


def reference(row: list[float], n: int, topk_blocks: int, bs: int) -> list[bool]:
    width = len(row)
    nb = -(-width // bs)
    vals = [row[i] if i < n else -math.inf for i in range(width)] + [-math.inf] * (nb * bs - width)
    scores = [max(vals[b * bs : (b + 1) * bs]) for b in range(nb)]
    if n > 0:
        scores[(n - 1) // bs] = math.inf
    order = sorted(range(nb), key=lambda b: (-scores[b], b))[: min(topk_blocks, nb)]
    kept = {b for b in order if scores[b] > -math.inf}
    return [i // bs in kept for i in range(width)]


def cases() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(7)
    rows = torch.randn(8, 45, generator=g)
    rows[1] = 0.5  # ties everywhere: lower block index wins
    rows[2, 10:] = float("-inf")  # few finite blocks
    rows[3] = float("-inf")
    rows[4] = rows[4].to(torch.bfloat16).float().round()
    nv = torch.tensor([45, 45, 45, 40, 17, 0, 1, 44], dtype=torch.int32)
    return rows, nv


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("topk_blocks", "bs"), [(3, 4), (2, 8), (100, 4), (1, 2)])
def test_matches_reference(backend: str, topk_blocks: int, bs: int) -> None:
    logits, nv = cases()
    # the Triton path on CUDA tensors where a GPU is present, else under the interpreter
    dev = torch.device("cuda" if backend == "triton" and torch.cuda.is_available() else "cpu")
    got = candidate_blocks(logits.to(dev), nv.to(dev), topk_blocks, bs, backend=backend).cpu()
    want = [reference(logits[i].tolist(), int(nv[i]), topk_blocks, bs) for i in range(len(nv))]
    assert got.dtype == torch.bool
    assert got.tolist() == want


def test_properties() -> None:
    logits, nv = cases()
    topk_blocks, bs = 3, 4
    got = candidate_blocks(logits, nv, topk_blocks, bs)
    for i in range(len(nv)):
        n = int(nv[i])
        pad = torch.nn.functional.pad(got[i], (0, (-got.shape[1]) % bs))
        blocks = pad.view(-1, bs)
        # block-aligned within the row (the last block is clipped to N)
        assert all(b.all() or not b.any() for b in blocks[:-1])
        kept = blocks.any(1)
        assert int(kept.sum()) <= topk_blocks
        if n > 0:
            assert bool(kept[(n - 1) // bs])  # the newest block stays
        else:
            assert not bool(kept.any())
        for b in kept.nonzero().flatten().tolist():
            lo, hi = b * bs, min((b + 1) * bs, n)
            finite = lo < hi and bool(torch.isfinite(logits[i, lo:hi]).any())
            assert finite or b == (n - 1) // bs  # -inf blocks are dropped unless pinned


def test_rows_independent() -> None:
    logits, nv = cases()
    full = candidate_blocks(logits, nv, 3, 4)
    for i in range(len(nv)):
        assert torch.equal(
            candidate_blocks(logits[i : i + 1], nv[i : i + 1], 3, 4), full[i : i + 1]
        )


def test_bad_input() -> None:
    logits, nv = cases()
    with pytest.raises(ValueError, match="topk_blocks must be a positive int"):
        candidate_blocks(logits, nv, 0, 4)
    with pytest.raises(ValueError, match="block_size must be a positive int"):
        candidate_blocks(logits, nv, 2, -1)
    with pytest.raises(TypeError, match="n_visible must be int32"):
        candidate_blocks(logits, nv.long(), 2, 4)


@pytest.mark.interpreter
@given(
    seed=st.integers(0, 2**16),
    t=st.integers(1, 5),
    n=st.integers(1, 300),
    bs=st.integers(1, 9),
    topk_blocks=st.integers(1, 60),
    bf16=st.booleans(),
)
def test_triton_mask_is_the_torch_mask(
    seed: int, t: int, n: int, bs: int, topk_blocks: int, bf16: bool
) -> None:
    """Random widths, block sizes (powers of two or not), k below and above the block count,
    ties (few distinct values), -inf runs, rows with nothing visible."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randint(-3, 4, (t, n), generator=g).float() * 0.25
    runs = torch.rand(t, n, generator=g) < 0.3
    logits[runs] = float("-inf")
    nv = torch.randint(0, n + 1, (t,), generator=g, dtype=torch.int32)
    logits = logits.to(torch.bfloat16) if bf16 else logits
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    got = candidate_blocks(logits.to(dev), nv.to(dev), topk_blocks, bs, backend="triton")
    want = candidate_blocks(logits, nv, topk_blocks, bs, backend="torch")
    assert torch.equal(got.cpu(), want)


@pytest.mark.gpu
def test_gpu_long_rows_mask_is_the_torch_mask() -> None:
    """V4.1's candidate geometry (2,048 blocks of 8) on rows up to 1M entries."""
    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(5)
    n = (1 << 20) + 5
    logits = torch.randn(4, n, device=dev, generator=g)
    logits[1, ::3] = float("-inf")
    nv = torch.tensor([n, 700_001, 16_000, 9], dtype=torch.int32, device=dev)
    got = candidate_blocks(logits, nv, 2048, 8, backend="triton")
    assert torch.equal(got, candidate_blocks(logits, nv, 2048, 8, backend="torch"))
    # whole kept blocks: 2,047 of 8 entries and the pinned newest (its last 5); row 3: 2 blocks
    assert int(got[0].sum()) == 2047 * 8 + 5 and int(got[3].sum()) == 16
