"""`candidates.candidate_blocks` on the Triton backend: the block scores and the entry mask,
one launch each around the indexer's top-k (`triton_kernels`); the torch path in
`candidates.py` is the reference."""
