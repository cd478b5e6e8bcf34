"""Cache throughput: `python -m ds41_cache.bench [--smoke] [--json PATH]`.

Measures GB/s of `insert` (RoPE + quantize + paged write of bf16 rows) and `gather` (paged read +
decode to bf16) for the V4.1-Flash geometry (D = 512, page_size 64) in the mxfp8 and nvfp4
formats. On CUDA: Triton backend, CUDA events, warmup, median of the timed repeats. `--smoke`
runs a few small CPU cases with the torch backend (seconds), for tests.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import torch

from .insert import gather, insert
from .paged import PagedCache
from .rope import RopeConfig, rope_freqs

FLASH_DIM = 512
FLASH_ROPE = RopeConfig(rope_dim=64, base=160000.0, yarn_factor=16.0, yarn_orig=65536)
PAGE_SIZE = 64
FULL_ROWS = (1024, 16 * 1024, 128 * 1024)
SMOKE_ROWS = (128,)


@dataclass
class Result:
    op: str
    fmt: str
    rows: int
    backend: str
    device: str
    median_us: float
    bytes_moved: int

    @property
    def gbps(self) -> float:
        return self.bytes_moved / (self.median_us * 1e-6) / 1e9


def _time_cuda(fn: Callable[[], None], warmup: int, reps: int) -> float:
    for _ in range(warmup):
        fn()
    times: list[float] = []
    for _ in range(reps):
        start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return statistics.median(times)


def _time_cpu(fn: Callable[[], None], warmup: int, reps: int) -> float:
    for _ in range(warmup):
        fn()
    times: list[float] = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(times)


def bench_case(
    fmt: str, rows: int, device: torch.device, backend: str, warmup: int, reps: int
) -> list[Result]:
    """Time insert and gather of `rows` random bf16 rows scattered over shuffled pages."""
    gen = torch.Generator().manual_seed(rows)
    num_pages = -(-rows // PAGE_SIZE)
    cache = PagedCache.allocate(fmt, FLASH_DIM, PAGE_SIZE, num_pages, device=device)
    x = torch.randn(rows, FLASH_DIM, generator=gen).to(device=device, dtype=torch.bfloat16)
    page_order = torch.randperm(num_pages, generator=gen)
    slot_ids = (page_order[:, None] * PAGE_SIZE + torch.arange(PAGE_SIZE)).flatten()[:rows]
    slots = slot_ids.to(device)
    positions = torch.arange(rows, device=device)
    freqs = rope_freqs(FLASH_ROPE, device=device)
    timer = _time_cuda if device.type == "cuda" else _time_cpu
    record = cache.layout.bytes_per_token * rows
    bf16_rows = 2 * FLASH_DIM * rows

    def do_insert() -> None:
        insert(cache, x, slots, positions=positions, freqs=freqs, backend=backend, validate=False)

    def do_gather() -> None:
        gather(cache, slots, backend=backend, validate=False)

    t_ins = timer(do_insert, warmup, reps)
    t_gat = timer(do_gather, warmup, reps)
    dev = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    return [
        Result("insert", fmt, rows, backend, dev, t_ins, bf16_rows + record),
        Result("gather", fmt, rows, backend, dev, t_gat, record + bf16_rows),
    ]


def run(smoke: bool) -> list[Result]:
    cuda = torch.cuda.is_available() and not smoke
    device = torch.device("cuda" if cuda else "cpu")
    backend = "triton" if cuda else "torch"
    rows_list = SMOKE_ROWS if smoke or not cuda else FULL_ROWS
    warmup, reps = (1, 3) if not cuda else (5, 20)
    results: list[Result] = []
    for fmt in ("mxfp8", "nvfp4"):
        for rows in rows_list:
            results.extend(bench_case(fmt, rows, device, backend, warmup, reps))
    return results


def print_table(results: Sequence[Result]) -> None:
    from rich.console import Console
    from rich.table import Table

    title = f"ds41-cache insert/gather, D={FLASH_DIM}, page_size={PAGE_SIZE}"
    table = Table(title=title)
    for col in ("op", "fmt", "rows", "backend", "device", "median us", "GB/s"):
        table.add_column(col, justify="right" if col in ("rows", "median us", "GB/s") else "left")
    for r in results:
        table.add_row(
            r.op, r.fmt, str(r.rows), r.backend, r.device, f"{r.median_us:.1f}", f"{r.gbps:.3g}"
        )
    Console().print(table)


def main(argv: Sequence[str] | None = None) -> list[Result]:
    parser = argparse.ArgumentParser(prog="python -m ds41_cache.bench", description=__doc__)
    parser.add_argument("--smoke", action="store_true", help="tiny CPU run, torch backend")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    args = parser.parse_args(argv)
    results = run(args.smoke)
    print_table(results)
    if args.json:
        rows = [asdict(r) | {"gbps": r.gbps} for r in results]
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)
    return results


if __name__ == "__main__":
    main()
