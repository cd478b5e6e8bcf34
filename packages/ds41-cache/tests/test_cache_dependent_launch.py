"""Programmatic dependent launch (`ds41_cache.ops.launch`): every kernel of this package that
takes part follows the contract (checked on the source; the GPU tests check the bits)."""

from pathlib import Path

import ds41_cache
from ds41_cache.testing import dependent_launch_sites


def test_kernels_follow_the_dependent_launch_contract() -> None:
    kernels, bad = dependent_launch_sites(Path(ds41_cache.__file__).parent)
    assert kernels, "no kernel takes part"
    assert bad == []


def test_dependent_launch_off_where_it_cannot_run(monkeypatch) -> None:
    """CPU tensors, the interpreter and DS41_PDL=0 give ordinary launches ({"GDC": False});
    on sm_90+ CUDA the kernel's GDC and the launch option come together. The decision is
    cached per device until `refresh()`."""
    import torch

    from ds41_cache.ops import launch

    assert launch.dependent_launch(torch.device("cpu")) == {"GDC": False}
    monkeypatch.setattr(launch, "_capability", lambda index: (9, 0))
    monkeypatch.setattr(launch, "interpreter_active", lambda: False)
    cuda = torch.device("cuda", 0)
    try:
        monkeypatch.setenv(launch.PDL_ENV, "1")
        launch.refresh()
        assert launch.dependent_launch(cuda) == {"GDC": True, "launch_pdl": True}
        monkeypatch.setenv(launch.PDL_ENV, "0")
        assert launch.dependent_launch(cuda) == {"GDC": True, "launch_pdl": True}  # cached
        launch.refresh()
        assert launch.dependent_launch(cuda) == {"GDC": False}
        monkeypatch.setenv(launch.PDL_ENV, "1")
        monkeypatch.setattr(launch, "_capability", lambda index: (8, 0))
        launch.refresh()
        assert launch.dependent_launch(cuda) == {"GDC": False}
        monkeypatch.setattr(launch, "_capability", lambda index: (9, 0))
        monkeypatch.setattr(launch, "interpreter_active", lambda: True)
        launch.refresh()
        assert launch.dependent_launch(cuda) == {"GDC": False}
    finally:
        monkeypatch.undo()
        launch.refresh()


def test_contract_check_finds_violations(tmp_path: Path) -> None:
    """The source check can fail: a kernel that reads before waiting, a GDC without a False
    default, a launch of a kernel without GDC (also from another module), and a Gluon kernel entered
    the Triton way."""
    (tmp_path / "k.py").write_text(
        "import triton\n"
        "@triton.jit\n"
        "def late(x, GDC: tl.constexpr = False):\n"
        "    y = x + 1\n"
        "    enter_dependent(GDC)\n"
        "@triton.jit\n"
        "def nodefault(x, GDC: tl.constexpr):\n"
        "    enter_dependent(GDC)\n"
        "@triton.jit\n"
        "def plain(x):\n"
        "    pass\n"
        "def launch(x):\n"
        "    plain[(1,)](x, **dependent_launch(x.device))\n"
        "@gluon.jit\n"
        "def triton_entry(x, GDC: gl.constexpr = False):\n"
        "    enter_dependent(GDC)\n"
        "@gluon.jit\n"
        "def gluon_ok(x, GDC: gl.constexpr = False):\n"
        "    gluon_enter_dependent(GDC)\n"
    )
    (tmp_path / "l.py").write_text(
        "def launch(x):\n"
        "    k.gluon_ok[(1,)](x, **dependent_launch(x.device))\n"
        "    k.plain[(1,)](x, **dependent_launch(x.device))\n"
    )
    kernels, bad = dependent_launch_sites(tmp_path)
    assert kernels == ["k.py:late", "k.py:nodefault", "k.py:triton_entry", "k.py:gluon_ok"]
    assert len(bad) == 5
    assert "l.py:3: dependent_launch for 'plain', no GDC" in bad
    assert "k.py:triton_entry: first statement must be gluon_enter_dependent(GDC)" in bad
