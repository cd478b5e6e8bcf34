"""Sparse attention with sink over paged ds41 caches (SPEC section 8)."""
