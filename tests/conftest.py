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
