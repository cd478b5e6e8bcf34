"""ops.vocab: the segmented log-softmax and sampling from per-segment partials against float64
references; shards' partials combine to the full row's bits (tensor parallelism); the top-k /
top-p path leaves the other rows' bits alone."""

import pytest
import torch

from ds41_runner.ops.logits import log_softmax
from ds41_runner.ops.sampling import gumbel_noise, sample, uniform_noise
from ds41_runner.ops.vocab import (
    RowSampling,
    combine_partials,
    combine_rows,
    pick,
    segment_partials,
    vocab_segments,
)

V = 4096  # 32 segments of 128 ids


def _logits(s: int, v: int, seed: int, scale: float = 4.0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(s, v, generator=g) * scale
    x[1, : v // 2] -= 200.0  # half the row's segments far below its max (their terms underflow)
    x[2, 17] = x[2, 900] = x[2].max() + 1.0  # a tie at the top (ids in different segments)
    return x


def _sampling(s: int, targets: bool = True) -> RowSampling:
    temp = torch.tensor([0.0, 1.0, 0.0, 0.7, 1.5, 1.0][:s])
    tgt = torch.tensor([-1, 5, -1, 4095, -1, 130][:s]) if targets else None
    return RowSampling(
        seeds=torch.arange(s, dtype=torch.int64) * 1000 + 3,
        positions=torch.arange(s, dtype=torch.int32) + 11,
        temperature=temp,
        targets=tgt,
    )


def _take(rs: RowSampling, fn) -> RowSampling:  # type: ignore[no-untyped-def]
    return RowSampling(*(None if f is None else fn(f) for f in vars(rs).values()))


def test_segments_fixed_by_vocab() -> None:
    assert vocab_segments(129280) == 64  # 2020 ids each
    assert vocab_segments(4096) == 32
    assert vocab_segments(512) == 4
    assert vocab_segments(254) == 1  # 2 segments would hold 127 < MIN_SEGMENT ids
    assert vocab_segments(50257) == 1
    with pytest.raises(ValueError, match="vocab must be positive"):
        vocab_segments(0)


def test_log_softmax_matches_float64() -> None:
    x = _logits(6, V, seed=1)
    got = log_softmax(x, backend="torch")
    ref = torch.log_softmax(x.double(), dim=-1)
    assert torch.allclose(got.double(), ref, rtol=0, atol=2e-5)
    # lse against float64 (the row's max is ~ +15, so ~1 ulp of fp32 is 1e-6).
    lse = combine_partials(segment_partials(x, backend="torch"), V // 32)[0]
    assert torch.allclose(lse.double()[:, 0], torch.logsumexp(x.double(), -1), rtol=0, atol=4e-6)


@pytest.mark.parametrize("tp", [2, 4])
def test_shards_combine_to_the_full_row(tp: int) -> None:
    """Each shard's partials (ids [r V/tp, (r+1) V/tp)) gathered in rank order == the full
    row's partials, so pick and the log-probs are bitwise those of one process."""
    x = _logits(6, V, seed=2)
    rs = _sampling(6)
    full = segment_partials(x, sampling=rs, backend="torch")
    w = V // tp
    shards = [x[:, r * w : (r + 1) * w] for r in range(tp)]
    parts = [segment_partials(sh, v0=r * w, vocab=V, sampling=rs, backend="torch")
             for r, sh in enumerate(shards)]  # fmt: skip
    assert torch.equal(torch.cat(parts, dim=1), full)
    one = pick(x, rs, vocab=V, backend="torch", full_rows=True)
    for r in range(tp):
        got = pick(
            shards[r], rs, vocab=V, v0=r * w, backend="torch", full_rows=True,
            gather_partials=lambda p: torch.cat(parts, dim=1),
            gather_logits=lambda t: x,
        )  # fmt: skip
        assert torch.equal(got.new, one.new) and torch.equal(got.chosen, one.chosen)
        assert torch.equal(got.logprob, one.logprob)
        assert got.rows is not None and torch.equal(got.rows, log_softmax(x, backend="torch"))
    # The noise of a shard is the full row's columns.
    n = gumbel_noise(rs.seeds, rs.positions, V)
    assert torch.equal(gumbel_noise(rs.seeds, rs.positions, w, v0=w), n[:, w : 2 * w])


def test_pick_matches_full_row_sampling_and_float64() -> None:
    """pick == `sample` on the full logits (tokens), log-prob == log_softmax(x)[chosen]
    (bitwise), targets scored; and the tokens match a float64 Gumbel-max reference."""
    x = _logits(6, V, seed=3)
    rs = _sampling(6)
    got = pick(x, rs, vocab=V, backend="torch")
    assert torch.equal(got.new, sample(x, rs.seeds, rs.positions, rs.temperature))
    assert got.new[2].item() == 17  # the tie goes to the lower id
    assert rs.targets is not None
    want = torch.where(rs.targets >= 0, rs.targets, got.new)
    assert torch.equal(got.chosen, want)
    lp = log_softmax(x, backend="torch")
    assert torch.equal(got.logprob, lp.gather(1, want[:, None])[:, 0])
    assert got.rows is None
    # float64: greedy = argmax x; sampled = argmax x / T + (-log(-log(u))).
    u = uniform_noise(rs.seeds, rs.positions, V).double()
    t = rs.temperature.double()[:, None]
    ref = torch.where(t > 0, x.double() / t.clamp(min=1e-9) - torch.log(-torch.log(u)), x.double())
    assert torch.equal(got.new, ref.argmax(-1))
    ref_lp = torch.log_softmax(x.double(), -1).gather(1, want[:, None])[:, 0]
    assert torch.allclose(got.logprob.double(), ref_lp, rtol=0, atol=2e-5)


def test_rows_alone_and_in_any_batch() -> None:
    x = _logits(6, V, seed=4)
    rs = _sampling(6)
    full = pick(x, rs, vocab=V, backend="torch")
    for i in range(6):
        sub = _take(rs, lambda f: f[i : i + 1])  # noqa: B023
        one = pick(x[i : i + 1], sub, vocab=V, backend="torch")
        assert torch.equal(one.chosen, full.chosen[i : i + 1])
        assert torch.equal(one.logprob, full.logprob[i : i + 1])


def test_filters_change_only_filtered_rows() -> None:
    """filters=True: rows with temperature > 0 and top-k/top-p take `sample` on the full row
    (gathered logits); every other row keeps the partials' bits."""
    x = _logits(6, V, seed=5)
    base = _sampling(6)
    top_k = torch.tensor([3, 0, 0, 5, 0, 0])  # row 0 is greedy: its filter does not apply
    top_p = torch.tensor([1.0, 1.0, 0.5, 1.0, 0.8, 1.0])
    rs = RowSampling(base.seeds, base.positions, base.temperature, base.targets, top_k, top_p)
    calls: list[int] = []

    def gather_logits(t: torch.Tensor) -> torch.Tensor:
        calls.append(1)
        return t

    plain = pick(x, rs, vocab=V, backend="torch")
    got = pick(x, rs, vocab=V, backend="torch", filters=True, gather_logits=gather_logits)
    assert calls == [1]
    ref = sample(x, rs.seeds, rs.positions, rs.temperature, top_k, top_p)
    active = torch.tensor([False, False, False, True, True, False])
    assert torch.equal(got.new[~active], plain.new[~active])
    assert torch.equal(got.new[active], ref[active])
    assert torch.equal(got.logprob[~active], plain.logprob[~active])
    lp = log_softmax(x, backend="torch")
    assert torch.equal(got.logprob, lp.gather(1, got.chosen[:, None])[:, 0])
    # Row 3's token is among the 5 best of x / T.
    assert got.new[3].item() in (x[3] / 0.7).topk(5).indices.tolist()


def test_shard_not_on_a_segment_boundary() -> None:
    x = torch.zeros(2, 100)
    with pytest.raises(ValueError, match=r"whole segments of 128 ids"):
        segment_partials(x, v0=64, vocab=V)
    with pytest.raises(TypeError, match=r"x must be f32 \[S, Vl\]"):
        segment_partials(x.double())


@pytest.mark.interpreter
def test_triton_partials(device: str) -> None:
    """The Triton kernel (interpreter here, the GPU in `gpu`): the max, best id, its logit and
    the target of every segment equal the torch path's (the Gumbel noise is the same hash; its
    fp32 logs may differ from the torch path's float64 ones by an ulp), the sums and scores
    agree to fp32 rounding; a shard's and a row's partials are the full batch's bits."""
    v = 1024  # 8 segments of 128
    x = _logits(6, v, seed=6)
    rs = _sampling(6, targets=False)
    rs = RowSampling(rs.seeds, rs.positions, rs.temperature, torch.tensor([-1, 5, -1, 1023, -1, 9]))
    ref = segment_partials(x, sampling=rs, backend="torch")
    dev = _take(rs, lambda f: f.to(device))
    got = segment_partials(x.to(device), sampling=dev, backend="triton").cpu()
    exact = [0, 3, 4, 5]
    assert torch.equal(got[..., exact], ref[..., exact])
    assert torch.allclose(got[..., 1:3], ref[..., 1:3], rtol=1e-5, atol=1e-5)
    half = segment_partials(x[:, 512:].to(device), v0=512, vocab=v, sampling=dev,
                            backend="triton").cpu()  # fmt: skip
    assert torch.equal(half, got[:, 4:])
    row = _take(dev, lambda f: f[3:4])
    assert torch.equal(
        segment_partials(x[3:4].to(device), sampling=row, backend="triton").cpu(), got[3:4]
    )
    lp = log_softmax(x.to(device), backend="triton").cpu()
    assert torch.allclose(lp.double(), torch.log_softmax(x.double(), -1), rtol=0, atol=2e-5)


def _partials(s: int, nseg: int, seed: int) -> torch.Tensor:
    """Partials as `segment_partials` makes them (sums of exp >= 1, exact integer ids), with
    the cases a row can bring: far-apart segment maxima, tied best scores in two segments
    (the lower wins), an all -inf score row, a NaN score (torch.argmax takes it)."""
    g = torch.Generator().manual_seed(seed)
    seg = 128
    p = torch.zeros(s, nseg, 6)
    p[..., 0] = torch.randn(s, nseg, generator=g) * 6
    p[..., 1] = 1 + torch.rand(s, nseg, generator=g) * (seg - 1)
    p[..., 2] = torch.randn(s, nseg, generator=g) * 3
    p[..., 3] = (torch.arange(nseg) * seg)[None, :] + torch.randint(0, seg, (s, nseg), generator=g)
    p[..., 4] = torch.randn(s, nseg, generator=g) * 5
    p[..., 5] = torch.randn(s, nseg, generator=g) * 5
    if s > 3 and nseg > 2:
        p[0, 1:, 0] -= 90.0  # the other segments' exp underflows to 0
        p[1, nseg - 1, 2] = p[1, 0, 2] = p[1, :, 2].max() + 1  # a tie: segment 0 wins
        p[2, :, 2] = float("-inf")  # no finite score: segment 0's id
        p[3, nseg // 2, 2] = float("nan")
    # The last rows shifted so that lse ~ 0: its ulp is then far below one ulp of the segment
    # sum, so a sum in another order shows in the bits.
    lse = combine_partials(p, seg)[0]
    p[-2:, :, 0] -= lse[-2:] - 1e-3
    return p


@pytest.mark.interpreter
@pytest.mark.parametrize("nseg", [1, 2, 32, 64])
def test_triton_combine_is_the_torch_combine(device: str, nseg: int) -> None:
    """`combine_rows` on the Triton backend (one launch; the interpreter here, the GPU in
    `gpu`) == the torch path's `combine_partials` + targets, bitwise in every field; a row
    alone == the row in the batch; `pick` gives the torch path's bits from the same
    partials, with and without filters."""
    s, seg = 6, 128
    parts = _partials(s, nseg, seed=nseg)
    targets = torch.tensor([-1, 5, -1, nseg * seg - 1, 0, -1])
    ref = combine_rows(parts, seg, targets, backend="torch")
    got = combine_rows(parts.to(device), seg, targets.to(device), backend="triton")
    for name in ("lse", "new", "logit", "target_logit", "chosen", "logprob"):
        a, b = getattr(got, name).cpu(), getattr(ref, name)
        assert a.dtype == b.dtype and a.shape == b.shape, name
        assert torch.equal(a.view(torch.int32) if a.is_floating_point() else a,
                           b.view(torch.int32) if b.is_floating_point() else b), name  # fmt: skip
    if nseg > 2:
        assert got.new[1].item() == parts[1, 0, 3].item()  # the tie: the lower segment
        assert got.new[2].item() == parts[2, 0, 3].item()  # all -inf: the first segment
        assert got.new[3].item() == parts[3, nseg // 2, 3].item()  # NaN wins, as torch.argmax
    # Without targets: chosen is the token and its logit's log-prob.
    plain = combine_rows(parts.to(device), seg, None, backend="triton")
    assert plain.target_logit is None and torch.equal(plain.chosen, plain.new)
    assert torch.equal(plain.logprob.cpu(), ref.logit - ref.lse[:, 0])
    for i in range(s):
        one = combine_rows(parts[i : i + 1].to(device), seg, targets[i : i + 1].to(device),
                           backend="triton")  # fmt: skip
        assert torch.equal(
            one.logprob.cpu().view(torch.int32), ref.logprob[i : i + 1].view(torch.int32)
        )


@pytest.mark.interpreter
def test_triton_pick_keeps_the_torch_bits_from_the_same_partials(device: str) -> None:
    """pick on the Triton backend with the torch path's partials handed in (the gather
    hook): tokens and log-probs equal the torch backend's, and filters leave the unfiltered
    rows' bits alone."""
    x = _logits(6, V, seed=8)
    base = _sampling(6)
    top_k = torch.tensor([3, 0, 0, 5, 0, 0])
    rs = RowSampling(base.seeds, base.positions, base.temperature, base.targets, top_k, None)
    parts = segment_partials(x, sampling=rs, backend="torch")
    dev = _take(rs, lambda f: f.to(device))
    plain = pick(x, rs, vocab=V, backend="torch")
    for filters in (False, True):
        want = pick(x, rs, vocab=V, backend="torch", filters=filters)
        got = pick(x.to(device), dev, vocab=V, backend="triton", filters=filters,
                   gather_partials=lambda p: parts.to(device))  # fmt: skip
        assert torch.equal(got.chosen.cpu(), want.chosen)
        assert torch.equal(got.logprob.cpu().view(torch.int32), want.logprob.view(torch.int32))
        unfiltered = torch.tensor([True, True, True, not filters, True, True])
        assert torch.equal(got.logprob.cpu()[unfiltered], plain.logprob[unfiltered])
