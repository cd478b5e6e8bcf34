"""The benchmark's CPU smoke mode runs end to end and writes its JSON and plot."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from ds41_attention import bench


@pytest.mark.interpreter
def test_bench_smoke(tmp_path: Path):
    js, png = tmp_path / "b.json", tmp_path / "b.png"
    results = bench.main(["--smoke", "--json", str(js), "--plot", str(png)])
    assert [r["T"] for r in results] == [1, 4]
    data = json.loads(js.read_text())
    assert data["geometry"]["heads"] == bench.TINY.heads
    for r in data["results"]:
        # every path computed the right thing on its checked rows
        for name in ("invariant", "fast", "torch"):
            assert r[f"{name}_relerr"] < 1e-2, (name, r)
            assert r[f"{name}_us"] > 0
    assert png.stat().st_size > 1000


def test_flash_geometry_counts_match_spec():
    """SPEC section 10: 83.9 MFLOP and 215,040 KV bytes per row."""
    assert bench.FLASH.flop_per_row == 4 * 64 * 512 * 640
    assert round(bench.FLASH.flop_per_row / 1e6, 1) == 83.9
    assert bench.FLASH.kv_bytes_per_row == 215040


@pytest.mark.interpreter
def test_stage_drop_variants_run_and_bad_switch_is_rejected(device):
    from ds41_attention.ops.sparse_attention.launch import launch_sparse_attention

    p = bench.make_problem(bench.TINY, 3, device, seed=4)
    full, _ = launch_sparse_attention(*p.args())
    for drop in (1, 2, 3):
        out, lse = launch_sparse_attention(*p.args(), profile_drop=drop)
        assert out.shape == full.shape and lse.isfinite().all()
        assert not torch.equal(out, full), f"profile_drop={drop} changed nothing"
    with pytest.raises(ValueError, match="profile_drop must be 0, 1, 2 or 3, got 5"):
        launch_sparse_attention(*p.args(), profile_drop=5)
