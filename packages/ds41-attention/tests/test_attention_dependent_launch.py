"""Programmatic dependent launch (`ds41_cache.ops.launch`): the Hopper Gluon kernel takes part
(checked on the source; the runner's GPU test checks the bits of a model step with it)."""

from pathlib import Path

import ds41_attention
from ds41_cache.testing import dependent_launch_sites


def test_gluon_kernel_follows_the_dependent_launch_contract() -> None:
    kernels, bad = dependent_launch_sites(Path(ds41_attention.__file__).parent)
    assert "ops/sparse_attention/gluon_kernels.py:_gluon_sparse_attn_kernel" in kernels
    assert "ops/sparse_attention/gluon_pair_kernels.py:_gluon_pair_attn_kernel" in kernels
    assert bad == []
