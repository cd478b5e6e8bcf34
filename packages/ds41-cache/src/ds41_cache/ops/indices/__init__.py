"""`sparse_paged_indices` (SPEC section 7): torch reference (`naive`) and Triton kernel."""
