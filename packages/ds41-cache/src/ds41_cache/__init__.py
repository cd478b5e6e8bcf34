"""ds41-cache: every byte stored in a ds41 KV cache.

Formats (SPEC section 4), paged layout, quantize/dequantize, RoPE + quantize + insert,
gather + decode, the compressor (SPEC section 5) and `sparse_paged_indices` (SPEC section 7).
"""

from .alloc import empty, poisoned_allocations
from .backend import Backend, resolve_backend
from .formats import (
    E2M1_MAX,
    E4M3_MAX,
    FORMATS,
    MXFP4_BLOCK,
    MXFP8_BLOCK,
    NVFP4_BLOCK,
    PAGE_ALIGN,
    RowLayout,
    row_layout,
)
from .paged import PagedCache, default_page_stride

__all__ = [
    "E2M1_MAX",
    "E4M3_MAX",
    "FORMATS",
    "MXFP4_BLOCK",
    "MXFP8_BLOCK",
    "NVFP4_BLOCK",
    "PAGE_ALIGN",
    "Backend",
    "PagedCache",
    "RowLayout",
    "default_page_stride",
    "empty",
    "poisoned_allocations",
    "resolve_backend",
    "row_layout",
]
