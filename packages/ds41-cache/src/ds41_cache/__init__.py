"""ds41-cache: every byte stored in a ds41 KV cache.

Formats (SPEC section 4), paged layout, quantize/dequantize, RoPE + quantize + insert,
gather + decode, the compressor (SPEC section 5) and `sparse_paged_indices` (SPEC section 7).
"""

from .allocator import CacheFullError, PageAllocator
from .backend import Backend, resolve_backend
from .codec import decode, encode, quantize_dequantize
from .compressor import Compressor
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
from .indices import sparse_paged_indices
from .outputs import empty, poisoned_allocations
from .paged import PagedCache, default_page_stride, lookup_slots
from .rope import RopeConfig, apply_rope, rope_freqs

__all__ = [
    "E2M1_MAX",
    "E4M3_MAX",
    "FORMATS",
    "MXFP4_BLOCK",
    "MXFP8_BLOCK",
    "NVFP4_BLOCK",
    "PAGE_ALIGN",
    "Backend",
    "CacheFullError",
    "Compressor",
    "PageAllocator",
    "PagedCache",
    "RopeConfig",
    "RowLayout",
    "apply_rope",
    "decode",
    "default_page_stride",
    "empty",
    "encode",
    "lookup_slots",
    "poisoned_allocations",
    "quantize_dequantize",
    "resolve_backend",
    "rope_freqs",
    "row_layout",
    "sparse_paged_indices",
]
