"""ds41-attention: batch-invariant sparse MQA attention with sink over paged ds41 caches."""

from .ops.sparse_attention.naive import reference_sparse_attention, torch_sparse_attention
from .sparse_attention import COMPRESSED_FORMATS, WINDOW_FORMATS, sparse_attention

__all__ = [
    "COMPRESSED_FORMATS",
    "WINDOW_FORMATS",
    "reference_sparse_attention",
    "sparse_attention",
    "torch_sparse_attention",
]
