"""Tensor parallelism (ds41_runner.parallel): TP=2 on gloo gives TP=1's bits; config errors
before any process group; a dead rank makes the other fail instead of hang."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

import ds41_runner
from ds41_cache.testing import interpreter_only
from ds41_runner.ops.linear import (
    linear,
    linear_chain,
    linear_partials,
    reduce_linear_partials,
)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    return env


def _torchrun(args: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
    return subprocess.run(
        cmd + args, env=_env(), capture_output=True, text=True, timeout=timeout, check=False
    )


def test_tp2_gloo_is_bitwise_tp1(tmp_path: Path) -> None:
    """Two gloo processes run the app's workload at parallel.tp=2 (batched, each request alone
    and through score); every request's tokens and log-probs equal the one-process run's;
    the same for greedy and sampled requests with temperature, top-k and top-p (`--sampling`:
    the ranks exchange vocabulary partials, and the full logits only for filtered steps);
    mode=fast at TP=2 runs (and may differ)."""
    out = tmp_path / "result.json"
    proc = _torchrun(
        # mlp_hidden 256: w2's K has 4 CPU segments, so the TP=2 ranks exchange half totals.
        ["-m", "ds41_runner.parallel.check", "--out", str(out), "--fast", "--sampling", "--",
         "model=tiny", "model.mlp_hidden=256", "workload=tiny", "device=cpu"],
        timeout=240,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    res = json.loads(out.read_text())
    assert res["world"] == 2
    (bi,) = res["bi"]
    assert bi["tp_invariance"]["passed"], bi  # TP=2: batched == alone == score
    assert bi["vs_tp1"] == {
        "requests": 3, "tokens_equal": 3, "logprobs_equal": 3, "bitwise": True,
        "max_abs_diff": 0.0,
    }  # fmt: skip
    assert bi["tp1_invariance"]["passed"]
    sampled = res["sampling"]
    assert sampled["ok"]
    for key in ("alone", "score", "vs_tp1"):  # TP=2 batched == alone == score == TP=1
        assert sampled[key]["bitwise"] and sampled[key]["requests"] == 5, (key, sampled)
    assert sampled["distinct_tokens"] > 10  # the sampled requests did draw varied tokens
    assert res["fast"]["ran"]  # allowed to differ from TP=1 (all_reduce, torch matmuls)
    assert (tmp_path / "tp2_auto" / "report.json").is_file()  # rank 0 wrote the report


def test_tp_bench_cpu_smoke(tmp_path: Path) -> None:
    """`ds41_runner.tp_bench` under torchrun on gloo (tiny model, eager): both TP degrees time
    a decode and a prefill step, and TP=2 records its communication."""
    out = tmp_path / "bench.json"
    proc = _torchrun(
        ["-m", "ds41_runner.tp_bench", "--model", "tiny", "--batch", "2", "--context", "16",
         "--prefill", "8", "--iters", "1", "--json", str(out)],
        timeout=180,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    res = json.loads(out.read_text())
    assert [r["tp"] for r in res["runs"]] == [1, 2]
    for r in res["runs"]:
        for kind in ("decode", "prefill"):
            assert r[kind]["ms"] > 0 and r[kind]["how"] == "eager"
            assert (r["tp"] == 2) == ("comm_ms" in r[kind])
    assert "| decode | 2 |" in proc.stdout


def test_worker_ranks_leave_no_hydra_folders(tmp_path: Path) -> None:
    """A rank other than 0 sends Hydra's output folders to its scratch folder (removed at
    exit); rank 0 and a run without a launcher keep Hydra's defaults."""
    from ds41_runner.app import worker_rank_overrides

    scratch = str(tmp_path / "scratch")
    assert worker_rank_overrides({}, scratch) == []
    assert worker_rank_overrides({"RANK": "0"}, scratch) == []
    got = worker_rank_overrides({"RANK": "1"}, scratch)
    assert f"hydra.run.dir={scratch}" in got and "hydra.output_subdir=null" in got


