import os

import torch

if not torch.cuda.is_available():
    # Must happen before anything imports triton.
    os.environ.setdefault("TRITON_INTERPRET", "1")

from ds41_cache.testing import (  # noqa: F401
    _poison_library_allocations,
    device,
    pytest_collection_modifyitems,
    pytest_configure,
)

if os.environ.get("DS41_TEST_PIN_TRITON") == "1":
    # Test-only switch for `scripts/sanitize.sh`: racecheck cannot follow the Gluon kernel's
    # mbarrier protocol (ConSan checks that kernel instead), so its run pins the Triton kernel.
    from ds41_attention import sparse_attention as _sa

    _sa.GLUON_DEFAULT = False
