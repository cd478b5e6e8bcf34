"""Run every ds41 benchmark in one process tree and collect their JSON results.

    python benchmarks/run_all.py [--out DIR] [--only serve,cache,indexer,attention,matmul,runner]

Each package's benchmark is a module (`python -m ds41_<pkg>.bench`) that prints its own table
and writes `--json`; this script runs them in turn (a failure in one does not stop the rest)
and prints where the results went. BENCHMARKS.md is written from these files.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

BENCHES: dict[str, list[str]] = {
    "serve": ["-m", "ds41_runner.serve_bench"],
    "cache": ["-m", "ds41_cache.bench"],
    "indexer": ["-m", "ds41_indexer.bench"],
    "attention": ["-m", "ds41_attention.bench"],
    "matmul": ["-m", "ds41_runner.matmul_bench"],
    "runner": ["-m", "ds41_runner.bench"],
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--only", default=",".join(BENCHES))
    parser.add_argument("--timeout", type=float, default=None, help="seconds per benchmark")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    failed = []
    for name in args.only.split(","):
        cmd = [sys.executable, *BENCHES[name], "--json", str(out / f"{name}.json")]
        if name == "attention":
            cmd += ["--plot", str(out / "attention_tflops.png")]
        if name == "serve":
            cmd += ["--markdown", str(out / "serve.md")]
        if name == "matmul":
            cmd += ["--markdown", str(out / "matmul.md")]
        if name == "runner":
            cmd += ["--markdown", str(out / "runner.md"), "--plot", str(out / "runner_decode.png")]
        print(f"=== bench {name}: {' '.join(cmd[1:])}", flush=True)
        try:
            if subprocess.run(cmd, timeout=args.timeout).returncode != 0:
                failed.append(name)
        except subprocess.TimeoutExpired:
            failed.append(f"{name} (timed out after {args.timeout} s)")
    print(f"results in {out}; failed: {failed or 'none'}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
