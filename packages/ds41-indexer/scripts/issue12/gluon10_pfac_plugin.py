"""Issue 12, ninth session, round 2 (lab): a pytest plugin that runs the package's own tests
with the lab kernel `gluon10_kernels.py` (PFAC and LIM on) in place of
`ops/logits/gluon_kernels.py`.

`gluon_launch.launch_gluon_logits` imports `gluon_kernels` at each call; this plugin installs,
before any test runs, a stand-in module under that name: the lab module's constants and
functions, with `_gluon_logits_kernel[grid](...)` launching the lab kernel with the knobs named
in GLUON10_KNOBS (comma-separated, default "PFAC,LIM") set to True and PREGS from
GLUON10_PREGS (default the package's 24). Every Gluon launch of the tests
(`tests/test_gluon_logits.py`: bitwise against the Triton kernel at every program shape, edge
scale bytes and queries, bad pages, rows alone, graph replay; `tests/test_gpu.py`) then runs
the lab kernel. The report header names the kernel; with GLUON10_COUNT=FILE each process
appends its number of lab launches to FILE at exit (so a run shows the lab kernel ran).

    PYTHONPATH=<the four packages' src>:packages/ds41-indexer/scripts/issue12 \
      python3 -m pytest -p gluon10_pfac_plugin -m gpu packages/ds41-indexer/tests -n 4
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import sys
import types

HERE = os.path.dirname(os.path.abspath(__file__))
NAME = "ds41_indexer.ops.logits.gluon_kernels"
LAUNCHES = [0]


class _PfacKernel:
    """`kernel[grid](*args, **kw)` launching the lab kernel with the given knobs."""

    def __init__(self, kernel, knobs: dict[str, object]) -> None:  # type: ignore[no-untyped-def]
        self.kernel = kernel
        self.knobs = knobs

    def __getitem__(self, grid):  # type: ignore[no-untyped-def]
        launch = self.kernel[grid]

        def run(*args, **kw):  # type: ignore[no-untyped-def]
            LAUNCHES[0] += 1
            return launch(*args, **self.knobs, **kw)

        return run


def knobs() -> dict[str, object]:
    """The lab knobs of this run (GLUON10_KNOBS, GLUON10_PREGS)."""
    names = [k for k in os.environ.get("GLUON10_KNOBS", "PFAC,LIM").split(",") if k]
    pregs = int(os.environ.get("GLUON10_PREGS", "24"))
    return {**dict.fromkeys(names, True), "PREGS": pregs}


def _install() -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(
        "gluon10_kernels", os.path.join(HERE, "gluon10_kernels.py")
    )
    assert spec is not None and spec.loader is not None
    lab = importlib.util.module_from_spec(spec)
    sys.modules["gluon10_kernels"] = lab
    spec.loader.exec_module(lab)
    shim = types.ModuleType(NAME)
    shim.__dict__.update({k: v for k, v in lab.__dict__.items() if not k.startswith("__")})
    shim._gluon_logits_kernel = _PfacKernel(lab._gluon_logits_kernel, knobs())  # type: ignore[attr-defined]
    import ds41_indexer.ops.logits as pkg

    sys.modules[NAME] = shim
    pkg.gluon_kernels = shim  # type: ignore[attr-defined]
    count = os.environ.get("GLUON10_COUNT")
    if count:

        def _write() -> None:
            with open(count, "a") as f:
                f.write(f"pid {os.getpid()}: {LAUNCHES[0]} lab launches {knobs()}\n")

        atexit.register(_write)
    return shim


def pytest_configure(config) -> None:  # type: ignore[no-untyped-def]
    _install()


def pytest_report_header(config) -> str:  # type: ignore[no-untyped-def]
    return f"gluon10_pfac_plugin: {NAME} -> scripts/issue12/gluon10_kernels.py, {knobs()}"
