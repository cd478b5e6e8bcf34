import os

import torch
from hypothesis import HealthCheck, settings

if not torch.cuda.is_available():
    # Must happen before anything imports triton.
    os.environ.setdefault("TRITON_INTERPRET", "1")

from ds41_cache.testing import (  # noqa: F401
    _poison_library_allocations,
    device,
    pytest_collection_modifyitems,
    pytest_configure,
)

# Hypothesis profiles, picked by HYPOTHESIS_PROFILE: `ci` (the default) draws few examples in a
# fixed order (derandomize) so a CI run is deterministic and cheap under the Triton
# interpreter; `long` draws many, randomly.
settings.register_profile(
    "ci",
    max_examples=10,
    deadline=None,
    derandomize=True,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "long", max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
