"""Sessions for the ds41 monorepo.

Default (`nox`): lint, typecheck, the tests of every package (each in its own environment
holding only that package and its ds41 dependencies, so an undeclared import fails), the
cross-package integration tests, and `wheels` (each package built and installed alone from its
wheel, its README example run outside the repository).

Environments are made with uv where it is installed (`pip install nox uv`), else virtualenv.
uv keeps one wheel cache for every session and links the files from it, so the CPU torch wheel
is unpacked once and shared by all environments. uv does not read pip's configuration: the
noxfile hands it the indexes and find-links pip is configured with (`pip config list`, the
PIP_* variables), which is how this kind of machine finds the local CPU torch wheel, and
`constraints-cpu.txt` pins that wheel's version. Triton kernels run under the interpreter on
the CPU (TRITON_INTERPRET=1).

Other sessions: `run` (the main job: the runner's Hydra app; overrides after `--`), `fuzz`
(the package suites under the long Hypothesis profile), `soak` (the engine soak, ~2 minutes;
CI runs its 20-second smoke inside tests(runner)), `build` (wheel + sdist per package into
dist/), `gpu` and `bench` (for machines with a CUDA device and nox; the lent H200 has no nox,
see `scripts/gpu_check.sh`).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import nox

nox.options.sessions = ["lint", "typecheck", "tests", "integration", "wheels"]
nox.options.reuse_existing_virtualenvs = True
nox.options.error_on_missing_interpreters = True
nox.options.default_venv_backend = "uv|virtualenv"

ROOT = Path(__file__).resolve().parent
CONSTRAINTS = ("-c", "constraints-cpu.txt")
TEST_DEPS = ("pytest>=8", "pytest-xdist>=3", "hypothesis>=6")

# Each package with the ds41 packages it depends on. Layering: ds41_cache <- ds41_indexer,
# ds41_attention (siblings: each depends on the cache only) <- ds41_runner.
PACKAGES: dict[str, tuple[str, ...]] = {
    "cache": ("ds41-cache",),
    "indexer": ("ds41-cache", "ds41-indexer"),
    "attention": ("ds41-cache", "ds41-attention"),
    "runner": ("ds41-cache", "ds41-indexer", "ds41-attention", "ds41-runner"),
}
ALL = PACKAGES["runner"]

# One torch thread per pytest-xdist worker (2 workers on the 2-core CI machine). The cases
# that prove results do not move when torch splits work across threads run again below with
# THREADED_ENV, without xdist.
CPU_ENV = {"TRITON_INTERPRET": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
THREADED_ENV = {"TRITON_INTERPRET": "1", "OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "2"}
THREADED_TESTS: dict[str, tuple[str, ...]] = {
    "cache": ("packages/ds41-cache/tests/test_compressor.py::"
              "test_ratio2_rows_unchanged_inside_a_large_batch",),
}  # fmt: skip


def _pip_config() -> dict[str, str]:
    """pip's effective settings (`pip config list` plus PIP_* variables), key -> value."""
    out: dict[str, str] = {}
    try:
        text = subprocess.run(
            [sys.executable, "-m", "pip", "config", "list"],
            capture_output=True, text=True, timeout=60, check=False,
        ).stdout  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        text = ""
    for line in text.splitlines():
        m = re.match(r"^[^.]*\.([a-z-]+)='(.*)'$", line.strip())
        if m:
            out[m.group(1)] = m.group(2)
    for key in ("index-url", "extra-index-url", "find-links"):
        env = os.environ.get("PIP_" + key.upper().replace("-", "_"))
        if env:
            out[key] = env
    return out


