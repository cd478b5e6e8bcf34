"""Elementwise ops of a layer: in-place RoPE on the layer's fresh activations and the SwiGLU
gate. `naive.py` holds the torch paths (the reference), `triton_kernels.py` one fused kernel
per op with the same fp32/fp64 operations, so the two give the same bits."""
