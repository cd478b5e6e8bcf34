"""Issue 12, tenth session, second round (helper idx10b, lab): the persistent-grid lab kernel
(`gluon12_kernels.py`, `PERSIST`) in place of `ops/logits/gluon_kernels.py`, as a pytest plugin
(`-p gluon12_plugin`) or in one process (`shim()`, `use()`; `gluon12_lab.py`).

The stand-in module holds the lab module's constants and functions, with
`_gluon_logits_kernel[grid](...)` (the launcher's call: grid (rows, programs a row), the
package's 27 positional arguments, NC and TILES by keyword) launching
- NC = 1: the persistent kernel with items of TILES tiles (the launcher's TILES, or the
  shim's `item_tiles`), grid (P, 1), P = min(items, slots(TILES)), where slots(TILES) comes
  from GLUON12_SLOTS ("TILES:slots,...", 0 = the device's SMs x 4, one wave; default
  `DEFAULT_SLOTS`, which gives small P to the shapes the tests ask for, so the tests' programs
  run many items and cross rows; the lab passes `slots` itself); items claimed one at a time
  (DYN) for the TILES in GLUON12_DYN (default `DEFAULT_DYN`: the tests run both ways; the lab
  passes `dyn` itself), from one zeroed counter pair per device that every launch leaves
  zeroed;
- NC = 2: the package's kernel (PERSIST off: the package's SASS).
Every Gluon launch of the tests (`tests/test_gluon_logits.py`: bitwise against the Triton
kernel at every program shape, edge scale bytes and queries, bad pages, rows alone, graph
replay; `tests/test_gpu.py`) then runs the lab kernel. With GLUON12_COUNT=FILE each process
appends its number of persistent launches to FILE at exit (a run shows the lab kernel ran).

    PYTHONPATH=<the four packages' src>:packages/ds41-indexer/scripts/issue12 \\
      python3 -m pytest -p gluon12_plugin -m gpu packages/ds41-indexer/tests -n 4
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import sys
import types
from collections.abc import Callable

HERE = os.path.dirname(os.path.abspath(__file__))
NAME = "ds41_indexer.ops.logits.gluon_kernels"
DEFAULT_SLOTS = "16:7,32:3,64:61,128:0"
DEFAULT_DYN = "16,64"
_COUNTERS: dict[object, object] = {}
LAUNCHES = [0, 0, 0]  # persistent, package kernel, persistent with DYN
PROGRAMS_PER_SM = 4  # 65,536 registers / (256 threads x 64): the package kernel's occupancy


def _load_lab() -> types.ModuleType:
    if "gluon12_kernels" in sys.modules:
        return sys.modules["gluon12_kernels"]
    spec = importlib.util.spec_from_file_location(
        "gluon12_kernels", os.path.join(HERE, "gluon12_kernels.py")
    )
    assert spec is not None and spec.loader is not None
    lab = importlib.util.module_from_spec(spec)
    sys.modules["gluon12_kernels"] = lab
    spec.loader.exec_module(lab)
    return lab


def one_wave(device) -> int:  # type: ignore[no-untyped-def]
    """Program slots of one wave on `device` (SMs x PROGRAMS_PER_SM)."""
    import torch

    return torch.cuda.get_device_properties(device).multi_processor_count * PROGRAMS_PER_SM


def slots_from_env(spec: str | None = None) -> Callable[[int, object], int]:
    """slots(TILES, device) from a "TILES:slots,..." string (0 or a missing TILES: one wave)."""
    text = os.environ.get("GLUON12_SLOTS", DEFAULT_SLOTS) if spec is None else spec
    table = {int(k): int(v) for k, v in (x.split(":") for x in text.split(",") if x)}

    def slots(tiles: int, device: object) -> int:
        n = table.get(tiles, 0)
        return n if n > 0 else one_wave(device)

    return slots


def counters(device):  # type: ignore[no-untyped-def]
    """The DYN claim / exit counters of `device` (int32 [2], zeroed once; launches leave them
    zeroed)."""
    import torch

    if device not in _COUNTERS:
        if torch.cuda.is_current_stream_capturing():
            # (a buffer allocated in a capture belongs to the graph's pool)
            raise RuntimeError("gluon12_plugin.counters: allocate before any graph capture")
        _COUNTERS[device] = torch.zeros(2, dtype=torch.int32, device=device)
    return _COUNTERS[device]


def dyn_from_env(spec: str | None = None) -> Callable[[int], bool]:
    """dyn(TILES) from a "TILES,..." string (GLUON12_DYN)."""
    text = os.environ.get("GLUON12_DYN", DEFAULT_DYN) if spec is None else spec
    tiles = {int(x) for x in text.split(",") if x}
    return lambda t: t in tiles


class _PersistKernel:
    """`kernel[grid](*args, **kw)` as the package launcher calls it, on the lab kernel."""

    def __init__(self, kernel, slots: Callable[[int, object], int], item_tiles: int | None,
                 dyn: Callable[[int], bool]) -> None:  # type: ignore[no-untyped-def]  # fmt: skip
        self.kernel = kernel
        self.slots = slots
        self.item_tiles = item_tiles
        self.dyn = dyn

    def __getitem__(self, grid):  # type: ignore[no-untyped-def]
        rows = grid[0]

        def run(*args, **kw):  # type: ignore[no-untyped-def]
            ctr = counters(args[0].device)
            if kw["NC"] != 1:
                LAUNCHES[1] += 1
                return self.kernel[grid](*args, n_rows=rows, ctr_ptr=ctr, PERSIST=False,
                                         DYN=False, **kw)  # fmt: skip
            spans = args[26]  # done_cols: spans of a row
            tiles = self.item_tiles or kw["TILES"]
            items = rows * -(-spans // (tiles // 16))
            p = min(items, self.slots(tiles, args[0].device))
            dyn = self.dyn(tiles)
            LAUNCHES[0] += 1
            LAUNCHES[2] += int(dyn)
            kw = {**kw, "TILES": tiles}
            return self.kernel[(p, 1)](*args, n_rows=rows, ctr_ptr=ctr, PERSIST=True, DYN=dyn,
                                       **kw)  # fmt: skip

        return run


def shim(
    slots: Callable[[int, object], int] | None = None,
    item_tiles: int | None = None,
    dyn: bool | None = None,
) -> types.ModuleType:
    """A stand-in for `ops/logits/gluon_kernels.py` launching the lab kernel (items of
    `item_tiles` tiles, or of the launcher's TILES; DYN as `dyn`, or per GLUON12_DYN)."""
    lab = _load_lab()
    mod = types.ModuleType(NAME)
    mod.__dict__.update({k: v for k, v in lab.__dict__.items() if not k.startswith("__")})
    pick = dyn_from_env() if dyn is None else (lambda _t: dyn)
    kern = _PersistKernel(lab._gluon_logits_kernel, slots or slots_from_env(), item_tiles, pick)
    mod._gluon_logits_kernel = kern  # type: ignore[attr-defined]
    return mod


def use(mod: types.ModuleType) -> None:
    """Make `mod` the module `gluon_launch` launches (it imports `gluon_kernels` at each call)."""
    import ds41_indexer.ops.logits as pkg

    sys.modules[NAME] = mod
    pkg.gluon_kernels = mod  # type: ignore[attr-defined]


def pytest_configure(config) -> None:  # type: ignore[no-untyped-def]
    use(shim())
    import torch

    if torch.cuda.is_available():
        counters(torch.device("cuda", torch.cuda.current_device()))
    count = os.environ.get("GLUON12_COUNT")
    if count:
        slots = os.environ.get("GLUON12_SLOTS", DEFAULT_SLOTS)
        dyn_tiles = os.environ.get("GLUON12_DYN", DEFAULT_DYN)

        def _write() -> None:
            with open(count, "a") as f:
                f.write(
                    f"pid {os.getpid()}: {LAUNCHES[0]} persistent launches ({LAUNCHES[2]} DYN), "
                    f"{LAUNCHES[1]} package-kernel launches (NC 2), slots {slots}, DYN at "
                    f"{dyn_tiles}\n"
                )

        atexit.register(_write)


def pytest_report_header(config) -> str:  # type: ignore[no-untyped-def]
    return (
        f"gluon12_plugin: {NAME} -> scripts/issue12/gluon12_kernels.py (PERSIST for NC 1), "
        f"slots {os.environ.get('GLUON12_SLOTS', DEFAULT_SLOTS)}, DYN at "
        f"{os.environ.get('GLUON12_DYN', DEFAULT_DYN)}"
    )