def _uv_env() -> dict[str, str]:
    """uv's variables for the sources pip uses here (unless the caller set uv's own)."""
    pip = _pip_config()
    env: dict[str, str] = {}
    if "index-url" in pip and "UV_DEFAULT_INDEX" not in os.environ:
        env["UV_DEFAULT_INDEX"] = pip["index-url"]
    if "extra-index-url" in pip and "UV_INDEX" not in os.environ:
        env["UV_INDEX"] = " ".join(pip["extra-index-url"].split())
    if "find-links" in pip and "UV_FIND_LINKS" not in os.environ:
        env["UV_FIND_LINKS"] = ",".join(pip["find-links"].split())
    if env and "UV_INDEX_STRATEGY" not in os.environ:
        # pip picks the best version across all its sources; uv by default takes a package
        # from the first index that has it (e.g. an older ruff from a local mirror).
        env["UV_INDEX_STRATEGY"] = "unsafe-best-match"
    return env


# Set once for the whole nox process: every session's installs see the same sources.
os.environ.update(_uv_env())


def _editables(dists: tuple[str, ...]) -> list[str]:
    # The `bench` extra (rich, matplotlib) is declared by every package that has a benchmark;
    # the runner needs both anyway.
    return [
        arg
        for dist in dists
        for arg in ("-e", f"packages/{dist}" + ("" if dist == "ds41-runner" else "[bench]"))
    ]


def _install(session: nox.Session, dists: tuple[str, ...], *extra: str) -> None:
    session.install(*CONSTRAINTS, *extra, *_editables(dists))


def _uv_bin() -> str | None:
    """The uv executable nox uses, if any."""
    found = shutil.which("uv")
    if found:
        return found
    try:
        from uv import find_uv_bin  # the `uv` package installed beside nox

        return str(find_uv_bin())
    except (ImportError, FileNotFoundError):
        return None


@nox.session
@nox.parametrize("package", list(PACKAGES), ids=list(PACKAGES))
def tests(session: nox.Session, package: str) -> None:
    """One package's tests in an environment holding only that package and its dependencies."""
    _install(session, PACKAGES[package], *TEST_DEPS)
    session.run(
        "pytest", f"packages/ds41-{package}/tests", "-n", "2", "--durations=5",
        *session.posargs, env=CPU_ENV,
    )  # fmt: skip
    if package in THREADED_TESTS and not session.posargs:
        session.run("pytest", *THREADED_TESTS[package], "-p", "no:xdist", env=THREADED_ENV)


@nox.session
@nox.parametrize("package", list(PACKAGES), ids=list(PACKAGES))
def fuzz(session: nox.Session, package: str) -> None:
    """One package's tests under the long Hypothesis profile (HYPOTHESIS_PROFILE=long)."""
    _install(session, PACKAGES[package], *TEST_DEPS)
    session.run(
        "pytest", f"packages/ds41-{package}/tests", "-n", "2", *session.posargs,
        env=CPU_ENV | {"HYPOTHESIS_PROFILE": "long"},
    )  # fmt: skip


@nox.session
def soak(session: nox.Session) -> None:
    """The engine soak (`python -m ds41_runner.soak`): ~2 minutes of random arrivals, aborts,
    chunk sizes and preemption on the CPU `tiny` model, a sample checked bitwise against each
    request alone, zero leaks; pass other arguments after `--` (e.g. `-- --seconds 600`)."""
    _install(session, ALL)
    args = session.posargs or ["--seconds", "120", "--requests", "100000", "--seed", "0"]
    session.run("python", "-m", "ds41_runner.soak", *args, "--json", "soak.json", env=CPU_ENV)


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


def _build(session: nox.Session, dist_dir: Path, *, sdist: bool = True) -> None:
    """Each package's wheel (and sdist) into `dist_dir`, from the package's source tree."""
    uv = _uv_bin()
    kinds = ("--sdist", "--wheel") if sdist else ("--wheel",)
    for dist in ALL:
        if uv is not None:
            session.run(uv, "build", "-q", *kinds, f"packages/{dist}", "--out-dir",
                        str(dist_dir), external=True)  # fmt: skip
        else:
            session.run("python", "-m", "build", *kinds, f"packages/{dist}", "--outdir",
                        str(dist_dir))  # fmt: skip


