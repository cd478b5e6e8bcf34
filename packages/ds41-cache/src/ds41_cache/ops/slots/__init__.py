"""`paged.lookup_slots`: torch reference (`naive`) and a Triton kernel for one slot per row."""
