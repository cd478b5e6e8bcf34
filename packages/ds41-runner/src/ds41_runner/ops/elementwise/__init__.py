"""The SwiGLU gate of a layer: `naive.py` holds the torch path (the reference),
`triton_kernels.py` one fused kernel with the same fp32/fp64 operations, so the two give the
same bits. (The layer's in-place RoPE is `ds41_cache.rope.rope_inplace`.)"""