@nox.session
def build(session: nox.Session) -> None:
    """A wheel and an sdist of every package, into dist/."""
    if _uv_bin() is None:
        session.install("build")
    dist_dir = ROOT / "dist"
    shutil.rmtree(dist_dir, ignore_errors=True)
    _build(session, dist_dir)
    for f in sorted(dist_dir.glob("ds41_*")):
        session.log(f"built {f.name} ({f.stat().st_size / 1e3:.0f} kB)")


# The example a package's README offers for the wheels test: the python block right after a
# line `<!-- example: run -->`, else the README's first python block.
README_MARKED = re.compile(r"^<!-- example: run -->\s*\n```python\n(.*?)^```", re.S | re.M)
README_FIRST = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
# READMEs whose python blocks are signatures, not runnable code (until their owners mark a
# runnable example): the wheel is still installed alone and imported, and the log says so.
EXAMPLE_PENDING: set[str] = set()


def _readme_example(dist: str) -> str | None:
    readme = (ROOT / "packages" / dist / "README.md").read_text()
    m = README_MARKED.search(readme)
    if m is None and dist not in EXAMPLE_PENDING:
        m = README_FIRST.search(readme)
    return None if m is None else m.group(1)


@nox.session
def wheels(session: nox.Session) -> None:
    """Each package's wheel alone in a fresh environment runs its README example.

    The environment gets the wheel and what its metadata declares (the ds41 packages it depends
    on come from the wheels just built, nothing else from the repository); the example runs in
    an empty directory outside the repository, so nothing resolves from the checkout.
    """
    if _uv_bin() is None:
        session.install("build")
    work = Path(tempfile.mkdtemp(prefix="ds41-wheels-"))
    try:
        dist_dir = work / "dist"
        _build(session, dist_dir, sdist=False)
        if not list(dist_dir.glob("*.whl")):
            session.skip("no wheels were built (nox --install-only skips the builds)")
        for dist in ALL:
            module = dist.replace("-", "_")
            env_dir = work / f"venv-{dist}"
            wheel = next(dist_dir.glob(module + "-*.whl"))
            _fresh_env_install(session, env_dir, wheel, dist_dir)
            py = str(env_dir / "bin" / "python")
            env = CPU_ENV | {"PYTHONPATH": ""}
            example = _readme_example(dist)
            if example is None:
                session.warn(
                    f"{dist}: README has no runnable example (marked `<!-- example: run -->`); "
                    "the wheel is only installed and imported"
                )
                code = f"import {module}; print({module}.__name__, 'imports')"
                with session.chdir(work):
                    session.run(py, "-c", code, external=True, env=env)
                continue
            script = work / f"{dist}-example.py"
            script.write_text(example)
            session.log(f"{dist}: {wheel.name} alone, README example")
            with session.chdir(work):
                session.run(py, str(script), external=True, env=env)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _fresh_env_install(session: nox.Session, env_dir: Path, wheel: Path, dist_dir: Path) -> None:
    uv = _uv_bin()
    # A command-line --find-links replaces the environment's (uv and pip alike): pass both.
    links = [str(dist_dir), *os.environ.get("UV_FIND_LINKS", "").replace(",", " ").split()]
    sources = tuple(arg for link in links for arg in ("--find-links", link))
    cons = ("-c", str(ROOT / "constraints-cpu.txt"))
    if uv is not None:
        session.run(uv, "venv", "-q", str(env_dir), "--python", sys.executable, external=True)
        session.run(uv, "pip", "install", "-q", "--python", str(env_dir / "bin" / "python"),
                    *cons, *sources, str(wheel), external=True)  # fmt: skip
    else:
        session.run(sys.executable, "-m", "venv", str(env_dir), external=True)
        session.run(str(env_dir / "bin" / "python"), "-m", "pip", "install", "-q", *cons,
                    *sources, str(wheel), external=True)  # fmt: skip


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
