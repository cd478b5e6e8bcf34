"""linear(): row independence (bitwise) and accuracy against float64."""

import pytest
import torch

from ds41_cache.testing import interpreter_only
from ds41_runner.ops.linear import grouped_linear, linear
from ds41_runner.ops.matmul.naive import reference_matmul


def _data(m: int, n: int, k: int, seed: int, dtype: torch.dtype = torch.bfloat16):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(m, k, generator=g) * 3).to(dtype)
    w = (torch.randn(n, k, generator=g) / k**0.5).to(dtype)
    return x, w


@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float32])
def test_torch_rows_independent_of_batch(out_dtype):
    x, w = _data(64, 96, 80, seed=1)
    full = linear(x, w, mode="bi", backend="torch", out_dtype=out_dtype)
    for m in (1, 7, 64):
        for start in (0, 64 - m):
            part = linear(x[start : start + m], w, mode="bi", backend="torch", out_dtype=out_dtype)
            assert torch.equal(part, full[start : start + m])
    perm = torch.randperm(64, generator=torch.Generator().manual_seed(2))
    assert torch.equal(
        linear(x[perm], w, mode="bi", backend="torch", out_dtype=out_dtype), full[perm]
    )
    # The same row inside a batch of different rows.
    other, _ = _data(9, 96, 80, seed=3)
    mixed = torch.cat([other[:4], x[5:6], other[4:]])
    assert torch.equal(
        linear(mixed, w, mode="bi", backend="torch", out_dtype=out_dtype)[4], full[5]
    )


def test_torch_matches_float64():
    x, w = _data(16, 48, 64, seed=4)
    ref = reference_matmul(x, w)
    got32 = linear(x, w, mode="bi", backend="torch", out_dtype=torch.float32).double()
    # bf16 x bf16 products are exact in fp32; only fp32 accumulation rounding remains.
    tol = 1e-5 * (x.double().abs() @ w.double().abs().T)
    assert ((got32 - ref).abs() <= tol).all()
    got = linear(x, w, mode="bi", backend="torch")
    assert got.dtype == torch.bfloat16
    assert torch.equal(got, got32.float().to(torch.bfloat16))


def test_fp32_flag_and_fast_mode():
    x, w = _data(8, 32, 64, seed=5)
    a = linear(x, w, fp32=True, out_dtype=torch.float32, backend="torch")
    ref = reference_matmul(x, w)
    assert torch.allclose(a.double(), ref, rtol=1e-5, atol=1e-5)
    fast = linear(x, w, mode="fast", out_dtype=torch.float32)
    assert torch.allclose(fast.double(), ref, rtol=1e-2, atol=1e-2)


def test_bad_inputs():
    x, w = _data(4, 8, 32, seed=6)
    with pytest.raises(ValueError, match="mode"):
        linear(x, w, mode="quick")
    with pytest.raises(ValueError, match=r"w must be \[N, 32\]"):
        linear(x, w[:, :16])
    with pytest.raises(TypeError, match="bf16/fp16/fp32"):
        linear(x.to(torch.int32), w)
    with pytest.raises(ValueError, match="2-D"):
        linear(x[0], w)


@pytest.mark.interpreter
def test_triton_matches_reference_and_is_row_invariant(device):
    # 70 rows cross the 64-row tile; K = 96 is not a multiple of the 64-wide K tile.
    x, w = _data(70, 72, 96, seed=7)
    x, w = x.to(device), w.to(device)
    full = linear(x, w, mode="bi", backend="triton", out_dtype=torch.float32)
    ref = reference_matmul(x.cpu(), w.cpu())
    tol = 1e-5 * (x.double().abs() @ w.double().abs().T).cpu() + 1e-6
    assert ((full.double().cpu() - ref).abs() <= tol).all()
    for m, start in ((1, 0), (1, 69), (7, 30)):
        part = linear(x[start : start + m], w, mode="bi", backend="triton", out_dtype=torch.float32)
        assert torch.equal(part, full[start : start + m])
    strided = x[:, :64]
    got = linear(strided, w[:, :64], mode="bi", backend="triton", out_dtype=torch.float32)
    assert torch.allclose(
        got.double().cpu(), reference_matmul(strided.cpu(), w[:, :64].cpu()), rtol=1e-5, atol=1e-5
    )


@pytest.mark.interpreter
def test_triton_fp32_path(device):
    x, w = _data(5, 40, 64, seed=8, dtype=torch.float32)
    got = linear(x.to(device), w.to(device), fp32=True, out_dtype=torch.float32, backend="triton")
    assert torch.allclose(got.double().cpu(), reference_matmul(x, w), rtol=1e-5, atol=1e-5)