def test_dead_rank_fails_fast() -> None:
    """Rank 1 dies after joining; rank 0's next collective raises within the timeout, naming
    the collective and the rank, and `shutdown` ends the process with status 1 (no abort)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code = textwrap.dedent(
        """
        import os, sys, torch
        from ds41_runner.parallel import init_tensor_parallel, shutdown
        g = init_tensor_parallel(2, "cpu", 10.0)
        if g.rank == 1:
            os._exit(3)
        try:
            for _ in range(100):
                g.all_gather(torch.ones(4))
        except Exception as exc:
            print("RAISED", type(exc).__name__, exc, flush=True)
            shutdown()
            sys.exit(2)  # not reached: shutdown ends a broken group's process
        print("NO ERROR", flush=True)
        """
    )
    procs = []
    for r in range(2):
        env = _env()
        env.update(RANK=str(r), WORLD_SIZE="2", LOCAL_RANK=str(r), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port))  # fmt: skip
        pipe = subprocess.PIPE
        cmd = [sys.executable, "-c", code]
        procs.append(subprocess.Popen(cmd, env=env, stdout=pipe, stderr=pipe, text=True))
    t0 = time.monotonic()
    outs = [p.communicate(timeout=60) for p in procs]
    assert procs[1].returncode == 3
    assert procs[0].returncode == 1, outs[0]
    assert "RAISED RuntimeError tensor-parallel all_gather failed on rank 0 of 2" in outs[0][0]
    assert time.monotonic() - t0 < 45


@pytest.mark.parametrize(
    ("overrides", "env", "match"),
    [
        (["parallel.tp=3"], {"WORLD_SIZE": "3"}, r"parallel.tp = 3 must divide model.heads = 4"),
        (["parallel.tp=4"], {"WORLD_SIZE": "4"}, r"parallel.tp = 4 must divide model.o_groups"),
        (["parallel.tp=2"], {}, r"parallel.tp = 2 needs one process per rank.*torchrun"),
        (["parallel.tp=2"], {"WORLD_SIZE": "4"}, r"parallel.tp = 2 must equal .*WORLD_SIZE = 4"),
        ([], {"WORLD_SIZE": "2"}, r"parallel.tp = 1 must equal .*WORLD_SIZE = 2"),
        (["parallel.tp=0"], {}, r"parallel.tp must be a positive integer"),
        (["parallel.timeout_s=0"], {}, r"parallel.timeout_s must be"),
        # 254 ids: one log-softmax segment (two would hold 127 < 128), which 2 ranks cannot split.
        (["parallel.tp=2", "model.vocab_size=254"], {"WORLD_SIZE": "2"},
         r"parallel.tp = 2 must divide the 1 log-softmax segments of model.vocab_size = 254"),
        # wo_b's K = 2 groups x 8 = 16: shards of 8 split a 16-channel CPU segment.
        (["parallel.tp=2", "model.o_lora_rank=8"], {"WORLD_SIZE": "2"},
         r"parallel.tp = 2 splits wo_b .* whole segments"),
    ],
)  # fmt: skip
def test_config_errors_before_any_process_group(
    monkeypatch: pytest.MonkeyPatch, overrides: list[str], env: dict[str, str], match: str
) -> None:
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(ValueError, match=match):
        ds41_runner.compose(["device=cpu", *overrides])
    assert not dist.is_initialized()


def test_cli_without_launcher_is_a_config_error(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "ds41_runner", "parallel.tp=2", "device=cpu",
         f"hydra.run.dir={tmp_path / 'run'}"],
        env=_env(), capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 1
    assert "config error" in proc.stderr and "parallel.tp = 2" in proc.stderr
    assert not (tmp_path / "run" / "report.json").exists()


@pytest.mark.parametrize("k", [64, 96])
def test_k_shards_add_up_to_linear(k: int) -> None:
    """Per-segment partials of two K shards, gathered and added in order == linear() (the CPU
    path), for the full product and for each row alone."""
    g = torch.Generator().manual_seed(7)
    x = (torch.randn(5, k, generator=g) * 3).to(torch.bfloat16)
    w = (torch.randn(24, k, generator=g) / k**0.5).to(torch.bfloat16)
    full = linear(x, w, backend="torch")
    h = k // 2
    parts = [
        linear_partials(x[:, i * h : (i + 1) * h], w[:, i * h : (i + 1) * h],
                        plan_shape=(24, k, 1), backend="torch")
        for i in range(2)
    ]  # fmt: skip
    got = reduce_linear_partials(torch.cat(parts), torch.bfloat16, backend="torch")
    assert torch.equal(got, full)
    assert torch.equal(linear(x[3:4], w, backend="torch"), full[3:4])


@pytest.mark.interpreter
def test_triton_shards_match_the_full_weight() -> None:
    """Triton (interpreter here, the H200 in `gpu2`): two K shards' segment chains, gathered and
    reduced == the one-process launch; a column shard with the full plan == its columns."""
    from ds41_runner.ops.matmul.plan import plan_matmul

    n, k = 64, 256
    assert plan_matmul(n, k).n_segs == 2
    g = torch.Generator().manual_seed(11)
    x = (torch.randn(3, k, generator=g) * 3).to(torch.bfloat16)
    w = (torch.randn(n, k, generator=g) / k**0.5).to(torch.bfloat16)
    full = linear(x, w, backend="triton")
    parts = [
        linear_partials(x[:, i * 128 : (i + 1) * 128], w[:, i * 128 : (i + 1) * 128],
                        plan_shape=(n, k, 1), backend="triton")
        for i in range(2)
    ]  # fmt: skip
    got = reduce_linear_partials(torch.cat(parts), torch.bfloat16, backend="triton")
    assert torch.equal(got, full)
    col = linear(x, w[32:], backend="triton", plan_shape=(n, k, 1))
    assert torch.equal(col, full[:, 32:])


def _halves_case(k: int, n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(5, k, generator=g) * 3).to(torch.bfloat16)
    w = (torch.randn(n, k, generator=g) / k**0.5).to(torch.bfloat16)
    return x, w


def _check_half_totals(x: torch.Tensor, w: torch.Tensor, backend: str) -> None:
    """The TP=2 exchange of half totals (each rank's `linear_chain`, then the two added) ==
    the one-process `linear`, in fp32 and bf16; every segment gathered == the same; one
    ascending chain over all segments is a different sum (the halves are in effect)."""
    n, k = w.shape
    h = k // 2
    shard = [(x[:, i * h : (i + 1) * h], w[:, i * h : (i + 1) * h]) for i in range(2)]
    own = [linear_chain(a, b, plan_shape=(n, k, 1), backend=backend) for a, b in shard]
    parts = torch.cat(
        [linear_partials(a, b, plan_shape=(n, k, 1), backend=backend) for a, b in shard]
    )
    assert parts.shape[0] >= 4
    for dtype in (torch.float32, torch.bfloat16):
        full = linear(x, w, backend=backend, out_dtype=dtype)
        got = reduce_linear_partials(torch.stack(own), dtype, backend=backend, half=2)
        assert torch.equal(got, full)
        assert torch.equal(reduce_linear_partials(parts, dtype, backend=backend), full)
        assert torch.equal(linear(x[2:3], w, backend=backend, out_dtype=dtype), full[2:3])
    chain = reduce_linear_partials(parts, torch.float32, backend=backend, half=parts.shape[0])
    assert not torch.equal(chain, linear(x, w, backend=backend, out_dtype=torch.float32))


def test_half_totals_cpu() -> None:
    """K = 256: four 64-channel CPU segments, two per rank."""
    _check_half_totals(*_halves_case(256, 40, seed=21), backend="torch")


@pytest.mark.interpreter
@interpreter_only
def test_half_totals_triton() -> None:
    """K = 512 against N = 64: a plan of 4 segments of 2 K tiles; the one-process launch in
    one program and split (same bits) both add the halves apart."""
    from ds41_runner.ops.matmul.plan import plan_matmul
    from ds41_runner.ops.matmul.triton_kernels import launch_matmul

    x, w = _halves_case(512, 64, seed=22)
    plan = plan_matmul(64, 512)
    assert (plan.n_segs, plan.half) == (4, 2)
    _check_half_totals(x, w, backend="triton")
    outs = []
    for split in (False, True):
        out = torch.full((5, 64), float("nan"))
        outs.append(launch_matmul(x.unsqueeze(1), w.unsqueeze(0), out, plan, upcast=True,
                                  ieee_fp32=True, split=split))  # fmt: skip
    assert torch.equal(outs[0], outs[1])
    assert torch.equal(outs[0], linear(x, w, backend="triton", out_dtype=torch.float32))
