"""Programmatic dependent launch (`ds41_cache.ops.launch`): every kernel of this package that
takes part follows the contract (checked on the source; the GPU tests check the bits)."""

from pathlib import Path

import ds41_runner
from ds41_cache.testing import dependent_launch_sites


def test_kernels_follow_the_dependent_launch_contract() -> None:
    kernels, bad = dependent_launch_sites(Path(ds41_runner.__file__).parent)
    assert kernels, "no kernel takes part"
    assert bad == []