@pytest.mark.gpu
def test_gpu_rows_bitwise_for_any_batch():
    from ds41_runner.ops.matmul.plan import DECODE_TILE, plan_matmul

    # 1,100 rows of a [4096, 512] weight launch with a prefill tile, the slices below with
    # the decode tile (checked), so this also tests that the tile does not change the bits.
    x, w = _data(1100, 4096, 512, seed=9)
    x, w = x.cuda(), w.cuda()
    assert plan_matmul(4096, 512).tile(1100, False) != DECODE_TILE
    full = linear(x, w, mode="bi")
    for m in (1, 7, 64, 129, 300):
        assert torch.equal(linear(x[:m], w, mode="bi"), full[:m])
        assert torch.equal(linear(x[-m:], w, mode="bi"), full[-m:])


def test_plan_depends_on_the_weight_only():
    from ds41_runner.ops.matmul.plan import MIN_SEG_TILES, TARGET_PROGRAMS, plan_matmul

    for n, k, g in [(256, 1024, 1), (32768, 256, 1), (256, 4096, 8), (32, 576, 1), (7, 1, 1)]:
        p = plan_matmul(n, k, g)
        # Segments cover every K tile once, and none is empty.
        assert (p.n_segs - 1) * p.seg_tiles < p.k_tiles <= p.n_segs * p.seg_tiles
        assert p.n_segs == 1 or p.seg_tiles >= MIN_SEG_TILES
    # Narrow weights are cut until the launch has TARGET_PROGRAMS programs (or 2-tile segments).
    p = plan_matmul(256, 4096, 8)
    assert p.n_segs * p.n_tiles * p.groups == TARGET_PROGRAMS
    assert plan_matmul(32, 1024).seg_tiles == MIN_SEG_TILES
    # Only the launch's parallelism looks at M.
    p = plan_matmul(256, 1024)
    assert p.n_segs == 8 and p.split(1) and p.split(64) and not p.split(64 * 40)
    # Large weights split at decode sizes even with two segments (flash_wide's w1 and its TP=2
    # shard plan); a small one with two segments never does.
    assert plan_matmul(12288, 5120).n_segs == 2 and plan_matmul(12288, 5120).split(64)
    assert not plan_matmul(12288, 5120).split(128)  # 384 tiles
    assert plan_matmul(5120, 8192).split(64) and not plan_matmul(5120, 8192).split(1024)
    assert not plan_matmul(2048, 1024, 4).split(64)  # 2 segments, 8M elements
    with pytest.raises(ValueError, match="positive"):
        plan_matmul(0, 64)


def test_grouped_linear_torch_and_fast():
    x, _ = _data(6, 1, 3 * 40, seed=11)
    x = x.view(6, 3, 40)
    w = (torch.randn(3, 24, 40, generator=torch.Generator().manual_seed(12)) / 6).to(x.dtype)
    got = grouped_linear(x, w, backend="torch", out_dtype=torch.float32)
    assert got.shape == (6, 72)
    for i in range(3):
        ref = reference_matmul(x[:, i], w[i])
        assert torch.allclose(got[:, i * 24 : (i + 1) * 24].double(), ref, rtol=1e-5, atol=1e-5)
        blk = linear(x[:, i], w[i], backend="torch", out_dtype=torch.float32)
        assert torch.equal(got[:, i * 24 : (i + 1) * 24], blk)
    fast = grouped_linear(x, w, mode="fast", out_dtype=torch.float32)
    assert torch.allclose(fast, got, rtol=1e-2, atol=1e-2)
    with pytest.raises(ValueError, match=r"w must be \[3, N, 40\]"):
        grouped_linear(x, w[:2])
    with pytest.raises(ValueError, match="3-D"):
        grouped_linear(x[0], w)


