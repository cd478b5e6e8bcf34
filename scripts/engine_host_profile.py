"""Where the engine's host time per step goes (serve_bench's burst workload, CUDA graphs).

    python scripts/engine_host_profile.py [--modes bi,fast] [--out DIR]

Per mode: a warmed engine runs the burst workload three times: plain (the serve_bench
figure), with per-phase timers around the engine's host calls, and under cProfile. Prints the
phases per decode-only step, the top functions by own time, and the host cost of one graph
replay per bucket (graph launch alone, padding inputs). A profiling script: the production
code has no switches for it.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from ds41_runner.engine import graphs as graphs_mod
from ds41_runner.serve_bench import Setup, Workload, measure, warm_engine

SETUP = Setup("flash_mini", "nvfp4_ds_mla", 1024, 64, 64, 1024, 2048, "cuda", "cuda_graph")
BURST = Workload("burst", 64, 200, 900, 48)


class Timers:
    """Seconds per label, summed per engine step (`cur` is the step being timed)."""

    def __init__(self) -> None:
        self.total: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self.cur: dict[str, float] = defaultdict(float)

    def wrap(self, obj: Any, name: str, label: str) -> None:
        fn: Callable[..., Any] = getattr(obj, name)

        def timed(*a: Any, **k: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                dt = time.perf_counter() - t0
                self.total[label] += dt
                self.cur[label] += dt
                self.calls[label] += 1

        setattr(obj, name, timed)


def phases(eng: Any) -> tuple[dict[str, tuple[float, int]], dict[str, float], int]:
    """(total seconds and calls per label; mean ms per decode-only step; decode steps)."""
    tm = Timers()
    per_decode: dict[str, list[float]] = defaultdict(list)
    orig_step = eng.step

    def step() -> Any:
        tm.cur = defaultdict(float)
        n0 = len(eng.stats.records)
        out = orig_step()
        recs = eng.stats.records
        if len(recs) > n0 and recs[-1].decode_only:
            for k, v in tm.cur.items():
                per_decode[k].append(v)
            per_decode["(record seconds)"].append(recs[-1].seconds)
        return out

    eng.step = step
    tm.wrap(eng.sched, "schedule", "sched.schedule")
    tm.wrap(eng, "_launch", "engine._launch (all)")
    tm.wrap(eng.runner, "launch", "  runner.launch")
    tm.wrap(eng.runner.host_in, "take", "  host_in.take")
    tm.wrap(eng.kv, "flush", "    kv.flush")
    tm.wrap(eng.runner.host_out, "take", "    host_out.take")
    tm.wrap(eng.sched, "complete", "  sched.complete")
    tm.wrap(eng, "_process", "engine._process (all)")
    replays = [(cap, cap.replay) for cap in eng.runner._graphs.values()]
    for cap in eng.runner._graphs.values():
        tm.wrap(cap, "replay", "    graph.replay")
    orig_wait = graphs_mod.Launched.wait

    def wait(self: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return orig_wait(self)
        finally:
            tm.total["  Launched.wait"] += time.perf_counter() - t0
            tm.calls["  Launched.wait"] += 1

    graphs_mod.Launched.wait = wait  # type: ignore[method-assign]
    try:
        measure(eng, "x", BURST, profile=False, progress=False)
    finally:
        graphs_mod.Launched.wait = orig_wait  # type: ignore[method-assign]
        for k in ("schedule", "complete"):
            eng.sched.__dict__.pop(k, None)
        for k in ("_launch", "_process", "step"):
            eng.__dict__.pop(k, None)
        eng.runner.__dict__.pop("launch", None)
        eng.runner.host_in.__dict__.pop("take", None)
        eng.runner.host_out.__dict__.pop("take", None)
        eng.kv.__dict__.pop("flush", None)
        for cap, fn in replays:
            cap.replay = fn
    n = len(per_decode["(record seconds)"])
    dec = {k: sum(v) * 1e3 / max(n, 1) for k, v in per_decode.items()}
    return {k: (tm.total[k], tm.calls[k]) for k in tm.total}, dec, n


def replay_cost(eng: Any) -> dict[int, float]:
    """Host microseconds of one graph launch per bucket (padding inputs: nothing written)."""
    out = {}
    runner = eng.runner
    for b, filters in sorted(runner._graphs):
        if filters:
            continue  # the top-k/top-p variant of a bucket: not captured by this workload
        cap = runner._graphs[b, filters]
        runner._padding_input(runner.layout_for(b))
        ts = []
        for _ in range(12):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            cap.replay()
            ts.append(time.perf_counter() - t0)
        torch.cuda.synchronize()
        out[b] = statistics.median(ts[2:]) * 1e6
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--modes", default="bi,fast")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--smoke", action="store_true", help="tiny model, CPU, eager (script test)")
    args = ap.parse_args()
    global SETUP, BURST
    if args.smoke:
        SETUP = Setup("tiny", "nvfp4_ds_mla", 32, 16, 8, 128, 256, "cpu", "eager")
        BURST = Workload("burst", 3, 5, 12, 2)
    report = io.StringIO()

    def say(s: str = "") -> None:
        print(s, flush=True)
        report.write(s + "\n")

    for mode in args.modes.split(","):
        eng = warm_engine(SETUP, mode)
        p = measure(eng, mode, BURST, profile=False, progress=False)
        recs = eng.stats.records
        dec = [r for r in recs if r.decode_only]
        say(
            f"== mode={mode}: {p.output_tok_s:,.0f} out tok/s, wall {p.wall_s * 1e3:.0f} ms, "
            f"{len(recs)} steps ({len(dec)} decode-only), host/decode step "
            f"{p.host_ms_per_decode_step:.3f} ms, host/step {p.host_ms_per_step:.3f} ms"
        )
        ph, dec, ndec = phases(eng)
        steps = len(eng.stats.records)
        say(f"   phases: ms per step over all {steps} steps | ms per decode-only step ({ndec})")
        for k, (tot, n) in ph.items():
            say(f"   {k:28s} {tot * 1e3 / steps:8.3f} | {dec.get(k, 0.0):8.3f}   ({n} calls)")
        say(f"   {'(record seconds)':28s} {'':8s} | {dec.get('(record seconds)', 0.0):8.3f}")
        pr = cProfile.Profile()
        pr.enable()
        measure(eng, mode, BURST, profile=False, progress=False)
        pr.disable()
        s = io.StringIO()
        st = pstats.Stats(pr, stream=s).sort_stats("tottime")
        st.print_stats(28)
        s2 = io.StringIO()
        pstats.Stats(pr, stream=s2).sort_stats("cumulative").print_stats(30)
        say(s.getvalue())
        say(s2.getvalue())
        rc = replay_cost(eng) if torch.cuda.is_available() else {}
        say("   graph launch host us per bucket: "
            + ", ".join(f"{b}: {u:.0f}" for b, u in rc.items()))  # fmt: skip
        del eng
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "engine_host_profile.txt").write_text(report.getvalue())
    return 0


if __name__ == "__main__":
    sys.exit(main())
