"""The benchmark script runs end to end in its CPU smoke mode."""

from __future__ import annotations

import json
from pathlib import Path

from ds41_indexer.bench import main


def test_bench_smoke(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    results = main(["--smoke", "--contexts", "64", "--rows", "1", "--json", str(out)])
    assert len(results) == 1 and results[0].fused_ms > 0
    data = json.loads(out.read_text())
    assert data["results"][0]["context"] == 64
    assert data["results"][0]["key_gb"] == 64 * 68 / 1e9


def test_bench_smoke_launch_hidden_recorded(tmp_path: Path) -> None:
    import ds41_indexer.bench as bench

    out = tmp_path / "bench.json"
    main(["--smoke", "--contexts", "64", "--rows", "1", "--launch-hidden", "--json", str(out)])
    assert json.loads(out.read_text())["launch_hidden"] is True and bench.LAUNCH_HIDDEN
    main(["--smoke", "--contexts", "64", "--rows", "1", "--json", str(out)])
    assert json.loads(out.read_text())["launch_hidden"] is False and not bench.LAUNCH_HIDDEN
