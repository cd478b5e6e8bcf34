"""Fused RoPE + quantize + paged insert, and paged gather + decode."""
