"""Compressor (SPEC section 5): float64 formula checks and bitwise chunking/batch invariance."""

from __future__ import annotations

import pytest
import torch

from ds41_cache.compressor import Compressor, pool_pair, rms_norm

D = 64
EPS = 1e-20


def _data(num_req: int, length: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    kv = torch.randn(num_req, length, D, generator=g) * 3
    score = torch.randn(num_req, length, D, generator=g) * 4
    weight = torch.rand(D, generator=g) + 0.5
    return kv, score, weight


def _feed(
    comp: Compressor,
    steps: list[list[tuple[int, int]]],
    kv: torch.Tensor,
    score: torch.Tensor,
    weight: torch.Tensor,
) -> dict[tuple[int, int], tuple[torch.Tensor, bool, int]]:
    """Run `steps` (each a list of (req, pos); req -1 = padding) and collect per-row results."""
    out: dict[tuple[int, int], tuple[torch.Tensor, bool, int]] = {}
    for rows in steps:
        req = torch.tensor([r for r, _ in rows], dtype=torch.int32)
        pos = torch.tensor([p for _, p in rows], dtype=torch.int32)
        # padding rows carry junk data that must not leak anywhere
        x = torch.stack([kv[r, p] if r >= 0 else torch.full((D,), 1e30) for r, p in rows])
        s = torch.stack([score[r, p] if r >= 0 else torch.full((D,), -1e30) for r, p in rows])
        latent, emit, entry = comp.forward(x, s if comp.ratio == 2 else None, req, pos, weight, EPS)
        for i, (r, p) in enumerate(rows):
            if r >= 0:
                out[(r, p)] = (latent[i].clone(), bool(emit[i]), int(entry[i]))
            else:
                assert not bool(emit[i]) and int(entry[i]) == -1
                assert torch.equal(latent[i], torch.zeros(D, dtype=torch.bfloat16))
    return out


def _chunks(req: int, length: int, sizes: list[int]) -> list[list[tuple[int, int]]]:
    steps, start = [], 0
    for n in sizes:
        if start < length:
            steps.append([(req, p) for p in range(start, min(start + n, length))])
        start += n
    return steps


def _rms64(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    x = x.double()
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + EPS) * w.double()


@pytest.mark.parametrize(
    "ratio,capacity,match",
    [
        (0, 8, "ratio must be one of"),
        (3, 8, "ratio must be one of"),
        (4, 8, "ratio must be one of"),
        (2, 1, "capacity must be a power of two >= 2"),
        (2, 6, "capacity must be a power of two"),
        (2, 0, "capacity must be"),
        (1, 3, "capacity must be"),
    ],
)
def test_rejects_unvalidated_geometry(ratio: int, capacity: int, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        Compressor(ratio, D, 2, capacity=capacity)


def test_rms_norm_matches_float64() -> None:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(7, D, generator=g) * torch.logspace(-3, 3, 7)[:, None]
    w = torch.rand(D, generator=g) + 0.5
    y = rms_norm(x, w, EPS)
    assert y.dtype == torch.bfloat16
    torch.testing.assert_close(y.double(), _rms64(x, w), rtol=2**-8, atol=0)
    odd = torch.randn(3, 96, generator=g)  # a width that is not a power of two
    torch.testing.assert_close(
        rms_norm(odd, torch.ones(96), EPS).double(), _rms64(odd, torch.ones(96)), rtol=2**-8, atol=0
    )


def test_pool_pair_matches_float64() -> None:
    kv, score, _ = _data(1, 2, seed=2)
    kv0, kv1, s0, s1 = kv[0, 0:1], kv[0, 1:2], score[0, 0:1], score[0, 1:2]
    s0 = s0 * 20  # large gaps: the max subtraction must keep it finite
    got = pool_pair(kv0, s0, kv1, s1)
    w = torch.softmax(torch.stack([s0, s1]).double(), dim=0)
    ref = w[0] * kv0.double() + w[1] * kv1.double()
    torch.testing.assert_close(got.double(), ref, rtol=1e-6, atol=1e-6)


def test_ratio2_latents_match_float64() -> None:
    length = 10
    kv, score, w = _data(1, length, seed=3)
    comp = Compressor(2, D, 1)
    res = _feed(comp, [[(0, p) for p in range(length)]], kv, score, w)
    for p in range(length):
        latent, emit, entry = res[(0, p)]
        assert emit == (p % 2 == 1)
        if not emit:
            assert entry == -1
            continue
        assert entry == p // 2
        pair = slice(p - 1, p + 1)
        sm = torch.softmax(score[0, pair].double(), dim=0)
        pooled = (sm * kv[0, pair].double()).sum(0)
        ref = _rms64(pooled.to(torch.bfloat16)[None], w)[0]
        torch.testing.assert_close(latent.double(), ref, rtol=2**-7, atol=1e-6)


def test_ratio1_every_row_emits_its_own_norm() -> None:
    kv, _, w = _data(2, 5, seed=4)
    comp = Compressor(1, D, 2)
    rows = [(1, 0), (-1, 0), (0, 3), (1, 1), (0, 4)]
    res = _feed(comp, [rows], kv, kv, w)
    for r, p in rows:
        if r < 0:
            continue
        latent, emit, entry = res[(r, p)]
        assert emit and entry == p
        torch.testing.assert_close(
            latent.double(), _rms64(kv[r, p][None], w)[0], rtol=2**-8, atol=0
        )
        assert torch.equal(latent, rms_norm(kv[r, p][None], w, EPS)[0])
    assert comp.state_snapshot(0).numel() == 0


LENGTH = 23  # odd: the last pair stays open
CHUNKINGS = [
    [1] * LENGTH,  # decode: every pair completes from the ring
    [3, 5, 1, 7, 7],  # boundaries inside pairs
    [2, 19, 2],  # a chunk longer than the ring
    [9, 14],
    [LENGTH],
]


@pytest.mark.parametrize("capacity", [2, 8])
@pytest.mark.parametrize("sizes", CHUNKINGS[:-1])
def test_ratio2_chunking_is_bitwise_invariant(sizes: list[int], capacity: int) -> None:
    kv, score, w = _data(1, LENGTH, seed=5)
    one = Compressor(2, D, 1, capacity=capacity)
    ref = _feed(one, _chunks(0, LENGTH, [LENGTH]), kv, score, w)
    chunked = Compressor(2, D, 1, capacity=capacity)
    got = _feed(chunked, _chunks(0, LENGTH, sizes), kv, score, w)
    assert got.keys() == ref.keys()
    for key, (latent, emit, entry) in ref.items():
        assert torch.equal(got[key][0], latent), key
        assert got[key][1:] == (emit, entry), key
    assert torch.equal(chunked.state, one.state)
    # the ring holds the last `capacity` raw rows
    for p in range(LENGTH - capacity, LENGTH):
        assert torch.equal(one.state[0, p % capacity], torch.cat([kv[0, p], score[0, p]]))


def test_ratio2_batch_and_padding_invariance() -> None:
    kv, score, w = _data(3, LENGTH, seed=6)
    alone = Compressor(2, D, 3)
    ref = _feed(alone, _chunks(1, LENGTH, [4, 11, 8]), kv, score, w)

    mixed = Compressor(2, D, 3)
    # request 1 shares steps with other requests at other positions, interleaved, with padding
    steps = [
        [(0, 0), (-1, 0), (1, 0), (2, 0), (1, 1), (0, 1), (1, 2), (1, 3), (-1, 5)],
        [(2, 1), (1, 4), (1, 5), (1, 6), (0, 2), (1, 7), (1, 8), (1, 9), (1, 10)],
        [(1, 11), (-1, 0), (-1, 0), (1, 12), (2, 2)],
        [(1, p) for p in range(13, 18)] + [(0, p) for p in range(3, 13)],
        [(-1, 3), (0, 13)] + [(1, p) for p in range(18, LENGTH)] + [(2, 3)],
    ]
    got = _feed(mixed, steps, kv, score, w)
    for key, value in ref.items():
        assert torch.equal(got[key][0], value[0]), key
        assert got[key][1:] == value[1:], key
    assert torch.equal(mixed.state[1], alone.state[1])


def test_padding_rows_leave_state_untouched() -> None:
    kv, score, w = _data(2, 4, seed=7)
    comp = Compressor(2, D, 2, capacity=4)
    _feed(comp, [[(0, 0), (1, 0), (0, 1), (1, 1), (0, 2)]], kv, score, w)
    before = comp.state.clone()
    _feed(comp, [[(-1, 0), (-1, 3), (-1, 2)]], kv, score, w)
    assert torch.equal(comp.state, before)


def test_snapshot_and_copy_state_resume_bitwise() -> None:
    kv, score, w = _data(1, 12, seed=8)
    ref_comp = Compressor(2, D, 3)
    ref = _feed(ref_comp, _chunks(0, 12, [5, 7]), kv, score, w)

    comp = Compressor(2, D, 3)
    _feed(comp, _chunks(0, 12, [5]), kv, score, w)
    snap = comp.state_snapshot(0)
    comp.reset(0)
    assert torch.equal(comp.state[0], torch.zeros_like(snap))
    comp.load_state(2, snap)
    comp.copy_state(2, 1)
    data = torch.stack([kv[0]] * 3)
    sc = torch.stack([score[0]] * 3)
    for req in (1, 2):
        got = _feed(comp, [[(req, p) for p in range(5, 12)]], data, sc, w)
        for p in range(5, 12):
            assert torch.equal(got[(req, p)][0], ref[(0, p)][0])
            assert got[(req, p)][1:] == ref[(0, p)][1:]
    with pytest.raises(ValueError, match="snapshot must be float32"):
        comp.load_state(0, snap[:-1])


def _args(t: int = 2) -> dict[str, object]:
    return {
        "kv": torch.randn(t, D),
        "score": torch.randn(t, D),
        "req_idx": torch.zeros(t, dtype=torch.int32),
        "pos": torch.arange(t, dtype=torch.int32),
        "norm_weight": torch.ones(D),
        "eps": EPS,
    }


@pytest.mark.parametrize(
    "change,error,match",
    [
        ({"kv": torch.randn(2, D + 1)}, TypeError, "kv must be"),
        ({"kv": torch.randn(2, D).double()}, TypeError, "kv must be"),
        ({"score": None}, ValueError, "score must be"),
        ({"score": torch.randn(3, D)}, TypeError, "score must be"),
        ({"req_idx": torch.zeros(2, dtype=torch.int64)}, TypeError, "req_idx must be int32"),
        ({"pos": torch.arange(3, dtype=torch.int32)}, TypeError, "pos must be int32"),
        ({"norm_weight": torch.ones(D - 1)}, TypeError, "norm_weight"),
        (
            {"req_idx": torch.tensor([0, 2], dtype=torch.int32)},
            IndexError,
            r"req_idx must lie in \[-1, 2\)",
        ),
        ({"req_idx": torch.tensor([0, -2], dtype=torch.int32)}, IndexError, "req_idx must lie"),
        ({"pos": torch.tensor([0, -1], dtype=torch.int32)}, ValueError, "pos must be >= 0"),
        ({"pos": torch.tensor([3, 3], dtype=torch.int32)}, ValueError, "at most once"),
    ],
)
def test_bad_inputs_raise_before_any_write(
    change: dict[str, object], error: type, match: str
) -> None:
    comp = Compressor(2, D, 2)
    comp.state.normal_()
    before = comp.state.clone()
    args = _args() | change
    with pytest.raises(error, match=match):
        comp.forward(**args)  # type: ignore[arg-type]
    assert torch.equal(comp.state, before)


def test_ratio1_rejects_score_and_bad_request_ids() -> None:
    comp = Compressor(1, D, 2)
    with pytest.raises(ValueError, match="score must be None"):
        comp.forward(**_args())  # type: ignore[arg-type]
    with pytest.raises(IndexError, match="req must be"):
        comp.reset(2)
    with pytest.raises(IndexError, match="dst_req must be"):
        comp.copy_state(0, -1)


def test_ratio2_rows_unchanged_inside_a_large_batch() -> None:
    # T * D well past torch's CPU grain size, so elementwise kernels split across threads at
    # offsets that move with the batch; results must not.
    kv, score, w = _data(40, 24, seed=9)
    alone = _feed(Compressor(2, D, 40), [[(7, p) for p in range(24)]], kv, score, w)
    rows = [(r, p) for p in range(24) for r in range(40)][5:]  # request 7 at shifting offsets
    big = _feed(Compressor(2, D, 40), [rows[:500], rows[500:]], kv, score, w)
    for key, value in alone.items():
        assert torch.equal(big[key][0], value[0]), key
        assert big[key][1:] == value[1:], key


def test_validate_false_gives_the_same_bits() -> None:
    kv, score, w = _data(2, 9, seed=10)
    steps = [[(0, 0), (1, 0), (-1, 0), (0, 1)], [(1, p) for p in range(1, 9)] + [(0, 2)]]
    outs = []
    for validate in (True, False):
        comp = Compressor(2, D, 2, capacity=4)
        for rows in steps:
            req = torch.tensor([r for r, _ in rows], dtype=torch.int32)
            pos = torch.tensor([p for _, p in rows], dtype=torch.int32)
            x = torch.stack([kv[max(r, 0), p] for r, p in rows])
            s = torch.stack([score[max(r, 0), p] for r, p in rows])
            outs.append(comp.forward(x, s, req, pos, w, EPS, validate=validate))
        outs.append((comp.state.clone(),))
    half = len(outs) // 2
    for a, b in zip(outs[:half], outs[half:], strict=True):
        for x, y in zip(a, b, strict=True):
            assert torch.equal(x, y)


@pytest.mark.gpu
def test_cuda_graph_replay_matches_eager() -> None:
    """validate=False is capturable: decode steps replayed from a graph equal eager steps."""
    dev = torch.device("cuda")
    kv, score, w = _data(2, 8, seed=11)
    kv, score, w = kv.to(dev), score.to(dev), w.to(dev)
    req = torch.tensor([0, -1, 1], dtype=torch.int32, device=dev)
    eager, graphed = Compressor(2, D, 2, device=dev), Compressor(2, D, 2, device=dev)
    s_kv = torch.zeros(3, D, device=dev)
    s_score = torch.zeros(3, D, device=dev)
    s_pos = torch.zeros(3, dtype=torch.int32, device=dev)
    fn = lambda: graphed.forward(s_kv, s_score, req, s_pos, w, EPS, validate=False)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()  # warm up on a side stream, then forget what it wrote
    torch.cuda.current_stream().wait_stream(side)
    graphed.reset(0)
    graphed.reset(1)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()
    graphed.reset(0)
    graphed.reset(1)
    for p in range(8):
        pos = torch.full((3,), p, dtype=torch.int32, device=dev)
        x = torch.stack([kv[0, p], kv[0, p], kv[1, p]])
        s = torch.stack([score[0, p], score[0, p], score[1, p]])
        ref = eager.forward(x, s, req, pos, w, EPS)
        s_kv.copy_(x)
        s_score.copy_(s)
        s_pos.copy_(pos)
        graph.replay()
        for a, b in zip(out, ref, strict=True):
            assert torch.equal(a, b), p
    assert torch.equal(graphed.state, eager.state)


@pytest.mark.parametrize("seed", range(4))
def test_ratio2_random_chunkings_agree(seed: int) -> None:
    import random

    rnd = random.Random(seed)
    length = rnd.randrange(5, 40)
    kv, score, w = _data(1, length, seed=20 + seed)
    capacity = rnd.choice([2, 4, 8])
    ref_comp = Compressor(2, D, 1, capacity=capacity)
    ref = _feed(ref_comp, _chunks(0, length, [1] * length), kv, score, w)
    sizes = [rnd.randrange(1, 12) for _ in range(length)]
    comp = Compressor(2, D, 1, capacity=capacity)
    got = _feed(comp, _chunks(0, length, sizes), kv, score, w)
    for key, value in ref.items():
        assert torch.equal(got[key][0], value[0]) and got[key][1:] == value[1:], key
    assert torch.equal(comp.state, ref_comp.state)
