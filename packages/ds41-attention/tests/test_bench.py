"""The benchmark's CPU smoke mode runs end to end and writes its JSON and plot."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

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
