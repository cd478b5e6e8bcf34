"""Sessions for the ds41 monorepo.

Default (`nox`): lint, typecheck, the tests of every package (each in its own virtualenv holding
only that package and its ds41 dependencies, so an undeclared import fails) and the
cross-package integration tests. CPU installs take the local CPU torch wheel through
`constraints-cpu.txt`. Triton kernels run under the interpreter there (TRITON_INTERPRET=1).

Other sessions: `run` (the main job: the runner's Hydra app; pass overrides after `--`),
`gpu` and `bench` (for machines with a CUDA device and nox; the H200 here has no nox, see
`scripts/gpu_check.sh`).
"""

from __future__ import annotations

import nox

nox.options.sessions = ["lint", "typecheck", "tests", "integration"]
nox.options.reuse_existing_virtualenvs = True
nox.options.error_on_missing_interpreters = True

CONSTRAINTS = ("-c", "constraints-cpu.txt")
TEST_DEPS = ("pytest>=8", "pytest-xdist>=3")

# Each package with the ds41 packages it depends on (layering: cache <- indexer <- attention
# <- runner; the indexer and attention packages depend on the cache only).
PACKAGES: dict[str, tuple[str, ...]] = {
    "cache": ("ds41-cache",),
    "indexer": ("ds41-cache", "ds41-indexer"),
    "attention": ("ds41-cache", "ds41-attention"),
    "runner": ("ds41-cache", "ds41-indexer", "ds41-attention", "ds41-runner"),
}
ALL = PACKAGES["runner"]
CPU_ENV = {"TRITON_INTERPRET": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def _install(session: nox.Session, dists: tuple[str, ...], *extra: str) -> None:
    # The `bench` extra (rich, matplotlib) is declared by every package that has a benchmark;
    # the runner needs both anyway.
    editable = [
        arg
        for dist in dists
        for arg in ("-e", f"packages/{dist}" + ("" if dist == "ds41-runner" else "[bench]"))
    ]
    session.install(*CONSTRAINTS, *extra, *editable)


@nox.session
@nox.parametrize("package", list(PACKAGES), ids=list(PACKAGES))
def tests(session: nox.Session, package: str) -> None:
    """One package's tests in a virtualenv holding only that package and its dependencies."""
    _install(session, PACKAGES[package], *TEST_DEPS)
    session.run(
        "pytest",
        f"packages/ds41-{package}/tests",
        "-n",
        "2",
        "--durations=5",
        *session.posargs,
        env=CPU_ENV,
    )


@nox.session
def integration(session: nox.Session) -> None:
    """Cross-package tests under tests/ (all four packages installed)."""
    _install(session, ALL, *TEST_DEPS)
    session.run("pytest", "tests", "--durations=5", *session.posargs, env=CPU_ENV)


@nox.session
def lint(session: nox.Session) -> None:
    session.install("ruff==0.17.6")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session
def typecheck(session: nox.Session) -> None:
    """mypy --strict on the public modules of every package."""
    _install(session, ALL, "mypy==2.4.1", "pytest>=8")
    session.run("mypy", *[f"packages/{dist}/src" for dist in ALL])


@nox.session
def run(session: nox.Session) -> None:
    """The main job: the runner's Hydra app (CPU default `model=tiny`); overrides after `--`."""
    _install(session, ALL)
    session.run("ds41-run", *session.posargs)


@nox.session
def gpu(session: nox.Session) -> None:
    """Every `gpu` test of every package, then the kernel benchmarks (needs CUDA)."""
    session.install(*TEST_DEPS, *[arg for d in ALL for arg in ("-e", f"packages/{d}")])
    session.run("bash", "scripts/gpu_check.sh", *session.posargs, external=True)


@nox.session
def bench(session: nox.Session) -> None:
    """The benchmarks alone (needs CUDA); results under benchmarks/results/."""
    session.install(*[arg for d in ALL for arg in ("-e", f"packages/{d}")])
    session.run("python", "benchmarks/run_all.py", *session.posargs)
