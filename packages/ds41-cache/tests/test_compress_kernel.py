"""The compressor's two-launch Triton path (`ops/compress/`) gives the torch path's bits: the
latents, emit flags, entries and the ring, step after step, over random chunkings with rows of
several requests interleaved, padding rows carrying junk, chunks longer than the ring (a row
reads a ring slot that a later row of the same call overwrites), f32 and bf16 inputs. Under
the interpreter both paths take numpy's / torch's CPU exp, which agree on these inputs; on the
GPU the Triton path takes libdevice's exp, torch's CUDA exp, and a GPU test makes the pairs
cancel so that an exp a few ulp off would change many latents."""

from __future__ import annotations

import random

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from ds41_cache.compressor import Compressor

EPS = 1e-20
NUM_REQ = 3


def _values(seed: int, num_req: int, length: int, d: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    # per-request, per-position and per-channel scales: pooled weights from ~0 to ~1
    kv = torch.randn(num_req, length, d, generator=g) * torch.logspace(-3, 3, length)[:, None]
    score = torch.randn(num_req, length, d, generator=g) * 12
    return kv, score


def _steps(rnd: random.Random, lengths: list[int], max_chunk: int) -> list[list[tuple[int, int]]]:
    """Calls of (req, pos) rows: each request's positions ascending, requests interleaved,
    junk padding rows (req -1) anywhere."""
    cursor = [0] * len(lengths)
    steps: list[list[tuple[int, int]]] = []
    while any(c < n for c, n in zip(cursor, lengths, strict=True)):
        per_req = []
        for r, n in enumerate(lengths):
            k = min(rnd.randrange(0, max_chunk + 1), n - cursor[r])
            per_req.append([(r, p) for p in range(cursor[r], cursor[r] + k)])
            cursor[r] += k
        rows: list[tuple[int, int]] = [(-1, rnd.randrange(0, 50)) for _ in range(rnd.randrange(3))]
        while any(per_req):  # interleave, keeping each request's order
            r = rnd.choice([i for i, q in enumerate(per_req) if q])
            rows.insert(rnd.randrange(len(rows) + 1), per_req[r].pop(0))
        if rows:
            steps.append(rows)
    return steps


def _run(
    backend: str,
    steps: list[list[tuple[int, int]]],
    kv: torch.Tensor,
    score: torch.Tensor,
    weight: torch.Tensor,
    ratio: int,
    capacity: int,
    dtype: torch.dtype,
    device: torch.device,
) -> list[tuple[torch.Tensor, ...]]:
    d = kv.shape[-1]
    comp = Compressor(ratio, d, NUM_REQ, capacity=capacity, device=device)
    outs = []
    for rows in steps:
        req = torch.tensor([r for r, _ in rows], dtype=torch.int32, device=device)
        pos = torch.tensor([p for _, p in rows], dtype=torch.int32, device=device)
        junk = torch.full((d,), 3e38)
        x = torch.stack([kv[r, p] if r >= 0 else junk for r, p in rows]).to(dtype).to(device)
        s = torch.stack([score[r, p] if r >= 0 else -junk for r, p in rows]).to(dtype).to(device)
        got = comp.forward(
            x, s if ratio == 2 else None, req, pos, weight.to(device), EPS, backend=backend
        )
        outs.append(tuple(o.cpu() for o in got) + (comp.state.cpu().clone(),))
    return outs


@pytest.mark.interpreter
@given(
    seed=st.integers(0, 2**16),
    ratio=st.sampled_from([1, 2]),
    capacity=st.sampled_from([2, 4, 8]),
    max_chunk=st.integers(1, 12),
    bf16=st.booleans(),
)
def test_kernel_is_the_reference_step_by_step(
    seed: int, ratio: int, capacity: int, max_chunk: int, bf16: bool
) -> None:
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    rnd = random.Random(seed)
    d = 32
    lengths = [rnd.randrange(1, 20) for _ in range(NUM_REQ)]
    kv, score = _values(seed, NUM_REQ, max(lengths), d)
    weight = torch.rand(d, generator=torch.Generator().manual_seed(seed)) + 0.5
    steps = _steps(rnd, lengths, max_chunk)
    dtype = torch.bfloat16 if bf16 else torch.float32
    args = (steps, kv, score, weight, ratio, capacity, dtype, device)
    ref = _run("torch", *args)
    got = _run("triton", *args)
    for i, (a, b) in enumerate(zip(ref, got, strict=True)):
        for name, x, y in zip(("latent", "emit", "entry", "ring"), a, b, strict=True):
            assert torch.equal(x, y), (i, name, steps[i])


@pytest.mark.interpreter
def test_kernel_row_alone_equals_row_in_a_batch_and_chunks_longer_than_the_ring(device) -> None:
    d, length, cap = 64, 21, 4
    kv, score = _values(7, NUM_REQ, length, d)
    weight = torch.rand(d, generator=torch.Generator().manual_seed(8)) + 0.5
    alone = [[(0, p) for p in range(length)]]  # one call of 21 rows: 5x the ring
    mixed = [  # request 0 in chunks of 3, 11 and 7 among the others' rows
        [(1, 0), (0, 0), (0, 1), (2, 0), (0, 2)],
        [(0, p) for p in range(3, 14)] + [(-1, 4), (1, 1), (2, 1)],
        [(2, 2)] + [(0, p) for p in range(14, 21)],
    ]
    a = _run("triton", alone, kv, score, weight, 2, cap, torch.float32, device)
    b = _run("triton", mixed, kv, score, weight, 2, cap, torch.float32, device)
    lat_alone = a[0][0]
    lat_mixed = {}
    for rows, out in zip(mixed, b, strict=True):
        for i, (r, p) in enumerate(rows):
            if r == 0:
                lat_mixed[p] = out[0][i]
    for p in range(length):
        assert torch.equal(lat_alone[p], lat_mixed[p]), p
    assert bool(a[0][1][1::2].all()) and not bool(a[0][1][0::2].any())
    assert torch.equal(a[0][2][1::2], torch.arange(length // 2))
    assert torch.equal(a[0][3][0], b[-1][3][0])  # request 0's ring


@pytest.mark.interpreter
@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_an_overflowing_latent_is_rejected_before_the_ring_changes(device, backend) -> None:
    d = 16
    comp = Compressor(2, d, 2, capacity=4, device=device)
    w = torch.ones(d, device=device)
    kv = torch.randn(2, d, generator=torch.Generator().manual_seed(3)).to(device)
    score = torch.zeros(2, d, device=device)
    req = torch.zeros(2, dtype=torch.int32, device=device)
    pos = torch.tensor([0, 1], dtype=torch.int32, device=device)
    comp.forward(kv, score, req, pos, w, EPS, backend=backend)
    before = comp.state.clone()
    big = torch.full((2, d), 3.4e38, device=device)  # finite fp32 that rounds to bf16 inf
    with pytest.raises(ValueError, match="latent"):
        comp.forward(big, score, req, pos + 2, w, EPS, backend=backend)
    assert torch.equal(comp.state, before)
    empty = comp.forward(kv[:0], score[:0], req[:0], req[:0], w, EPS, backend=backend)
    assert [tuple(o.shape) for o in empty] == [(0, d), (0,), (0,)]


@pytest.mark.gpu
@pytest.mark.parametrize("ratio", [1, 2])
def test_kernel_is_the_reference_at_model_width(ratio: int) -> None:
    """D 512, 4,096 rows of random pairs over eight decades of magnitude."""
    dev = torch.device("cuda")
    d, t = 512, 4096
    g = torch.Generator().manual_seed(20 + ratio)
    kv = (torch.randn(t, d, generator=g) * torch.logspace(-4, 4, d)).to(dev)
    score = (torch.randn(t, d, generator=g) * 20).to(dev) if ratio == 2 else None
    w = (torch.rand(d, generator=g) + 0.5).to(dev)
    req = (torch.arange(t) % 7).to(torch.int32).to(dev)
    pos = (torch.arange(t) // 7).to(torch.int32).to(dev)
    outs = []
    for backend in ("torch", "triton"):
        comp = Compressor(ratio, d, 8, device=dev)
        outs.append(comp.forward(kv, score, req, pos, w, EPS, backend=backend) + (comp.state,))
    for a, b in zip(*outs, strict=True):
        assert torch.equal(a, b)


@pytest.mark.gpu
def test_kernel_is_the_reference_where_the_pairs_cancel() -> None:
    """Ratio 2, D 512, 8,192 rows whose pairs nearly cancel (kv1 = -kv0 (1 + ~2^-10), scores
    within ~1e-3): the pooled value is ~2^-10 of its terms, so the pooling weights' last bits
    reach the bf16 latents. An exp one ulp off changes thousands of them (checked first), so
    equal latents mean the Triton path's exp is torch's."""
    dev = torch.device("cuda")
    d, t, num_req = 512, 8192, 8
    g = torch.Generator().manual_seed(31)
    base = torch.randn(t // 2, d, generator=g) * torch.logspace(-3, 3, d)
    rel = 1 + torch.rand(t // 2, d, generator=g) * 2.0**-9
    s_base = torch.randn(t // 2, d, generator=g) * 20
    s_delta = torch.randn(t // 2, d, generator=g) * 1e-3
    # rows 2i, 2i+1 of a request are positions 2j, 2j+1: pair i's two rows
    kv = torch.stack([base, -base * rel], 1).reshape(t, d).to(dev)
    score = torch.stack([s_base, s_base + s_delta], 1).reshape(t, d).to(dev)
    w = (torch.rand(d, generator=g) + 0.5).to(dev)
    pair = torch.arange(t) // 2
    req = (pair % num_req).to(torch.int32).to(dev)
    pos = (2 * (pair // num_req) + torch.arange(t) % 2).to(torch.int32).to(dev)
    # sensitivity: e0 one ulp larger changes the bf16 pooled value of many elements
    kv0, kv1, s0, s1 = kv[0::2], kv[1::2], score[0::2], score[1::2]
    m = torch.maximum(s0, s1)
    e0, e1 = torch.exp(s0 - m), torch.exp(s1 - m)
    e0_off = torch.nextafter(e0, torch.full_like(e0, 2.0))
    pooled = (e0 / (e0 + e1)) * kv0 + (e1 / (e0 + e1)) * kv1
    pooled_off = (e0_off / (e0_off + e1)) * kv0 + (e1 / (e0_off + e1)) * kv1
    changed = int((pooled.bfloat16() != pooled_off.bfloat16()).sum())
    assert changed > 10_000, changed
    outs = []
    for backend in ("torch", "triton"):
        comp = Compressor(2, d, num_req, capacity=8, device=dev)
        outs.append(comp.forward(kv, score, req, pos, w, EPS, backend=backend) + (comp.state,))
    assert int(outs[0][1].sum()) == t // 2
    for a, b in zip(*outs, strict=True):
        assert torch.equal(a, b), int((a != b).sum())


@pytest.mark.interpreter
def test_ring_targets_are_each_requests_last_positions(device) -> None:
    """Only a request's last `capacity` positions of a call go into the ring, so no two rows
    of the write launch share a slot (on the GPU a shared slot is a race)."""
    from ds41_cache.ops.compress import triton_kernels

    d, cap, num_req = 8, 4, 3
    rows = [(0, p) for p in range(3, 14)] + [(1, 0), (1, 1), (-1, 5), (7, 2), (2, 9)]
    req = torch.tensor([r for r, _ in rows], dtype=torch.int32, device=device)
    pos = torch.tensor([p for _, p in rows], dtype=torch.int32, device=device)
    kv = torch.randn(len(rows), d, generator=torch.Generator().manual_seed(4)).to(device)
    ring = torch.zeros(num_req + 1, cap, 2 * d, device=device)
    *_, target = triton_kernels.compress_rows(
        kv, kv.clone(), req, pos, ring, torch.ones(d, device=device), EPS, 2
    )
    scratch = num_req  # padding, out-of-range requests and superseded rows
    expected = [0 if p >= 10 else scratch for p in range(3, 14)] + [1, 1, scratch, scratch, 2]
    assert target is not None and target.cpu().tolist() == expected
