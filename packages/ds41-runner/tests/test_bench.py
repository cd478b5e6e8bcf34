import json

import pytest

from ds41_runner import bench


def test_bench_smoke_writes_results(tmp_path):
    out = tmp_path / "runner.json"
    md = tmp_path / "runner.md"
    assert bench.main(["--smoke", "--json", str(out), "--markdown", str(md)]) == 0
    data = json.loads(out.read_text())
    points = data["points"]
    # every (kv_dtype, mode) pair measured at both batch sizes, eager only on the CPU
    assert {(p["kv_dtype"], p["mode"], p["batch"]) for p in points} == {
        (k, m, b) for k in ("nvfp4_ds_mla", "fp8_ds_mla") for m in ("bi", "fast") for b in (1, 2)
    }
    assert all(p["step_ms_median"] > 0 and p["prefill_tok_s"] > 0 for p in points)
    # nvfp4 compressed entries are smaller than mxfp8 ones
    per_tok = {p["kv_dtype"]: p["cache_bytes_per_token"] for p in points}
    assert per_tok["nvfp4_ds_mla"] < per_tok["fp8_ds_mla"]
    assert len(data["ratios"]) == 4
    assert "BI / fast" in md.read_text()


def test_serve_bench_smoke_goes_through_the_engine(tmp_path):
    from ds41_runner import serve_bench

    out = tmp_path / "serve.json"
    md = tmp_path / "serve.md"
    assert serve_bench.main(["--smoke", "--json", str(out), "--markdown", str(md)]) == 0
    points = json.loads(out.read_text())["points"]
    assert {(p["mode"], p["workload"]) for p in points} == {
        (m, w) for m in ("bi", "fast") for w in ("burst", "poisson")
    }
    for p in points:
        # every request came back with all its tokens, through Engine.step()
        assert p["generated_tokens"] == p["requests"] * 2 and p["failed"] == 0
        assert p["output_tok_s"] > 0 and p["ttft_p50_ms"] > 0 and p["steps"] > 0
    assert "GPU busy" in md.read_text()


def test_serve_bench_workload_choice(tmp_path, capsys):
    from ds41_runner import serve_bench

    out = tmp_path / "serve.json"
    args = ["--smoke", "--modes", "bi", "--workloads", "poisson", "--json", str(out)]
    assert serve_bench.main(args) == 0
    points = json.loads(out.read_text())["points"]
    assert [(p["mode"], p["workload"]) for p in points] == [("bi", "poisson")]
    with pytest.raises(SystemExit):
        serve_bench.main(["--smoke", "--workloads", "burst,steady"])
    assert "--workloads must be a comma list of burst, poisson; got 'burst,steady'" in (
        capsys.readouterr().err
    )