@pytest.mark.interpreter
@interpreter_only
@pytest.mark.parametrize("groups,n,k", [(1, 72, 600), (3, 24, 260)])
def test_triton_segments_split_or_not_same_bits(device, groups, n, k):
    from ds41_runner.ops.matmul.plan import plan_matmul
    from ds41_runner.ops.matmul.triton_kernels import launch_matmul

    g = torch.Generator().manual_seed(13 + k)
    x = (torch.randn(70, groups, k, generator=g) * 2).to(torch.bfloat16).to(device)
    w = (torch.randn(groups, n, k, generator=g) / k**0.5).to(torch.bfloat16).to(device)
    plan = plan_matmul(n, k, groups)
    assert plan.n_segs > 1
    outs = []
    for split in (False, True):
        out = torch.full((70, groups * n), float("nan"), device=device)
        outs.append(launch_matmul(x, w, out, plan, upcast=True, ieee_fp32=True, split=split))
    assert not outs[0].isnan().any()
    assert torch.equal(outs[0], outs[1])
    via_api = grouped_linear(x, w, backend="triton", out_dtype=torch.float32)
    assert torch.equal(via_api, outs[0])
    for start, m in ((0, 1), (69, 1), (20, 9)):
        part = grouped_linear(x[start : start + m], w, backend="triton", out_dtype=torch.float32)
        assert torch.equal(part, outs[0][start : start + m])
    for i in range(groups):
        ref = reference_matmul(x[:, i].cpu(), w[i].cpu())
        tol = 1e-5 * (x[:, i].double().abs() @ w[i].double().abs().T).cpu() + 1e-6
        assert ((outs[0][:, i * n : (i + 1) * n].double().cpu() - ref).abs() <= tol).all()


def test_launch_tile_rule():
    from ds41_runner.ops.matmul.plan import DECODE_TILE, PREFILL_TILES, plan_matmul

    big, mid = PREFILL_TILES
    assert plan_matmul(32768, 256).tile(64, False) == DECODE_TILE  # decode batch
    assert plan_matmul(32768, 256).tile(1024, False) == big
    assert plan_matmul(32768, 256).tile(1024, True) == DECODE_TILE  # split launches
    assert plan_matmul(256, 4096, 8).tile(1024, False) == mid  # 128 programs at 128 x 128
    assert plan_matmul(512, 1024).tile(1024, False) == DECODE_TILE  # too few of either


@pytest.mark.interpreter
@pytest.mark.parametrize("split", [False, True])
def test_triton_every_launch_tile_same_bits(device, split):
    from ds41_runner.ops.matmul.plan import DECODE_TILE, PREFILL_TILES, plan_matmul
    from ds41_runner.ops.matmul.triton_kernels import launch_matmul

    # 130 rows and 200 columns cross the 128-row and 128-column tiles; K = 600 has a partial
    # last K tile; each tile writes over a NaN-poisoned output.
    g = torch.Generator().manual_seed(21)
    x = (torch.randn(130, 1, 600, generator=g) * 2).to(torch.bfloat16).to(device)
    w = (torch.randn(1, 200, 600, generator=g) / 600**0.5).to(torch.bfloat16).to(device)
    plan = plan_matmul(200, 600)
    outs = []
    for tile in (DECODE_TILE, *PREFILL_TILES):
        out = torch.full((130, 200), float("nan"), device=device)
        outs.append(
            launch_matmul(x, w, out, plan, upcast=True, ieee_fp32=True, split=split, tile=tile)
        )
    assert not outs[0].isnan().any()
    for other in outs[1:]:
        assert torch.equal(other, outs[0])
    ref = reference_matmul(x[:, 0].cpu(), w[0].cpu())
    tol = 1e-5 * (x[:, 0].double().abs() @ w[0].double().abs().T).cpu() + 1e-6
    assert ((outs[0].double().cpu() - ref).abs() <= tol).all()


@pytest.mark.interpreter
@interpreter_only
def test_matmul_bench_smoke(monkeypatch, capsys):
    from ds41_runner import matmul_bench

    assert matmul_bench.main(["--smoke"]) == 0
    assert capsys.readouterr().out.count("ok") == 4


@pytest.mark.gpu
@pytest.mark.parametrize(
    "name",
    ["wq_a + wkv", "w1 + w3", "wkv_c + wgate_c", "wo_a (grouped)", "wo_b", "lm_head", "wq_b"],
)
def test_gpu_flash_mini_shapes_split_and_rows_bitwise(name):
    from ds41_runner.matmul_bench import check, flash_mini_shapes
    from ds41_runner.model import ModelConfig

    shape = {s.name: s for s in flash_mini_shapes(ModelConfig.preset("flash_mini"))}[name]
    for m in (1, 7, 64, 129, 300, 1024):
        check(shape, m, torch.device("cuda"), interp=False)


@pytest.mark.gpu
def test_gpu_graph_replay_equals_eager():
    x, w = _data(64, 1024, 2048, seed=14)
    x, w = x.cuda(), w.cuda()
    eager = linear(x, w)
    static_out = {}
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        linear(x, w)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out["y"] = linear(x, w)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(static_out["y"], eager)
