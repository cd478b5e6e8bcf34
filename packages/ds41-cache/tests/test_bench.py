"""`python -m ds41_cache.bench --smoke` runs on the CPU and reports every case."""

from __future__ import annotations

import json
from pathlib import Path

from ds41_cache import bench


def test_bench_smoke_writes_json(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    results = bench.main(["--smoke", "--json", str(out)])
    rows = json.loads(out.read_text())
    cases = {(r["op"], r["fmt"]) for r in rows}
    assert cases == {(op, fmt) for op in ("insert", "gather") for fmt in ("mxfp8", "nvfp4")}
    assert len(rows) == len(results) == 4
    for r in rows:
        assert r["backend"] == "torch" and r["device"] == "cpu"
        assert r["median_us"] > 0 and r["gbps"] > 0
        # bytes moved: the bf16 rows plus the records (528 or 288 bytes per token at D=512)
        per_token = {"mxfp8": 528, "nvfp4": 288}[r["fmt"]]
        assert r["bytes_moved"] == r["rows"] * (1024 + per_token)
