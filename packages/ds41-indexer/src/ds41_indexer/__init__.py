"""ds41-indexer: the lightning indexer of DeepSeek-V4.1 (SPEC section 6).

Index queries and head weights, index-key writes, paged logits over the stored index-key
formats, candidate blocks, and the exact deterministic per-row top-k every backend agrees with.
"""

from .candidates import candidate_blocks
from .keys import rms_norm_rows, write_index_keys
from .logits import index_logits
from .paged import paged_index_topk
from .queries import head_weights, index_queries, index_queries_and_weights, prepare_index_queries
from .topk import index_topk
from .visible import visible_entries

__all__ = [
    "candidate_blocks",
    "head_weights",
    "index_logits",
    "index_queries",
    "index_queries_and_weights",
    "index_topk",
    "paged_index_topk",
    "prepare_index_queries",
    "rms_norm_rows",
    "visible_entries",
    "write_index_keys",
]
