"""In-place RoPE with a step's (cos, sin) tables: torch reference (`naive`) and Triton kernel."""
